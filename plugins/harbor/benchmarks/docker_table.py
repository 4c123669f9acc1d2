"""The Harbor docker-path table: for a sample of Harbor task directories, does the image build here (with its
FROM mapped to the local Debian base), does the task's own solution/solve.sh score 1, does doing nothing score 0.

    python benchmarks/docker_table.py --source NAME DIR [--source NAME DIR ...] [--sample N] [--seed S]
                                      [--network] [--out rows.json]

Each ``--source`` is a folder of task directories (found as ``skyrl harbor verify`` finds them); from each, at
most ``--sample`` tasks are drawn with ``random.Random(seed).sample`` over the sorted directory list (all of them
when it holds fewer). Every task runs as ``skyrl harbor verify --docker`` runs it (build, doing nothing, then the
solution), one at a time, each bounded by ``--task-seconds``. Prints the counts per source and one Markdown row
per task (the README's table), and writes the rows as JSON to ``--out``. Needs a Docker engine
(``scripts/ensure-docker start``), skyrl-swe, and the network for the builds' apt-get/pip (``--network`` also
gives it to the solution and the tests).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import random
import time
from pathlib import Path

from skyrl_core.runtime import RuntimeSpec
from skyrl_harbor.cli import verify_tasks
from skyrl_harbor.taskdir import find_task_dirs


def draw(root: Path, n: int, seed: int) -> list[Path]:
    dirs = sorted(find_task_dirs(root))
    return dirs if len(dirs) <= n else sorted(random.Random(seed).sample(dirs, n))


async def run_one(directory: Path, spec: RuntimeSpec, seconds: float) -> dict:
    t0 = time.monotonic()
    try:
        rows = await asyncio.wait_for(verify_tasks(directory, spec), seconds)
        row = rows[0]
    except asyncio.TimeoutError:
        row = {"task": directory.name, "parses": True, "runs_here": None, "solution": None, "nothing": None,
               "note": f"did not finish in {seconds:g} s", "build": None, "build_reason": ""}
    row["seconds"] = round(time.monotonic() - t0, 1)
    return row


def fmt(value) -> str:
    return "-" if value is None else f"{value:g}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--source", nargs=2, action="append", metavar=("NAME", "DIR"), required=True)
    ap.add_argument("--sample", type=int, default=6)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--network", action="store_true")
    ap.add_argument("--task-seconds", type=float, default=900)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    spec = RuntimeSpec(type="harbor_docker", network=args.network)
    rows = []
    for name, folder in args.source:
        for directory in draw(Path(folder), args.sample, args.seed):
            row = asyncio.run(run_one(directory, spec, args.task_seconds))
            row["source"] = name
            rows.append(row)
            print(json.dumps({k: row.get(k) for k in ("source", "task", "build", "build_reason", "solution",
                                                      "nothing", "seconds")}), flush=True)
    print(f"\n{datetime.date.today().isoformat()}, network={args.network}, sample={args.sample}, seed={args.seed}")
    print("| source | tasks | build | solution = 1 | nothing = 0 | build failures |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name, _ in args.source:
        mine = [r for r in rows if r["source"] == name]
        built = [r for r in mine if r.get("build")]
        reasons: dict[str, int] = {}
        for r in mine:
            if r.get("build") is False:
                reasons[r["build_reason"]] = reasons.get(r["build_reason"], 0) + 1
        with_solution = [r for r in built if r["solution"] is not None]
        print(f"| {name} | {len(mine)} | {len(built)} | {sum(r['solution'] == 1 for r in with_solution)} of "
              f"{len(with_solution)} | {sum(r['nothing'] == 0 for r in built)} of {len(built)} | "
              f"{', '.join(f'{k} {v}' for k, v in sorted(reasons.items())) or '-'} |")
    print("\n| source | task | build | solution | nothing | note (solution or build) | the tests on nothing |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        build = "yes" if r.get("build") else (f"no ({r['build_reason']})" if r.get("build") is False else "-")
        note, control = (" ".join(str(r.get(k) or "").split())[:140].replace("|", "/")
                         for k in ("note", "nothing_note"))
        print(f"| {r['source']} | {r['task']} | {build} | {fmt(r['solution'])} | {fmt(r['nothing'])} | {note} | "
              f"{control} |")
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
