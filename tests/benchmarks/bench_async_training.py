"""Synchronous vs asynchronous training on the quickstart, engine and trainer in separate processes on separate cores.

    python tests/benchmarks/bench_async_training.py --out runs/bench-async            # 3 settings x 3 seeds
    python tests/benchmarks/bench_async_training.py --out runs/bench-async --report   # table + PNG from what ran
    python tests/benchmarks/bench_async_training.py --out runs/pilot --seeds 0 --staleness 0 1 --steps 3 --eval-limit 0

Each run is ``skyrl train examples/quickstart.yaml`` with the overrides in :data:`OVERRIDES` (documented in
docs/training.md, "Asynchronous training": the quickstart's own batch, samples, turns, mini-batches and 6 steps;
the eval only after the last step and on ``--eval-limit`` questions, no checkpoints, ``decoupled_ppo`` in every
setting) with ``train.max_staleness`` 0, 1 or 2 and ``train.seed`` 0, 1, 2, one after another in this process (seed-major
order, so a cut-short benchmark still compares every setting).

Two cores stand in for two devices (``--split process``, the default): the hf engine runs in a Ray actor
(``engine.placement: ray``, the skyrl-ray plugin; a local cluster of 2 CPUs started here) whose process (every
thread, ``/proc/PID/task/*``) is pinned to core 1; this process (the driver: the trainer, the event loop, the
agent loop; the python tool's sandboxes inherit its core) is pinned to core 0. One torch thread each
(``OMP_NUM_THREADS=1`` in the actor's runtime environment, ``torch.set_num_threads(1)`` here). The trainer keeps
its own copy of the model in every setting (the engine's is in the other process) and pushes the weights through
``engine.update_weights`` (a Ray call) after each step. ``--split thread`` is the earlier setup: the in-process
hf engine's decode thread on core 0 and the trainer's thread on core 1, one Python process (one GIL).

Per run it records wall seconds per step twice: ``s_per_step`` (from the engine's first call to the last step's
weight sync, divided by the steps: includes the first step, which nothing overlaps) and ``s_per_step_steady``
(from step 1's weight sync to the last step's, divided by the steps after the first: the rate of a long run);
the engine's busy fraction two ways (``engine_busy``: a call in flight, sampled every 0.1 s; ``engine_cpu``: the
engine process's CPU seconds over the same wall, from ``/proc``), the trainer's (``trainer_busy``: train-step
seconds, update plus weight push, over the wall; ``driver_cpu``: this process's CPU seconds over the wall; with
``--split thread`` the two CPU figures are the engine thread's and the trainer threads'), the
mean update and weight-push seconds, eval pass@1 after the last step, the 1-minute load average at the run's
start and end, and the busy periods for the timeline PNG. Results go to ``<out>/results.jsonl`` (one line per
finished run) and ``<out>/timeline.png``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
QUICKSTART = REPO / "examples" / "quickstart.yaml"

#: the quickstart as it is (8 instances x 4 samples, 3 turns, 2 mini-batches, 512-token micro-batches with gradient
#: checkpointing, engine.max_batch 16: its rollout-to-train ratio, train about a third of a step) except: the eval
#: only after the last step and on ``--eval-limit`` questions, no checkpoints, one loss in every setting
#: (``decoupled_ppo``: on-policy it is ``ppo_clip``, the quickstart's)
OVERRIDES = [
    "train.eval_at_start=false", "train.checkpoint_every=0", "backend.policy_loss=decoupled_ppo",
]
#: engine.placement: ray, one engine actor of 1 CPU on a local cluster of 2, one torch thread in the actor
RAY_OVERRIDES = [
    "engine.placement=ray", "engine.resources={num_cpus: 1}", "plugins.ray.num_cpus=2",
    "plugins.ray.runtime_env={env_vars: {OMP_NUM_THREADS: '1'}}",
]
#: --split process: the driver (trainer) on core 0, the engine actor on core 1; --split thread: the engine's
#: decode thread on core 0, the trainer's thread on core 1 (the earlier measurement's assignment)
CORES = {"process": {"driver": 0, "engine": 1}, "thread": {"engine": 0, "trainer": 1}}


def run_overrides(split: str, staleness: int, seed: int, steps: int, eval_limit: int) -> list[str]:
    """The override list of one run (what docs/training.md lists)."""
    evals = ([f"train.eval_every={steps}", f"tasks.0.eval_data.limit={eval_limit}"] if eval_limit > 0
             else ["train.eval_every=0"])
    return (OVERRIDES + (RAY_OVERRIDES if split == "process" else []) + evals
            + [f"train.steps={steps}", f"train.max_staleness={staleness}", f"train.seed={seed}"])


def cpu_seconds(path: str) -> float:
    """utime + stime of ``/proc/<pid>[/task/<tid>]/stat``, in seconds."""
    try:
        fields = Path(path, "stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Pinner:
    """Pins the engine and the trainer to their cores and samples, every ``period`` seconds, whether the engine
    has a call in flight (the busy timeline) and the CPU seconds the engine and the trainer side have used.

    ``split="process"``: every thread of this process to core 0 and every thread of the engine actor's process
    (``engine_pid``, set once the engine is built) to core 1, re-checked each period so new threads are pinned
    too (threads started by a pinned thread inherit its core anyway). ``split="thread"``: the threads named
    ``skyrl-hf-engine*`` to core 0 and ``skyrl-train*`` to core 1 (by native thread id)."""

    def __init__(self, split: str, period: float = 0.1) -> None:
        self.split, self.period = split, period
        self.engine = None
        self.engine_pid: int | None = None
        self.samples: list[tuple[float, bool, float, float]] = []  # time, engine busy, engine cpu s, trainer cpu s
        self.pinned: dict[str, set[int]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="bench-pinner", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _set(self, label: str, tid: int, core: int) -> None:
        done = self.pinned.setdefault(label, set())
        if tid in done:
            return
        try:
            os.sched_setaffinity(tid, {core})
            done.add(tid)
        except OSError:  # the thread ended
            pass

    def _pin(self) -> None:
        cores = CORES[self.split]
        if self.split == "process":
            for label, pid in (("driver", os.getpid()), ("engine", self.engine_pid)):
                if pid is None:
                    continue
                try:
                    tids = os.listdir(f"/proc/{pid}/task")
                except OSError:
                    continue
                for tid in tids:
                    self._set(label, int(tid), cores[label])
            return
        for t in threading.enumerate():
            for label, prefix in (("engine", "skyrl-hf-engine"), ("trainer", "skyrl-train")):
                if t.name.startswith(prefix) and t.native_id:
                    self._set(label, t.native_id, cores[label])

    def _cpu(self) -> tuple[float, float]:
        if self.split == "process":
            eng = cpu_seconds(f"/proc/{self.engine_pid}") if self.engine_pid else float("nan")
            return eng, cpu_seconds(f"/proc/{os.getpid()}")
        tids = {t.name: t.native_id for t in threading.enumerate()}
        eng = sum(cpu_seconds(f"/proc/self/task/{tid}") for n, tid in tids.items() if n.startswith("skyrl-hf-engine"))
        train = sum(cpu_seconds(f"/proc/self/task/{tid}") for n, tid in tids.items() if n.startswith("skyrl-train"))
        return eng, train

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._pin()
            eng = self.engine
            if eng is not None:
                busy = eng.stats.in_flight > 0 or eng.stats.queued > 0
                self.samples.append((time.perf_counter(), busy, *self._cpu()))
            self._stop.wait(self.period)


def engine_threads(engine) -> dict:
    """The engine actor's torch intra-op threads and OMP_NUM_THREADS, asked in the actor (process split)."""
    import ray

    def ask(actor_self):
        import torch

        return {"torch_threads": torch.get_num_threads(), "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"),
                "dtype": str(next(actor_self.engine.model.parameters()).dtype)}

    return ray.get(engine.actor.__ray_call__.remote(ask), timeout=60)


def _cpu_between(samples: list, start: float, end: float, index: int) -> float:
    inside = [s for s in samples if start <= s[0] <= end]
    if len(inside) < 2:
        return float("nan")
    return (inside[-1][index] - inside[0][index]) / max(inside[-1][0] - inside[0][0], 1e-9)


def one_run(out: Path, split: str, staleness: int, seed: int, steps: int, eval_limit: int) -> dict:
    import torch

    from skyrl_core.config import load_config
    from skyrl_core.rollout import RolloutSession
    from skyrl_core.training import TrainRun

    torch.set_num_threads(1)
    overrides = run_overrides(split, staleness, seed, steps, eval_limit)
    cfg = load_config(QUICKSTART, overrides)
    pinner = Pinner(split)
    pushes: list[float] = []
    info: dict = {}

    async def factory(config):
        session = await RolloutSession.create(config)
        engine = session.engine
        if split == "process":
            pinner.engine_pid = int(engine.remote["pid"])
            info.update(engine_threads(engine))
        push = engine.update_weights

        async def timed_push(state_dict=None):  # times the weight push the trainer makes after each step
            t = time.perf_counter()
            await push(state_dict)
            pushes.append(time.perf_counter() - t)
            if state_dict is not None and "push_mb" not in info:
                info["push_mb"] = sum(v.numel() * v.element_size() for v in state_dict.values()) / 2**20
                info["push_dtypes"] = sorted({str(v.dtype) for v in state_dict.values()})

        engine.update_weights = timed_push
        pinner.engine = engine
        return session

    run_dir = out / f"k{staleness}-seed{seed}"
    run = TrainRun(cfg, run_dir, session_factory=factory)
    load_start = os.getloadavg()[0]
    pinner.start()
    t0 = time.perf_counter()
    try:
        summary = asyncio.run(run.run())
    finally:
        pinner.stop()
    wall_total = time.perf_counter() - t0
    records = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in records if r["kind"] == "train"]
    evals = [r for r in records if r["kind"] == "eval"]
    base = run._t_start
    samples = [(t - base, b, e, d) for t, b, e, d in pinner.samples]
    start = next((t for t, b, *_ in samples if b), 0.0)
    end = train[-1]["time/train_end_s"]
    first = train[0]["time/train_end_s"]
    window = [b for t, b, *_ in samples if start <= t <= end]
    train_s = [r["time/train_end_s"] - max(r["time/train_start_s"], start) for r in train]
    push = pushes[:len(train)]
    return {"split": split, "staleness": staleness, "seed": seed, "steps": len(train), "overrides": overrides,
            "s_per_step": (end - start) / len(train),
            "s_per_step_steady": (end - first) / (len(train) - 1) if len(train) > 1 else None,
            "engine_busy": sum(window) / max(len(window), 1), "engine_cpu": _cpu_between(samples, start, end, 2),
            "trainer_busy": sum(train_s) / (end - start), "driver_cpu": _cpu_between(samples, start, end, 3),
            "rollout_s_mean": statistics.mean(r["rollout_s"] for r in train),
            "update_s_mean": statistics.mean(t - p for t, p in zip(train_s, push)) if push else None,
            "push_s_mean": statistics.mean(push) if push else None, "push_s": push, **info,
            "pass@1": evals[-1]["pass@1"] if evals else None, "eval_n": eval_limit if evals else 0,
            "steps_updated": summary["steps_updated"],
            "train_intervals": [[r["time/train_start_s"] - start, r["time/train_end_s"] - start] for r in train],
            "engine_busy_samples": [[round(t - start, 2), int(b)] for t, b, *_ in samples if t <= end + 1],
            "staleness_max": max((r.get("async/staleness_max", 0) for r in train), default=0),
            "pinned_threads": {k: len(v) for k, v in pinner.pinned.items()}, "wall_total_s": wall_total,
            "load_avg_start": load_start, "load_avg": os.getloadavg(),
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}


def intervals(samples: list[list[float]], period: float = 0.1) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    for t, b in samples:
        if not b:
            continue
        if out and t - out[-1][1] <= period * 1.5:
            out[-1] = (out[-1][0], t)
        else:
            out.append((t, t + period))
    return out


def _f(x, fmt: str = ".2f") -> str:
    return "n/a" if x is None or x != x else format(x, fmt)


def report(out: Path) -> str:
    rows = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    splits = {r.get("split", "thread") for r in rows}
    if len(splits) > 1:
        sys.exit(f"{out / 'results.jsonl'} mixes the splits {sorted(splits)}; use one --out per split")
    lines = ["| max_staleness | runs (seeds) | wall s/step, steady (mean, per seed) | steps/hour vs k=0 (steady) | "
             "s/step incl. step 1 | engine busy (calls / CPU) | trainer busy (train steps / driver CPU) | "
             "update + weight push s | eval pass@1 (mean, per seed) | max staleness seen | load avg (start-end) |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    by_k = {k: [r for r in rows if r["staleness"] == k] for k in sorted({r["staleness"] for r in rows})}

    def steady(r):
        return r.get("s_per_step_steady") or r["s_per_step"]

    base = statistics.mean(steady(r) for r in by_k.get(0, rows))
    for k, rs in by_k.items():
        sps = [steady(r) for r in rs]
        p1 = [r["pass@1"] for r in rs if r["pass@1"] is not None]
        mean = lambda key: statistics.mean(r[key] for r in rs) if all(r.get(key) is not None for r in rs) else None  # noqa: E731
        loads = [x for r in rs for x in (r.get("load_avg_start", r["load_avg"][0]), r["load_avg"][0])]
        lines.append(
            f"| {k} | {len(rs)} ({', '.join(str(r['seed']) for r in rs)}) | {statistics.mean(sps):.1f} "
            f"({', '.join(f'{x:.1f}' for x in sps)}) | {base / statistics.mean(sps):.2f}x | "
            f"{statistics.mean(r['s_per_step'] for r in rs):.1f} | {_f(mean('engine_busy'))} / {_f(mean('engine_cpu'))} | "
            f"{_f(mean('trainer_busy'))} / {_f(mean('driver_cpu'))} | {_f(mean('update_s_mean'), '.1f')} + "
            f"{_f(mean('push_s_mean'), '.1f')} | {statistics.mean(p1) if p1 else float('nan'):.2f} "
            f"({', '.join(f'{x:.2f}' for x in p1)}) | {max(r['staleness_max'] for r in rs):g} | "
            f"{min(loads):.1f}-{max(loads):.1f} |")
    table = "\n".join(lines)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    # the timeline of one seed per setting: seed 1 where it ran
    shown = [min((r for r in rows if r["staleness"] == k), key=lambda r: (r["seed"] != 1, r["seed"])) for k in by_k]
    fig, axes = plt.subplots(len(shown), 1, figsize=(10, 1.4 + 1.1 * len(shown)), sharex=True, squeeze=False)
    for ax, r in zip(axes[:, 0], shown):
        eng = intervals(r["engine_busy_samples"])
        ax.broken_barh([(a, b - a) for a, b in eng], (1.1, 0.8), color="tab:blue")
        ax.broken_barh([(a, b - a) for a, b in r["train_intervals"]], (0.1, 0.8), color="tab:orange")
        ax.set_yticks([0.5, 1.5], ["trainer", "engine"])
        ax.set_title(f"max_staleness {r['staleness']} (seed {r['seed']}, {r.get('split', 'thread')}"
                     f" split): {steady(r):.0f} s/step steady, engine busy {r['engine_busy']:.0%}, trainer busy "
                     f"{r['trainer_busy']:.0%}", fontsize=9)
    axes[-1, 0].set_xlabel("seconds since the engine's first call")
    fig.tight_layout()
    fig.savefig(out / "timeline.png", dpi=110)
    return table


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=REPO / "runs" / "bench-async")
    ap.add_argument("--split", choices=sorted(CORES), default="process",
                    help="process: the engine in a Ray actor pinned to core 1, the trainer here on core 0 "
                         "(default); thread: engine and trainer threads of this process (the earlier setup)")
    ap.add_argument("--staleness", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--steps", type=int, default=6, help="train steps per run (the quickstart's 6)")
    ap.add_argument("--eval-limit", type=int, default=50,
                    help="held-out questions of the eval after the last step (0: no eval)")
    ap.add_argument("--report", action="store_true", help="only draw the table and PNG from results.jsonl")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if not args.report:
        os.environ.setdefault("OMP_NUM_THREADS", "1")
        if len(os.sched_getaffinity(0)) < 2:
            sys.exit("needs two cores (one for the engine, one for the trainer)")
        if args.split == "process":
            from skyrl_core.config import load_config
            from skyrl_ray.config import cluster_config
            from skyrl_ray.runtimes import ensure_ray

            # the cluster (raylet, GCS) starts before this process is pinned, so its daemons keep both cores
            ensure_ray(cluster_config(load_config(QUICKSTART, run_overrides("process", 0, 0, args.steps, 0))))
        for seed in args.seeds:
            for k in args.staleness:
                if (args.out / f"k{k}-seed{seed}").exists():
                    continue
                print(f"run max_staleness={k} seed={seed} split={args.split} (load average "
                      f"{os.getloadavg()[0]:.1f})", flush=True)
                row = one_run(args.out, args.split, k, seed, args.steps, args.eval_limit)
                with (args.out / "results.jsonl").open("a") as f:
                    f.write(json.dumps(row) + "\n")
                print(f"  {row['s_per_step_steady'] or row['s_per_step']:.1f} s/step steady "
                      f"({row['s_per_step']:.1f} incl. step 1), engine busy {row['engine_busy']:.2f} "
                      f"(CPU {_f(row['engine_cpu'])}), trainer busy {row['trainer_busy']:.2f} (driver CPU "
                      f"{_f(row['driver_cpu'])}), update {_f(row['update_s_mean'], '.1f')} s + push "
                      f"{_f(row['push_s_mean'], '.1f')} s, rollout {row['rollout_s_mean']:.1f} s, pass@1 "
                      f"{row['pass@1']}, load {row['load_avg_start']:.1f}-{row['load_avg'][0]:.1f}", flush=True)
    print(report(args.out))


if __name__ == "__main__":
    main()
