"""Scheduling overhead of the pipeline's grant orders on a large batch (not a test).

    python tests/benchmarks/bench_dispatch_overhead.py [--instances 256] [--samples 8] [--capacity 256]

Runs the SWE profile scaled up (``instances x samples`` trajectories, engine capacity and run slots
``--capacity``) on the virtual clock and reports the process CPU seconds each dispatcher spends for one batch:
the stages are timed waits, so that CPU is the dispatcher's own work (plus the simulation's), and the simulated
wall time shows the orders' schedules. Measured figures: docs/dispatchers.md ("Overhead").
"""

from __future__ import annotations

import argparse
import time

import attrs

from skyrl_core.default_plugins.bench.clock import run_virtual
from skyrl_core.default_plugins.bench.dispatch import PROFILES, simulate
from skyrl_core.config import DispatcherConfig


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--instances", type=int, default=256)
    ap.add_argument("--samples", type=int, default=8)
    ap.add_argument("--capacity", type=int, default=256)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    profile = attrs.evolve(PROFILES["swe"], instances=args.instances, samples=args.samples,
                           capacity=args.capacity, max_parallel_agents=args.capacity)
    variants = {
        "async_pipeline (fifo)": DispatcherConfig(type="async_pipeline", max_parallel_agents=args.capacity),
        "async_pipeline (auto, group_cost)": DispatcherConfig(type="async_pipeline", auto=True,
                                                              max_parallel_agents=args.capacity),
    }
    n = args.instances * args.samples
    for name, config in variants.items():
        t0 = time.process_time()
        result = run_virtual(simulate(profile, config, args.seed))
        cpu = time.process_time() - t0
        print(f"{name:36s} {n} trajectories: {cpu:6.1f} s CPU, simulated wall {result['wall_s']:7.1f} s")


if __name__ == "__main__":
    main()
