"""Asynchronous training (``train.max_staleness`` > 0), the built-in ``async_training`` plugin's loop variant: the
producer of rollout groups that runs ahead of the trainer within the staleness bound (:class:`AsyncRollouts`), its
step (:func:`async_train_step`), the staleness metrics, the backends' declared support and the buffer's checkpoint
form. The core's :class:`skyrl_core.training.TrainRun` reaches it through the registry (``register_async_loops``,
the name ``async``: :class:`AsyncTraining`); docs/training.md, "Asynchronous training"."""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections import Counter, deque
from typing import Any, Sequence

import attrs

from skyrl_core.config import Config
from skyrl_core.errors import ConfigError
from skyrl_core.rollout import sampling_params
from skyrl_core.training import raise_if_cancelled
from skyrl_core.transitions import Trajectory, Transition

log = logging.getLogger(__name__)


def staleness_metrics(trajectories: Sequence[Any], step: int) -> dict[str, float]:
    """Staleness of the trajectories step ``step`` trains on: how many policy versions each lags the policy being
    updated (``step - 1 -`` the oldest ``policy_version`` of its calls; trajectories without a call are left out).
    ``async/staleness_<s>`` is the fraction of them ``s`` versions old (the histogram), ``async/staleness_mean``
    and ``async/staleness_max``; empty when no call carries a version."""
    ages = []
    for t in trajectories:
        versions = [x.policy_version for x in t.transitions if x.policy_version is not None]
        if versions:
            ages.append(step - 1 - min(versions))
    if not ages:
        return {}
    out = {f"async/staleness_{s}": c / len(ages) for s, c in sorted(Counter(ages).items())}
    out.update({"async/staleness_mean": sum(ages) / len(ages), "async/staleness_max": float(max(ages))})
    return out


def declared_max_staleness(backend: Any) -> float:
    """The most policy versions of lag ``backend`` declares it can train on: a ``max_staleness`` member of the
    backend's *own* class (given a class or an instance; not inherited, so a bridge that subclasses the local
    backend but trains with its own loss is not taken to support it), or an attribute of a registered factory
    function; else 0 (synchronous only)."""
    if inspect.isfunction(backend) or inspect.ismethod(backend):
        return float(getattr(backend, "max_staleness", 0) or 0)
    cls = backend if isinstance(backend, type) else type(backend)
    return float(cls.__dict__.get("max_staleness", 0) or 0)


def check_staleness_support(config: Config, backend: Any) -> None:
    """Raise ConfigError naming the backend when ``train.max_staleness`` exceeds what it declares
    (:func:`declared_max_staleness`): no setting may silently do nothing."""
    k = config.train.max_staleness
    limit = declared_max_staleness(backend)
    if k > limit:
        cls = backend if isinstance(backend, type) or inspect.isfunction(backend) else type(backend)
        raise ConfigError(
            f"config key 'train.max_staleness' is {k}, but backend '{config.backend.type}' ({cls.__name__}) "
            f"{'trains synchronously only' if limit == 0 else f'supports at most {limit:g}'}: set "
            f"train.max_staleness: {0 if limit == 0 else int(limit)}, or use backend.type: local for asynchronous "
            f"training")


def trajectory_from_json(data: dict) -> Trajectory:
    """Rebuild a :class:`~skyrl_core.transitions.Trajectory` from its ``to_json()`` (the async buffer in a
    checkpoint)."""
    fields = {f.name for f in attrs.fields(Trajectory)}
    kw = {k: v for k, v in data.items() if k in fields}
    kw["transitions"] = [Transition(**t) for t in data.get("transitions", [])]
    return Trajectory(**kw)


@attrs.define(eq=False)
class RolloutGroup:
    """One instance's ``sampling.n_samples`` rollouts in the async buffer. ``seq``: its place in the run's stream
    of instances (cursor order); ``index``: into the train instances; ``version``: the policy version when it was
    admitted (its oldest call's); ``attempt``: 0, then 1.. for resamples after a drop."""

    seq: int
    index: int
    version: int
    attempt: int = 0
    trajectories: list = attrs.Factory(list)
    dispatch: dict = attrs.Factory(dict)
    task: Any = None
    cancel_reason: str | None = None


#: drop outcomes of a group, counted under ``async/dropped_<outcome>``
DROP_OUTCOMES = ("deadline", "error", "cancelled", "stale")


class AsyncRollouts:
    """The producer of asynchronous training: rolls out groups while the trainer trains, within the staleness bound.

    ``AsyncRollouts(run, max_staleness, deadline_s, max_resamples=1)``. With ``B`` = ``train.batch_size`` groups
    per step and ``k`` = ``max_staleness``, a group is admitted only while ``in_training + accepted + running <
    min((k + 1) * B, groups the remaining steps consume)``, where ``in_training`` is the batch of the step being
    trained (``B`` during a train step, else 0), ``accepted`` the completed groups waiting in the buffer and
    ``running`` those being rolled out; so whatever is admitted at policy version ``v`` is consumed by steps ``v +
    1 .. v + 1 + k`` in admission order. Groups leave the buffer in completion order (a slow group never blocks
    the others), so :meth:`take` also drops a group older than its step allows (``version < step - 1 - k``:
    ``dropped_stale``); staleness of a trained datum never exceeds ``k``.

    Fault tolerance: each trajectory has the dispatcher's stage deadlines (``dispatcher.init/run/eval_timeout_s``:
    a hung or failing trajectory ends masked, its group completes with the others kept); a group that exceeds
    ``deadline_s`` in all (the backstop), whose rollout raises, or that is cancelled (:meth:`cancel`) is dropped
    (its runtimes are released by the dispatcher's cancellation path) and its instance is rolled out again
    (resampled, new seeds) up to ``max_resamples`` times, then given up (``lost``). ``counts`` keeps
    ``admitted = completed + dropped_deadline + dropped_error + dropped_cancelled + running`` and ``completed =
    consumed + dropped_stale + accepted`` exact; ``resampled + lost`` equals all drops.
    ``peak_live`` is the largest ``in_training + accepted + running`` seen (never above the bound).
    """

    def __init__(self, run: Any, max_staleness: int, deadline_s: float | None, max_resamples: int = 1) -> None:
        self.run = run
        self.k = max_staleness
        self.batch_size = run.config.train.batch_size
        self.deadline_s = deadline_s
        self.max_resamples = max_resamples
        self.pending: deque[tuple[int, int, int]] = deque()  # (seq, index, attempt) admitted before new instances
        self.running: dict[int, RolloutGroup] = {}
        self.buffer: list[RolloutGroup] = []
        self.in_training = 0
        self.counts: Counter = Counter()
        self.next_seq = 0
        self.peak_live = 0
        self.busy_intervals: list[tuple[float, float]] = []
        self._cv: asyncio.Condition | None = None
        self._producer: asyncio.Task | None = None
        self._closing = False

    # -- bound -------------------------------------------------------------------------------------------------
    def capacity(self) -> int:
        """Groups that may be in training, accepted or running now (the admission bound)."""
        remaining = max(0, self.run.config.train.steps - self.run.step) * self.batch_size
        return min((self.k + 1) * self.batch_size, remaining)

    def live(self) -> int:
        return self.in_training + len(self.buffer) + len(self.running)

    # -- producer ----------------------------------------------------------------------------------------------
    def start(self) -> None:
        self._cv = asyncio.Condition()
        self._producer = asyncio.ensure_future(self._produce())

    async def _produce(self) -> None:
        assert self._cv is not None
        while True:
            async with self._cv:
                await self._cv.wait_for(lambda: self.live() < self.capacity())
                if self.pending:
                    seq, index, attempt = self.pending.popleft()
                else:
                    seq, index, attempt = self.next_seq, self.run.cursor.take(1)[0], 0
                    self.next_seq += 1
                group = RolloutGroup(seq=seq, index=index, version=self.run.version, attempt=attempt)
                self.running[seq] = group
                self.counts["admitted"] += 1
                self.peak_live = max(self.peak_live, self.live())
                group.task = asyncio.ensure_future(self._roll(group))

    async def _roll(self, group: RolloutGroup) -> None:
        run = self.run
        cfg = run.config
        item = run.train_items[group.index]
        seed_round = f"step-{group.seq // self.batch_size + 1}" + (f"/retry-{group.attempt}" if group.attempt else "")
        sampling = sampling_params(cfg, seed=run.sampling_seed)
        outcome = "completed"
        try:
            trajectories, dispatch = await asyncio.wait_for(
                run.session.rollout([item], cfg.sampling.n_samples, sampling, seed_round=seed_round), self.deadline_s)
            group.trajectories, group.dispatch = list(trajectories), dispatch
        except (asyncio.TimeoutError, TimeoutError):
            outcome = "deadline"
            log.warning("group %s:%s (stream %d) missed its %.0f s deadline: dropped", item[0].name, item[1].id,
                        group.seq, self.deadline_s or 0)
        except asyncio.CancelledError:
            if group.cancel_reason is None:  # the run is closing
                raise
            outcome = "cancelled"
        except Exception as exc:  # a rollout that raises costs its group, never the run
            outcome = "error"
            log.warning("group %s:%s (stream %d) failed: %s: %s: dropped", item[0].name, item[1].id, group.seq,
                        type(exc).__name__, exc)
        assert self._cv is not None
        async with self._cv:
            self.running.pop(group.seq, None)
            group.task = None
            if outcome == "completed":
                self.buffer.append(group)
                self.counts["completed"] += 1
            else:
                self._drop(group, outcome)
            self._cv.notify_all()

    def _drop(self, group: RolloutGroup, outcome: str) -> None:
        self.counts[f"dropped_{outcome}"] += 1
        if group.attempt < self.max_resamples:
            self.pending.append((group.seq, group.index, group.attempt + 1))
            self.counts["resampled"] += 1
        else:
            self.counts["lost"] += 1
            item = self.run.train_items[group.index]
            log.warning("instance %s:%s given up after %d attempts", item[0].name, item[1].id, group.attempt + 1)

    def cancel(self, seq: int, reason: str = "cancelled") -> bool:
        """Cancel running group ``seq`` (counted ``dropped_cancelled`` and resampled). False when not running."""
        group = self.running.get(seq)
        if group is None or group.task is None:
            return False
        group.cancel_reason = reason
        group.task.cancel()
        return True

    # -- trainer side ------------------------------------------------------------------------------------------
    async def take(self, step: int) -> list[RolloutGroup]:
        """The ``batch_size`` groups step ``step`` trains on, first completed first; waits until there are
        enough. Drops (and resamples) groups whose version is below ``step - 1 - k``."""
        assert self._cv is not None
        async with self._cv:
            while True:
                for group in [g for g in self.buffer if g.version < step - 1 - self.k]:
                    self.buffer.remove(group)
                    self._drop(group, "stale")
                    self._cv.notify_all()
                if len(self.buffer) >= self.batch_size:
                    break
                await self._cv.wait()
            groups = self.buffer[:self.batch_size]
            del self.buffer[:self.batch_size]
            self.in_training = len(groups)
            self.counts["consumed"] += len(groups)
            self._cv.notify_all()
        return groups

    async def step_done(self) -> None:
        """The step's update reached the engine: its batch no longer counts against the bound."""
        assert self._cv is not None
        async with self._cv:
            self.in_training = 0
            self._cv.notify_all()

    def metrics(self) -> dict[str, float]:
        """``async/*`` counters (cumulative over this process) and the buffer's state now."""
        out = {f"async/{k}": float(self.counts.get(k, 0)) for k in
               ("admitted", "completed", "consumed", "resampled", "lost", *[f"dropped_{o}" for o in DROP_OUTCOMES])}
        out.update({"async/running": float(len(self.running)), "async/accepted": float(len(self.buffer)),
                    "async/peak_live": float(self.peak_live), "async/bound": float((self.k + 1) * self.batch_size)})
        return out

    # -- checkpoint --------------------------------------------------------------------------------------------
    def to_state(self) -> dict[str, Any]:
        """The buffer for a checkpoint: completed groups with their trajectories, and the groups still to roll out
        (running now, or waiting to be resampled) by stream position, instance and attempt. A resumed run rolls
        those out again and trains the completed ones, so no instance is repeated or lost."""
        return {"next_seq": self.next_seq,
                "todo": [[g.seq, g.index, g.attempt] for g in sorted(self.running.values(), key=lambda g: g.seq)]
                + [list(p) for p in self.pending],
                "accepted": [{"seq": g.seq, "index": g.index, "version": g.version, "attempt": g.attempt,
                              "trajectories": [t.to_json() for t in g.trajectories]} for g in self.buffer],
                "counts": dict(self.counts)}

    def load_state(self, state: dict[str, Any] | None) -> None:
        if not state:
            return
        self.next_seq = int(state["next_seq"])
        self.pending = deque(tuple(int(x) for x in p) for p in state.get("todo", []))
        self.buffer = [RolloutGroup(seq=g["seq"], index=g["index"], version=g["version"], attempt=g["attempt"],
                                    trajectories=[trajectory_from_json(t) for t in g["trajectories"]])
                       for g in state.get("accepted", [])]
        self.counts = Counter({k: int(v) for k, v in state.get("counts", {}).items()})

    async def train_step(self) -> dict[str, Any]:
        """One step of the run on this producer's groups: :func:`async_train_step`."""
        return await async_train_step(self.run)

    async def close(self) -> None:
        """Stop the producer and cancel every running group; their dispatchers release the runtimes first."""
        self._closing = True
        tasks = [t for t in [self._producer, *[g.task for g in self.running.values()]] if t is not None]
        for t in tasks:
            t.cancel()
        for t in tasks:
            try:
                await t
            except (asyncio.CancelledError, Exception):
                pass


def group_deadline(config: Config, override: float | None = None) -> float | None:
    """The backstop deadline of one group in async training: ``override`` (``TrainRun(group_deadline_s=...)``) when given, else the sum
    of the dispatcher's per-trajectory stage timeouts (init, run, eval, release) plus 60 s; None (no backstop)
    when any of them is unset."""
    if override is not None:
        return override
    d = config.dispatcher
    parts = [getattr(d, f"{s}_timeout_s", None) for s in ("init", "run", "eval", "release")]
    return None if any(p is None for p in parts) else sum(parts) + 60.0


async def async_train_step(run: Any) -> dict[str, Any]:
    """One step of asynchronous training of ``run`` (a :class:`~skyrl_core.training.TrainRun`): take ``train.batch_size`` completed
    groups from the producer (:class:`AsyncRollouts`), train, push the weights to the engine (running calls
    continue with the new weights from their next token on the hf engine; see docs/training.md), then free
    the step's share of the staleness bound. Logs what ``TrainRun.train_step`` logs plus ``async/*``: the
    staleness histogram of the trained data (``async/staleness_<s>``: fraction of data ``s`` versions old),
    ``async/wait_s`` (the trainer waiting for rollouts) and the producer's counters."""
    cfg = run.config
    assert run.rollouts is not None
    step = run.step + 1
    t0 = time.perf_counter()
    groups = await run.rollouts.take(step)
    raise_if_cancelled()
    t_wait = time.perf_counter() - t0
    trajectories = [t for g in groups for t in g.trajectories]
    items = [run.train_items[g.index] for g in groups]
    figures = run._log_rollout(f"step-{step:06d}", trajectories)
    batch, trainable, train_metrics, t1, t_train = await run._train_and_sync(trajectories)
    run.step = step
    run.version = step
    await run.rollouts.step_done()
    run._cursor_done = run.cursor.position
    record = run._step_record(step, items, figures, batch, train_metrics)
    record.update(staleness_metrics(trajectories, step))
    record["async/group_versions"] = [g.version for g in groups]
    record["async/group_seqs"] = [g.seq for g in groups]  # places in the instance stream (cursor order)
    record.update(run.rollouts.metrics())
    run._finish_record(record, trajectories, batch, trainable, train_metrics, step)
    record.update(rollout_s=t_wait, train_s=t_train, step_s=time.perf_counter() - t0, **{"async/wait_s": t_wait},
                  bad_steps=run.backend.bad_steps, **run._timeline(t1, t1 + t_train))
    run._log(record)
    run._check_bad_steps(step)
    return record


class AsyncTraining:
    """The registered ``async`` loop (``register_async_loops``): what :class:`skyrl_core.training.TrainRun` asks the
    registry for when ``train.max_staleness`` > 0 (contract: :class:`skyrl_core.contracts.AsyncLoop`)."""

    name = "async"

    @staticmethod
    def check(config: Config, backend: Any) -> None:
        """:func:`check_staleness_support` (ConfigError naming the backend)."""
        check_staleness_support(config, backend)

    @staticmethod
    def producer(run: Any, state: dict[str, Any] | None = None) -> AsyncRollouts:
        """The :class:`AsyncRollouts` of ``run`` (not started), with the backstop of :func:`group_deadline`;
        given a checkpoint's ``state`` it is restored from its ``async_buffer``, or (a checkpoint written without
        one) takes up the instance stream at the checkpoint's ``cursor``."""
        rollouts = AsyncRollouts(run, run.config.train.max_staleness,
                                 group_deadline(run.config, run.group_deadline_s))
        if state is not None:
            rollouts.load_state(state.get("async_buffer"))
            if "async_buffer" not in state:
                rollouts.next_seq = int(state["cursor"])
        return rollouts
