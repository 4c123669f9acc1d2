"""Synchronous vs asynchronous training on the quickstart, engine and trainer on separate cores.

    python tests/benchmarks/bench_async_training.py --out runs/bench-async            # 3 settings x 3 seeds
    python tests/benchmarks/bench_async_training.py --out runs/bench-async --report   # table + PNG from what ran

Each run is ``skyrl train examples/quickstart.yaml`` shrunk by the overrides in :data:`OVERRIDES` (documented in
docs/training.md, "Asynchronous training") with ``train.max_staleness`` 0, 1 or 2 and ``train.seed`` 0, 1, 2, in
this process, one after another (seed-major order, so a cut-short benchmark still compares every setting). Two
cores stand in for two devices: the hf engine's decode thread is pinned to core 0 and the trainer's thread to core
1 (``os.sched_setaffinity`` on their native thread ids, as soon as they exist), torch runs one intra-op thread per
calling thread (``torch.set_num_threads(1)``, ``OMP_NUM_THREADS=1``); the event loop and the python tool's
sandboxes are not pinned. Per run it records wall seconds per step (from the engine's first busy moment to the last
step's weight sync, divided by the steps), the engine's busy fraction (a call in flight, sampled every 0.1 s) and
the trainer's (sum of train-step seconds over the same wall), eval pass@1 after the last step, and the busy periods
for the timeline PNG. Results go to ``<out>/results.jsonl`` (one line per finished run) and ``<out>/timeline.png``.
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

#: the quickstart shrunk to fit 3 settings x 3 seeds in about 30-40 minutes of a 2-core machine
OVERRIDES = [
    "train.steps=4", "train.batch_size=4", "sampling.n_samples=2",  # 4 steps of 4 instances x 2 samples
    "train.eval_every=4", "train.eval_at_start=false", "tasks.0.eval_data.limit=20",  # eval pass@1 after step 4
    "train.checkpoint_every=0", "agent.max_turns=2",
    "backend.mini_batches=1", "backend.policy_loss=decoupled_ppo",  # one loss for all settings (on-policy = ppo_clip)
    "engine.max_batch=8", "dispatcher.max_parallel_agents=8",
]
ENGINE_CORE, TRAINER_CORE = 0, 1


class Pinner:
    """Pins the engine's and the trainer's threads (by name) to their cores and samples the engine's in-flight
    state every ``period`` seconds (the busy timeline)."""

    def __init__(self, period: float = 0.1) -> None:
        self.period = period
        self.engine = None
        self.samples: list[tuple[float, bool]] = []
        self.pinned: dict[str, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="bench-pinner", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _pin(self) -> None:
        cores = {"skyrl-hf-engine": ENGINE_CORE, "skyrl-train": TRAINER_CORE}
        for t in threading.enumerate():
            for prefix, core in cores.items():
                if t.name.startswith(prefix) and t.native_id and self.pinned.get(t.name) != t.native_id:
                    try:
                        os.sched_setaffinity(t.native_id, {core})
                        self.pinned[t.name] = t.native_id
                    except OSError:
                        pass

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._pin()
            eng = self.engine
            if eng is not None:
                busy = eng.stats.in_flight > 0 or eng.stats.queued > 0
                self.samples.append((time.perf_counter(), busy))
            self._stop.wait(self.period)


def one_run(out: Path, staleness: int, seed: int) -> dict:
    import torch

    from skyrl_core.config import load_config
    from skyrl_core.rollout import RolloutSession
    from skyrl_core.training import TrainRun

    torch.set_num_threads(1)
    cfg = load_config(QUICKSTART, OVERRIDES + [f"train.max_staleness={staleness}", f"train.seed={seed}"])
    pinner = Pinner()

    async def factory(config):
        session = await RolloutSession.create(config)
        pinner.engine = session.engine
        return session

    run_dir = out / f"k{staleness}-seed{seed}"
    run = TrainRun(cfg, run_dir, session_factory=factory)
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
    busy = [(t - base, b) for t, b in pinner.samples]
    start = next((t for t, b in busy if b), 0.0)
    end = train[-1]["time/train_end_s"]
    window = [(t, b) for t, b in busy if start <= t <= end]
    engine_busy = sum(b for _, b in window) / max(len(window), 1)
    train_s = sum(r["time/train_end_s"] - max(r["time/train_start_s"], start) for r in train)
    return {"staleness": staleness, "seed": seed, "steps": len(train), "s_per_step": (end - start) / len(train),
            "engine_busy": engine_busy, "trainer_busy": train_s / (end - start),
            "pass@1": evals[-1]["pass@1"] if evals else None, "steps_updated": summary["steps_updated"],
            "train_intervals": [[r["time/train_start_s"] - start, r["time/train_end_s"] - start] for r in train],
            "engine_busy_samples": [[round(t - start, 2), int(b)] for t, b in busy if t <= end + 1],
            "staleness_max": max((r.get("async/staleness_max", 0) for r in train), default=0),
            "pinned": sorted(pinner.pinned), "wall_total_s": wall_total, "load_avg": os.getloadavg(),
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


def report(out: Path) -> str:
    rows = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    lines = ["| max_staleness | runs (seeds) | wall s/step (mean, per seed) | steps/hour vs k=0 | engine busy | "
             "trainer busy | eval pass@1 (mean, per seed) | max staleness seen |", "|---|---|---|---|---|---|---|---|"]
    by_k = {k: [r for r in rows if r["staleness"] == k] for k in sorted({r["staleness"] for r in rows})}
    base = statistics.mean(r["s_per_step"] for r in by_k.get(0, rows))
    for k, rs in by_k.items():
        sps = [r["s_per_step"] for r in rs]
        p1 = [r["pass@1"] for r in rs if r["pass@1"] is not None]
        lines.append(
            f"| {k} | {len(rs)} ({', '.join(str(r['seed']) for r in rs)}) | {statistics.mean(sps):.1f} "
            f"({', '.join(f'{x:.1f}' for x in sps)}) | {base / statistics.mean(sps):.2f}x | "
            f"{statistics.mean(r['engine_busy'] for r in rs):.2f} | {statistics.mean(r['trainer_busy'] for r in rs):.2f} | "
            f"{statistics.mean(p1) if p1 else float('nan'):.2f} ({', '.join(f'{x:.2f}' for x in p1)}) | "
            f"{max(r['staleness_max'] for r in rs):g} |")
    table = "\n".join(lines)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    # the timeline of one seed per setting: seed 1 where it ran (its three runs saw the same low load here)
    shown = [min((r for r in rows if r["staleness"] == k), key=lambda r: (r["seed"] != 1, r["seed"])) for k in by_k]
    fig, axes = plt.subplots(len(shown), 1, figsize=(10, 1.4 + 1.1 * len(shown)), sharex=True, squeeze=False)
    for ax, r in zip(axes[:, 0], shown):
        eng = intervals(r["engine_busy_samples"])
        ax.broken_barh([(a, b - a) for a, b in eng], (1.1, 0.8), color="tab:blue")
        ax.broken_barh([(a, b - a) for a, b in r["train_intervals"]], (0.1, 0.8), color="tab:orange")
        ax.set_yticks([0.5, 1.5], ["trainer", "engine"])
        ax.set_title(f"max_staleness {r['staleness']} (seed {r['seed']}): {r['s_per_step']:.0f} s/step, engine busy "
                     f"{r['engine_busy']:.0%}, trainer busy {r['trainer_busy']:.0%}", fontsize=9)
    axes[-1, 0].set_xlabel("seconds since the engine's first call")
    fig.tight_layout()
    fig.savefig(out / "timeline.png", dpi=110)
    return table


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=REPO / "runs" / "bench-async")
    ap.add_argument("--staleness", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--report", action="store_true", help="only draw the table and PNG from results.jsonl")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if not args.report:
        os.environ.setdefault("OMP_NUM_THREADS", "1")
        if len(os.sched_getaffinity(0)) < 2:
            sys.exit("needs two cores (one for the engine, one for the trainer)")
        for seed in args.seeds:
            for k in args.staleness:
                if (args.out / f"k{k}-seed{seed}").exists():
                    continue
                print(f"run max_staleness={k} seed={seed} (load average {os.getloadavg()[0]:.1f})", flush=True)
                row = one_run(args.out, k, seed)
                with (args.out / "results.jsonl").open("a") as f:
                    f.write(json.dumps(row) + "\n")
                print(f"  {row['s_per_step']:.1f} s/step, engine busy {row['engine_busy']:.2f}, trainer busy "
                      f"{row['trainer_busy']:.2f}, pass@1 {row['pass@1']}", flush=True)
    print(report(args.out))


if __name__ == "__main__":
    main()
