"""Seconds per MiniWoB++ episode and the browser's memory, with the scripted policy through osworld_action.

    python plugins/osworld/benchmarks/bench_episodes.py [--seeds 5] [--tasks click-button enter-text ...]

One browser, one page reused across episodes (as the pool does between trajectories). Prints a table per task
type — episodes, success, median and p90 ms per episode (page reset + task start + first view + actions + the
page's verdict) — the browser launch time, and the resident memory of this process and of every Chromium
process it started (VmRSS from /proc summed over processes, MiB: pages they share count once per process, so it overstates).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from pathlib import Path


def _children_rss_mib(root: int) -> float:
    """Summed VmRSS of every descendant process of ``root`` (the Playwright driver and Chromium's processes)."""
    parents: dict[int, int] = {}
    rss: dict[int, int] = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            status = (d / "status").read_text()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        parents[int(d.name)] = int(fields.get("PPid", "0").strip())
        rss[int(d.name)] = int(fields.get("VmRSS", "0 kB").split()[0]) if "VmRSS" in fields else 0
    total, stack = 0, [root]
    while stack:
        pid = stack.pop()
        for child, parent in parents.items():
            if parent == pid:
                total += rss.get(child, 0)
                stack.append(child)
    return total / 1024


async def main(seeds: int, tasks: list[str]) -> None:
    from rich.console import Console
    from rich.table import Table

    from skyrl_core.tasks import DataSpec
    from skyrl_core.tools import ToolContext
    from skyrl_core.transitions import Trajectory
    from skyrl_osworld.browser import BrowserRuntime, close_pools
    from skyrl_osworld.miniwob import DEFAULT_TASKS, load_miniwob
    from skyrl_osworld.scripted import decide
    from skyrl_osworld.tools import osworld_action_tool
    from skyrl_osworld.verifiers import miniwob_reward

    tasks = tasks or list(DEFAULT_TASKS)
    instances = load_miniwob(DataSpec(split="test", options={"tasks": tasks, "seeds_per_task": seeds}))
    t0 = time.perf_counter()
    warm = BrowserRuntime()
    await warm.start()
    launch_s = time.perf_counter() - t0
    await warm.close()
    times: dict[str, list[float]] = {t: [] for t in tasks}
    wins: dict[str, int] = {t: 0 for t in tasks}
    peak = 0.0
    for inst in instances:
        start = time.perf_counter()
        rt = BrowserRuntime()
        await rt.start()
        await rt.prepare(inst)
        view, ctx = rt.first_view, ToolContext(runtime=rt, instance=inst)
        for turn in range(4):
            result = await osworld_action_tool.call({"code": decide(rt.instruction, view, turn)}, ctx)
            view = result.output.split("The page now:\n", 1)[-1]
            if result.finish:
                break
        verdict = await miniwob_reward(Trajectory(instance_id=inst.id, sample_index=0, task="miniwob",
                                                  group_id=inst.id), rt, inst)
        await rt.close()
        times[inst.data["task"]].append(time.perf_counter() - start)
        wins[inst.data["task"]] += verdict.reward >= 1.0
        peak = max(peak, _children_rss_mib(os.getpid()))
    await close_pools()
    table = Table(title=f"MiniWoB++ episodes, scripted policy, one browser ({seeds} seeds each)")
    for col in ("task", "episodes", "success", "median ms", "p90 ms"):
        table.add_column(col, justify="left" if col == "task" else "right")
    everything = []
    for task in tasks:
        ts = sorted(times[task])
        everything += ts
        table.add_row(task, str(len(ts)), f"{wins[task] / len(ts):.2f}", f"{1000 * statistics.median(ts):.0f}",
                      f"{1000 * ts[int(0.9 * (len(ts) - 1))]:.0f}")
    everything.sort()
    table.add_row("all", str(len(everything)), f"{sum(wins.values()) / len(everything):.2f}",
                  f"{1000 * statistics.median(everything):.0f}", f"{1000 * everything[int(0.9 * (len(everything) - 1))]:.0f}")
    console = Console()
    console.print(table)
    self_rss = int(Path("/proc/self/status").read_text().split("VmRSS:")[1].split()[0]) / 1024
    console.print(f"browser launch {launch_s:.2f} s; peak RSS of Playwright driver + Chromium {peak:.0f} MiB; "
                  f"this process {self_rss:.0f} MiB")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--tasks", nargs="*", default=[])
    args = ap.parse_args()
    asyncio.run(main(args.seeds, args.tasks))
