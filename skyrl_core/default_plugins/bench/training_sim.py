"""The training loop in ``skyrl bench dispatch``'s simulation: synchronous vs asynchronous (``train.max_staleness``)
at chosen ratios of generation to training time. A **simulation**, not a measurement: the measured figures on this
machine are ``tests/benchmarks/bench_async_training.py`` (docs/training.md, "Asynchronous training").

Model: an engine with ``slots`` groups generating at once (first come, first served); each group takes a
log-normal time (median 1, sigma ``sigma``: agentic groups have long tails); a train step takes ``train_s`` on a
separate device, fixed per step. ``train_s`` is set from ``ratio`` = (mean synchronous rollout time of a step) /
``train_s``, so ``ratio`` 3 is a generation-bound loop and 0.5 a training-bound one. The asynchronous loop follows
:class:`skyrl_core.default_plugins.async_training.loop.AsyncRollouts`: a group is admitted while ``in_training + accepted + running <
min((k + 1) * batch, what the remaining steps consume)``, a step takes the first ``batch`` completed groups, a
group older than ``step - 1 - k`` is dropped and admitted again. ``k`` = 0 is the synchronous loop.
"""

from __future__ import annotations

import heapq
import random
from typing import Any


def simulate_loop(k: int, train_s: float, steps: int = 20, batch: int = 8, slots: int = 8, sigma: float = 0.8,
                  seed: int = 0) -> dict[str, Any]:
    """Simulated seconds of ``steps`` steps with ``max_staleness`` ``k``. Returns ``wall_s``, ``s_per_step``,
    ``engine_busy`` (fraction of slot-seconds generating), ``trainer_busy``, ``rollout_s_mean`` (the trainer's
    wait for data per step), ``max_staleness_seen`` and ``dropped_stale``."""
    rng = random.Random(seed)
    now = 0.0
    version = 0
    step = 0
    free = [0.0] * slots  # when each slot frees
    heapq.heapify(free)
    running: list[tuple[float, int, int]] = []  # (finish, seq, version at admission)
    buffer: list[tuple[int, int]] = []  # (version, seq) in completion order
    seq = 0
    in_training = 0
    train_until: float | None = None
    busy_slot_s = 0.0
    waits: list[float] = []
    wait_from = 0.0
    max_age = 0
    dropped = 0
    while step < steps:
        # admit while the bound allows (generation starts when a slot frees)
        cap = min((k + 1) * batch, (steps - step) * batch)
        while in_training + len(buffer) + len(running) < cap:
            start = max(now, heapq.heappop(free))
            duration = rng.lognormvariate(0.0, sigma)
            heapq.heappush(free, start + duration)
            busy_slot_s += duration
            heapq.heappush(running, (start + duration, seq, version))
            seq += 1
        # the trainer starts a step as soon as it is idle and a batch is complete
        if train_until is None:
            fresh = [(v, s) for v, s in buffer if v >= step - k]
            if len(fresh) < len(buffer):  # too old for this step: dropped, their places admitted again
                dropped += len(buffer) - len(fresh)
                buffer = fresh
                continue
            if len(buffer) >= batch:
                taken, buffer = buffer[:batch], buffer[batch:]
                max_age = max(max_age, max(step - v for v, _ in taken))
                waits.append(now - wait_from)
                in_training = batch
                train_until = now + train_s
                continue
        # advance to the next event: a group finishing or the train step ending
        next_group = running[0][0] if running else float("inf")
        if train_until is not None and train_until <= next_group:
            now = train_until
            train_until = None
            in_training = 0
            step += 1
            version = step
            wait_from = now
        else:
            finish, s, v = heapq.heappop(running)
            now = finish
            buffer.append((v, s))
    return {"wall_s": now, "s_per_step": now / steps, "engine_busy": min(1.0, busy_slot_s / (slots * now)),
            "trainer_busy": steps * train_s / now, "rollout_s_mean": sum(waits) / len(waits),
            "max_staleness_seen": max_age, "dropped_stale": dropped}


def training_loop_table(ratios: tuple[float, ...] = (3.0, 1.0, 0.5), staleness: tuple[int, ...] = (0, 1, 2),
                        seeds: int = 3, **kw: Any) -> list[dict[str, Any]]:
    """Rows of the simulation for each ratio and ``k``: mean over ``seeds`` workloads; ``speedup`` is steps per
    hour relative to ``k`` = 0 at the same ratio. ``train_s`` = mean synchronous rollout time / ratio."""
    rows = []
    for ratio in ratios:
        sync_rollout = sum(simulate_loop(0, 0.0, seed=s, **kw)["rollout_s_mean"] for s in range(seeds)) / seeds
        train_s = sync_rollout / ratio
        base = None
        for k in staleness:
            runs = [simulate_loop(k, train_s, seed=s, **kw) for s in range(seeds)]
            row = {key: sum(r[key] for r in runs) / seeds for key in ("s_per_step", "engine_busy", "trainer_busy")}
            row.update(ratio=ratio, max_staleness=k, train_s=train_s,
                       max_staleness_seen=max(r["max_staleness_seen"] for r in runs))
            base = base or row["s_per_step"]
            row["speedup"] = base / row["s_per_step"]
            rows.append(row)
    return rows
