"""What an instance's environment costs: the cold build of its layers (each step in the sandbox, pip from the
package index) and a warm ``swe_sandbox`` prepare (copy the built tree, commit the baseline) once cached.

    python plugins/swe/benchmarks/env_bench.py swe-history/instances.jsonl [--repeat 3]

Cold builds go to a fresh temporary cache (so they download and compile again); warm prepares use it afterwards.
Prints one table row per instance (seconds) and a JSON line with the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("data")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()

    from skyrl_core import DataSpec
    from skyrl_core.runtime import RuntimeSpec

    import skyrl_swe.runtime as swe_runtime
    from skyrl_swe.data import load_instances, resolve_repository
    from skyrl_swe.environments import RepoEnvironments

    envs = RepoEnvironments(Path(tempfile.mkdtemp(prefix="skyrl-env-bench-")))
    swe_runtime.ENVIRONMENTS = envs  # the runtime's prepare uses this cache too
    rows = []
    for inst in load_instances(DataSpec(path=args.data)):
        source = resolve_repository(inst.data, {})
        t0 = time.perf_counter()
        env = envs.get(inst.data, Path(source))
        cold = time.perf_counter() - t0

        async def prepare() -> float:
            rt = swe_runtime.SweSandbox(RuntimeSpec(type="swe_sandbox"), instance=inst)
            t = time.perf_counter()
            await rt.start()
            took = time.perf_counter() - t
            await rt.close()
            return took

        warm = [asyncio.run(prepare()) for _ in range(args.repeat)]
        rows.append({"instance_id": inst.id, "install": bool(env.tree), "cold_build_s": round(cold, 1),
                     "warm_prepare_s": round(statistics.median(warm), 2)})
    print("| instance | install step | cold build (s) | warm prepare, median (s) |\n| --- | --- | --- | --- |")
    for r in rows:
        print(f"| {r['instance_id']} | {'yes' if r['install'] else 'no'} | {r['cold_build_s']} | "
              f"{r['warm_prepare_s']} |")
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
