"""``skyrl bench dispatch --real``: every dispatcher on the real CPU stack, same instances and seed.

Where :mod:`skyrl_core.default_plugins.bench.dispatch` simulates stages on a virtual clock, this mode runs the real rollout path:
:class:`~skyrl_core.rollout.RolloutSession` with the ``hf`` engine (SmolLM2-135M-Instruct, continuous batching
on CPU), the GSM8K task (``gsm8k`` or ``gsm8k_steps``) with the ``python`` tool in the bubblewrap ``sandbox``
runtime and the ``gsm8k_answer`` verifier. One engine is loaded and warmed once and shared by every dispatcher, so
only the scheduling differs; each dispatcher rolls out the same instances with the same sampling seed.

Wall-clock figures on a shared CPU are noisy (other processes take cores), and the GSM8K stack is the light
regime (a sandbox starts in milliseconds, the verifier is a string match), so expect the dispatchers close to one
another here; the simulation's SWE profile is where init and eval cost as much as generation. The point of this
mode is that the real dispatch metrics — engine busy fraction, batch occupancy, peak runtimes — come from the real
engine's :class:`~skyrl_core.inference.base.EngineStats` and the real sandboxes, and that every trajectory is
accounted for with no runtime (sandbox workspace) left behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import tempfile
import time
from pathlib import Path
from typing import Any, Iterator

import attrs

from skyrl_core.config import AgentConfig, Config, DispatcherConfig, EngineConfig, SamplingConfig, TaskConfig
from skyrl_core.errors import ConfigError
from skyrl_core.runtime import RuntimeSpec
from skyrl_core.tasks import DataSpec

log = logging.getLogger(__name__)

REAL_TASKS = ("gsm8k", "gsm8k_steps")
ROW_KEYS = ("wall_s", "speedup_vs_bounded", "engine_busy", "mean_occupancy", "peak_runtimes", "runtime_s_per_traj",
            "mean_runtimes", "trajectories_per_min", "init_s_mean", "run_s_mean", "eval_s_mean", "n_trajectories",
            "n_ok", "n_failed", "failures", "runtime_starts", "runtime_releases", "release_errors",
            "engine_requests")


@attrs.define
class RealBenchSpec:
    """Size of the real run. ``instances`` x ``samples`` trajectories; ``max_turns`` agent turns of at most
    ``max_tokens`` generated tokens each; the engine decodes up to ``max_batch`` requests together and the
    dispatchers get ``max_parallel_agents`` (the same role as the simulation's capacity 32 / agents 32).
    ``threads`` sets torch's intra-op threads for the run (None: torch's default); on a CPU shared with other
    busy processes, 1 is many times faster than 2 (spinning OpenMP workers wait for descheduled peers)."""

    task: str = "gsm8k"
    instances: int = 4
    samples: int = 2
    max_turns: int = 3
    max_tokens: int = 96
    max_batch: int = 4
    max_parallel_agents: int = 4
    temperature: float = 0.7
    seed: int = 0
    split: str | None = None
    dispatchers: tuple[str, ...] | None = None
    threads: int | None = None

    def validate(self) -> None:
        if self.task not in REAL_TASKS:
            raise ConfigError(f"--task '{self.task}' is not a real-bench task; valid: {', '.join(REAL_TASKS)}")
        if self.threads is not None and self.threads < 1:
            raise ConfigError(f"--threads must be at least 1, got {self.threads}")
        for name in ("instances", "samples", "max_turns", "max_tokens", "max_batch", "max_parallel_agents"):
            if getattr(self, name) < 1:
                raise ConfigError(f"--{name.replace('_', '-')} must be at least 1, got {getattr(self, name)}")


def real_variants(spec: RealBenchSpec) -> dict[str, DispatcherConfig]:
    """The same five dispatcher variants as the simulation, sized by ``max_parallel_agents``, no other tuning
    (``dispatchers`` selects a subset, which must include the ``async_batch_bounded`` baseline, and may name any
    registered dispatcher)."""
    from .dispatch import PROFILES, dispatcher_variants

    variants = dispatcher_variants(attrs.evolve(PROFILES["light"], max_parallel_agents=spec.max_parallel_agents))
    if spec.dispatchers:
        from skyrl_core.plugins import get_registry  # a plugin's dispatcher, asked for by name, runs like a built-in

        variants.update({name: DispatcherConfig(type=name, max_parallel_agents=spec.max_parallel_agents)
                         for name in get_registry().names("dispatchers")
                         if name in spec.dispatchers and name not in variants})
        unknown = [d for d in spec.dispatchers if d not in variants]
        if unknown:
            raise ConfigError(f"--dispatcher {', '.join(unknown)} unknown; valid: {', '.join(variants)}")
        if "async_batch_bounded" not in spec.dispatchers:
            raise ConfigError("--dispatcher must include async_batch_bounded (the speedup baseline)")
        variants = {k: v for k, v in variants.items() if k in spec.dispatchers}
    return variants


def real_config(spec: RealBenchSpec) -> Config:
    """The run config: hf engine on CPU, the GSM8K task with python + finish in the bubblewrap sandbox."""
    split = spec.split or ("test" if spec.task == "gsm8k" else "train")
    return Config(
        model="smollm2-135m-instruct",
        engine=EngineConfig(type="hf", max_batch=spec.max_batch, device="cpu"),
        tasks=[TaskConfig(name=spec.task, data=DataSpec(split=split, limit=spec.instances),
                          tools=["python", "finish"],
                          runtime=RuntimeSpec(type="sandbox", cpu_time_s=10, memory_mb=512),
                          verifier="gsm8k_answer")],
        agent=AgentConfig(max_turns=spec.max_turns, max_context_tokens=2048, tool_timeout_s=10.0),
        sampling=SamplingConfig(temperature=spec.temperature, max_tokens=spec.max_tokens, n_samples=spec.samples,
                                seed=spec.seed),
        seed=spec.seed,
    )


@contextlib.contextmanager
def private_tempdir() -> Iterator[Path]:
    """Point :mod:`tempfile` at a fresh directory for the run, so every sandbox workspace (``skyrl-ws-*``) lands
    there and any left behind after a dispatch is a leaked runtime we can count."""
    old = tempfile.tempdir
    with tempfile.TemporaryDirectory(prefix="skyrl-bench-real-") as d:
        tempfile.tempdir = d
        try:
            yield Path(d)
        finally:
            tempfile.tempdir = old


async def run_real_async(spec: RealBenchSpec) -> dict[str, Any]:
    """Run every dispatcher variant on the real stack; returns the results dict (see :func:`run_real`)."""
    import torch

    spec.validate()
    variants = real_variants(spec)
    old_threads = torch.get_num_threads()
    if spec.threads:
        torch.set_num_threads(spec.threads)
    try:
        return await _run_real(spec, variants)
    finally:
        torch.set_num_threads(old_threads)


async def _run_real(spec: RealBenchSpec, variants: dict[str, DispatcherConfig]) -> dict[str, Any]:
    from skyrl_core.inference.base import SamplingParams
    from skyrl_core.plugins import get_registry
    from skyrl_core.rollout import RolloutSession

    config = real_config(spec)
    registry = get_registry()
    t_load = time.perf_counter()
    engine = await asyncio.to_thread(registry.get("inference_engines", "hf"), config)
    load_s = time.perf_counter() - t_load
    rows: dict[str, Any] = {}
    timelines: dict[str, Any] = {}
    try:
        # Warm up (first-call kernels, allocator) so the first dispatcher does not pay for it.
        prompt = engine.tokenizer("Warm up.")["input_ids"]
        await asyncio.gather(*(engine.generate(list(prompt), SamplingParams(max_tokens=8, seed=k))
                               for k in range(min(spec.max_batch, 4))))
        probe = await RolloutSession.create(config, engine=engine, registry=registry)
        items = probe.load_instances("train")
        if len(items) < spec.instances:
            raise ConfigError(f"task '{spec.task}' has only {len(items)} instances, --instances asks for "
                              f"{spec.instances}")
        for name, dcfg in variants.items():
            cfg = attrs.evolve(config, dispatcher=dcfg)
            session = await RolloutSession.create(cfg, engine=engine, registry=registry)
            done: list[str] = []
            session.on_trajectory_done = lambda t: done.append(t.id)
            tokens_before = engine.stats.tokens_out
            with private_tempdir() as tmp:
                t0 = time.perf_counter()
                trajs, metrics = await session.rollout(items, spec.samples)
                elapsed = time.perf_counter() - t0
                left = sorted(p.name for p in tmp.glob("skyrl-ws-*"))
            row = {k: metrics[k] for k in ROW_KEYS if k in metrics}
            row.update(
                config={k: v for k, v in attrs.asdict(dcfg).items() if v not in (None, {}, False)},
                measured_wall_s=elapsed,
                tokens_out=engine.stats.tokens_out - tokens_before,
                turns_mean=sum(t.turns for t in trajs) / len(trajs),
                reward_mean=sum(float(t.reward or 0.0) for t in trajs) / len(trajs),
                finish_reasons=_count(t.finish_reason for t in trajs),
                released_callbacks=len(done),
                leftover_workspaces=len(left),
                leaked_runtimes=(metrics["runtime_starts"] - metrics["runtime_releases"]) + len(left),
                accounted=len(trajs) == spec.instances * spec.samples
                and all(t.finish_reason for t in trajs) and len(set(done)) == len(trajs),
            )
            rows[name] = row
            timelines[name] = {k: metrics["timeline"][k] for k in ("t", "runtimes", "active_run")}
            log.info("real/%s: %.1f s, %d trajectories, %d failed", name, row["wall_s"], len(trajs),
                     row.get("n_failed", 0))
    finally:
        await engine.close()
    bounded = rows["async_batch_bounded"]["wall_s"]
    for row in rows.values():
        row["speedup_vs_bounded"] = bounded / row["wall_s"] if row["wall_s"] > 0 else 0.0
    import torch

    return {"mode": "real", "spec": attrs.asdict(spec), "torch_threads": torch.get_num_threads(),
            "engine_load_s": load_s, "dispatchers": rows,
            "_timelines": timelines}


def _count(values: Any) -> dict[str, int]:
    out: dict[str, int] = {}
    for v in values:
        out[str(v)] = out.get(str(v), 0) + 1
    return out


def run_real(spec: RealBenchSpec) -> dict[str, Any]:
    """Blocking entry point. Returns ``{"mode": "real", "spec", "engine_load_s", "dispatchers": {name: row}}``;
    each row has the simulation's columns (``wall_s`` in wall seconds, ``speedup_vs_bounded``, ``engine_busy``,
    ``mean_occupancy``, ``peak_runtimes``, ``runtime_s_per_traj``) from the real dispatch metrics, plus
    ``tokens_out``, ``turns_mean``, ``reward_mean``, ``finish_reasons`` and the accounting checks
    (``leaked_runtimes``: starts minus releases plus sandbox workspaces left behind; ``accounted``: every
    trajectory has a finish reason and was released). Raises ConfigError on a bad spec."""
    return asyncio.run(run_real_async(spec))
