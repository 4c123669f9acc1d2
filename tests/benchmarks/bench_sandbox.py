"""What the sandbox's trust boundary costs: one command's round trip (start a sandbox, run ``true``, collect the
result) and the start of a runtime, before (the runtime as of commit 58f7e9b: ``--ro-bind / /``, capabilities
kept) and after (user namespace, every capability dropped, allow-list mounts, limits; as root also the drop to
``nobody`` between two bubblewraps and handing the workspace over to it), on an empty workspace and on one
holding a repository-sized tree of files.

Run: python tests/benchmarks/bench_sandbox.py [--repeat 20] [--files 5000] [--base 58f7e9b]
Figures are written to docs/runtimes.md by hand, with the machine they came from.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def old_runtime(base: str):
    """The core runtime module as of ``base``, loaded under another name (None when git cannot show it)."""
    proc = subprocess.run(["git", "show", f"{base}:skyrl_core/runtime.py"], cwd=REPO, capture_output=True, text=True)
    if proc.returncode != 0:
        return None
    path = Path(tempfile.mkdtemp(prefix="skyrl-bench-")) / "old_runtime.py"
    path.write_text(proc.stdout)
    spec = importlib.util.spec_from_file_location("old_runtime", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def make_tree(root: Path, n: int) -> None:
    for i in range(n):
        d = root / f"pkg{i // 100}"
        d.mkdir(exist_ok=True)
        (d / f"m{i}.py").write_text(f"X = {i}\n")


async def measure(module, repeat: int, files: int) -> dict[str, float]:
    """Median milliseconds of: start + close of a runtime; one ``true`` command; the same on a tree of files."""
    spec = module.RuntimeSpec()
    starts, cmds, tree_cmds = [], [], []
    src = Path(tempfile.mkdtemp(prefix="skyrl-bench-src-", dir="/var/tmp"))
    make_tree(src, files)
    try:
        for _ in range(repeat):
            t0 = time.perf_counter()
            rt = module.LocalSandbox(spec)
            await rt.start()
            starts.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            res = await rt.exec(["true"])
            cmds.append(time.perf_counter() - t0)
            assert res.exit_code == 0, res.output
            await rt.close()
        rt = module.LocalSandbox(module.RuntimeSpec(source=str(src)))
        await rt.start()
        try:
            for _ in range(repeat):
                # a host-side tool writes a file between commands, as the editor does
                (rt.workspace / "pkg0" / "edited.py").write_text("Y = 1\n")
                t0 = time.perf_counter()
                res = await rt.exec(["true"])
                tree_cmds.append(time.perf_counter() - t0)
                assert res.exit_code == 0, res.output
        finally:
            await rt.close()
    finally:
        subprocess.run(["rm", "-rf", str(src)])
    ms = lambda xs: round(statistics.median(xs) * 1000, 1)  # noqa: E731
    return {"start_ms": ms(starts), "exec_true_ms": ms(cmds), f"exec_true_{files}_files_ms": ms(tree_cmds)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--files", type=int, default=5000)
    parser.add_argument("--base", default="58f7e9b", help="commit whose runtime is 'before'")
    ns = parser.parse_args()
    sys.path.insert(0, str(REPO))
    from skyrl_core.default_plugins.runtimes import sandbox as new

    rows = []
    old = old_runtime(ns.base)
    if old is not None:
        rows.append((f"before ({ns.base})", asyncio.run(measure(old, ns.repeat, ns.files))))
    rows.append(("after", asyncio.run(measure(new, ns.repeat, ns.files))))
    print(f"uid {os.geteuid()}, {os.cpu_count()} CPUs, median of {ns.repeat}")
    keys = list(rows[-1][1])
    print("| runtime | " + " | ".join(keys) + " |")
    print("| --- |" + " --- |" * len(keys))
    for name, values in rows:
        print(f"| {name} | " + " | ".join(str(values.get(k, "")) for k in keys) + " |")


if __name__ == "__main__":
    main()
