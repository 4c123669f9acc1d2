"""The two repository runtimes side by side: ``swe_sandbox`` (bubblewrap) and ``docker`` (a hardened container).

For one repository-sized tree (``--files`` small modules plus a package and its tests) made here, both runtimes
hold the same copy (docker from an image ``skyrl swe build-images`` would build; built first, not timed). Measured,
as medians over ``--repeat`` runtimes:

- ``start``: ``start`` + ``prepare`` (copy of the repository, baseline commit; docker also copies it out of the
  image and starts the container) — init-stage work;
- ``exec true`` and ``exec python``: one command's round trip (``true``; ``python -c pass``);
- ``diff``: computing the agent's patch after one edit;
- ``close``: removing the runtime;
- memory held while idle: docker's container cgroup (``memory.usage_in_bytes``) plus its ``containerd-shim``
  process's RSS on the host; the sandbox holds no process between commands (0).

Run (root, with a Docker engine: scripts/ensure-docker start):
    python plugins/swe/benchmarks/bench_runtimes.py [--repeat 10] [--files 2000]
Figures are written to docs/runtimes.md by hand, with the machine they came from.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import tempfile
import time
from pathlib import Path


def make_repo(root: Path, files: int) -> None:
    (root / "calc").mkdir(parents=True)
    (root / "calc" / "__init__.py").write_text("")
    (root / "calc" / "core.py").write_text("def add(a, b):\n    return a + b\n")
    (root / "tests").mkdir()
    (root / "tests" / "test_core.py").write_text("from calc.core import add\n\n\ndef test_add():\n    assert add(1, 2) == 3\n")
    for i in range(files):
        d = root / "vendor" / f"pkg{i // 100}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"m{i}.py").write_text(f"X = {i}\n")


def _shim_rss_mb(container_id: str) -> float:
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            if "containerd-shim" in cmd and container_id in cmd:
                for line in (proc / "status").read_text().splitlines():
                    if line.startswith("VmRSS:"):
                        return int(line.split()[1]) / 1024
        except OSError:
            continue
    return 0.0


def _cgroup_mb(container_id: str) -> float:
    for path in (Path("/sys/fs/cgroup/memory/docker") / container_id / "memory.usage_in_bytes",
                 Path("/sys/fs/cgroup/docker") / container_id / "memory.current",
                 Path("/sys/fs/cgroup/system.slice") / f"docker-{container_id}.scope" / "memory.current"):
        try:
            return int(path.read_text()) / 2**20
        except OSError:
            continue
    return 0.0


async def measure(cls, spec, instance, repeat: int) -> dict[str, float]:
    rows: dict[str, list[float]] = {k: [] for k in ("start", "exec true", "exec python", "diff", "close", "memory")}
    for _ in range(repeat):
        t0 = time.perf_counter()
        rt = cls(spec, instance=instance)
        await rt.start()
        rows["start"].append(time.perf_counter() - t0)
        for key, argv in (("exec true", ["true"]), ("exec python", ["python", "-c", "pass"])):
            t0 = time.perf_counter()
            res = await rt.exec(argv)
            rows[key].append(time.perf_counter() - t0)
            assert res.exit_code == 0, res.output
        await rt.write_file("calc/core.py", "def add(a, b):\n    return b + a\n")
        t0 = time.perf_counter()
        patch = await rt.diff()
        rows["diff"].append(time.perf_counter() - t0)
        assert "+    return b + a" in patch, patch
        container = getattr(rt, "container", None)
        rows["memory"].append(_cgroup_mb(container.id) + _shim_rss_mb(container.id) if container else 0.0)
        t0 = time.perf_counter()
        await rt.close()
        rows["close"].append(time.perf_counter() - t0)
    return {k: statistics.median(v) for k, v in rows.items()}


async def main(repeat: int, files: int) -> None:
    scratch = Path(tempfile.mkdtemp(prefix="skyrl-bench-repo-", dir="/var/tmp"))
    try:
        await _run(scratch / "repo", repeat, files)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


async def _run(src: Path, repeat: int, files: int) -> None:
    from skyrl_core import Instance
    from skyrl_core.runtime import RuntimeSpec
    from skyrl_swe.docker_client import docker_client
    from skyrl_swe.docker_runtime import DockerRuntime
    from skyrl_swe.images import build_instance_image
    from skyrl_swe.runtime import SweSandbox

    make_repo(src, files)
    data = {"instance_id": f"bench__runtimes-{files}", "repo": "bench/runtimes", "version": "1",
            "repo_dir": str(src), "FAIL_TO_PASS": ["tests/test_core.py::test_add"], "PASS_TO_PASS": []}
    instance = Instance(id=data["instance_id"], data=data)
    t0 = time.perf_counter()
    image, status = build_instance_image(docker_client(), data)
    print(f"image {image}: {status} in {time.perf_counter() - t0:.1f} s")
    results = {}
    for name, cls in (("swe_sandbox", SweSandbox), ("docker", DockerRuntime)):
        await measure(cls, RuntimeSpec(type=name), instance, 1)  # warm: environment built, image layers cached
        results[name] = await measure(cls, RuntimeSpec(type=name), instance, repeat)
    print(f"\n{files + 3} files, medians of {repeat}:\n")
    print("| runtime | start + prepare (ms) | exec `true` (ms) | exec `python -c pass` (ms) | diff (ms) "
          "| close (ms) | memory held idle (MiB) |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for name, r in results.items():
        print(f"| {name} | {r['start'] * 1000:.0f} | {r['exec true'] * 1000:.0f} | {r['exec python'] * 1000:.0f} | "
              f"{r['diff'] * 1000:.0f} | {r['close'] * 1000:.0f} | {r['memory']:.1f} |")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--files", type=int, default=2000)
    args = parser.parse_args()
    asyncio.run(main(args.repeat, args.files))
