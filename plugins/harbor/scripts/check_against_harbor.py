"""Check skyrl-harbor's task parser against the `harbor` package's own task model, on every task directory given.

harbor 0.25.0 needs Python 3.12, so it runs in its own venv (`--harbor-python`); this script runs in skyrl's.
For each task both parse (or both refuse), and these fields must agree: name, instruction (as shown to the
agent), verifier and agent timeouts, cpus, memory_mb, storage_mb, network mode (and each phase's: [agent] and
[verifier] network_mode override it), workdir, docker_image and the verifier's env. Prints one line per task and exits 1 on any disagreement.

    python3.12 -m venv /tmp/venv-harbor312 && /tmp/venv-harbor312/bin/pip install harbor==0.25.0
    python plugins/harbor/scripts/check_against_harbor.py --harbor-python /tmp/venv-harbor312/bin/python DIR...
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from skyrl_harbor.taskdir import HarborTaskError, find_task_dirs, load_task

# run by harbor's interpreter: task directories on argv, one JSON object per line out
HARBOR_SIDE = r"""
import json, sys, warnings
warnings.simplefilter("ignore")
from harbor.models.task.task import Task
for d in sys.argv[1:]:
    try:
        t = Task(d)
    except Exception as exc:
        print(json.dumps({"dir": d, "error": f"{type(exc).__name__}: {exc}"[:300]})); continue
    c, e = t.config, t.config.environment
    mode = e.network_mode.value if hasattr(e.network_mode, "value") else e.network_mode
    print(json.dumps({"dir": d, "name": t.name, "instruction": t.instruction.strip(),
        "verifier_timeout_s": c.verifier.timeout_sec, "agent_timeout_s": c.agent.timeout_sec,
        "cpus": e.cpus, "memory_mb": e.memory_mb, "storage_mb": e.storage_mb, "network_mode": mode,
        "workdir": e.workdir, "docker_image": e.docker_image, "verifier_env": dict(c.verifier.env),
        **{f"{p}_network_mode": getattr(getattr(c, p).network_mode, "value", None) or mode
           for p in ("agent", "verifier")}}))
"""
FIELDS = ("name", "instruction", "verifier_timeout_s", "agent_timeout_s", "cpus", "memory_mb", "storage_mb",
          "network_mode", "workdir", "docker_image", "verifier_env", "agent_network_mode", "verifier_network_mode")


def ours(directory: Path) -> dict:
    try:
        task = load_task(directory)
    except HarborTaskError as exc:
        return {"error": str(exc)}
    phases = {f"{p}_network_mode": task.phase_network_mode(p) for p in ("agent", "verifier")}
    return {field: phases[field] if field in phases else getattr(task, field) for field in FIELDS}


def same(a, b) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        return float(a) == float(b)
    return a == b


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--harbor-python", required=True, help="python of a venv with harbor==0.25.0")
    parser.add_argument("roots", nargs="+", type=Path, help="task directories or folders of them")
    args = parser.parse_args()
    dirs = [d.resolve() for root in args.roots for d in find_task_dirs(root)]
    out = subprocess.run([args.harbor_python, "-c", HARBOR_SIDE, *map(str, dirs)], capture_output=True, text=True,
                         check=True).stdout
    version = subprocess.run([args.harbor_python, "-c", "import importlib.metadata as m; print(m.version('harbor'))"],
                             capture_output=True, text=True, check=True).stdout.strip()
    theirs = {row["dir"]: row for row in map(json.loads, out.splitlines())}
    bad = 0
    for d in dirs:
        mine, ref = ours(d), theirs[str(d)]
        if "error" in mine or "error" in ref:
            agree = ("error" in mine) == ("error" in ref)
            what = "both refuse" if agree else f"ours: {mine.get('error', 'parses')[:100]} / harbor: " \
                                                f"{ref.get('error', 'parses')[:100]}"
        else:
            diff = [f for f in FIELDS if not same(mine[f], ref[f])]
            agree = not diff
            what = "agree on " + ", ".join(FIELDS) if agree else \
                "; ".join(f"{f}: ours {mine[f]!r} / harbor {ref[f]!r}" for f in diff)[:400]
        bad += not agree
        print(f"{'ok  ' if agree else 'DIFF'} {d}: {what if not agree else 'agree'}")
    print(f"harbor {version}: {len(dirs) - bad} of {len(dirs)} task directories agree")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
