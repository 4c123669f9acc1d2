"""The ``skyrl bench`` typer app: ``skyrl bench dispatch``. Heavy imports happen inside the command."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Optional

import typer

from ..errors import SkyrlError

log = logging.getLogger(__name__)

bench_app = typer.Typer(name="bench", help="Benchmarks: `skyrl bench dispatch` compares the dispatchers.",
                        no_args_is_help=True, rich_markup_mode=None)


@bench_app.callback()
def _bench() -> None:
    """Benchmarks (a group, so subcommands stay subcommands)."""


@bench_app.command("dispatch")
def dispatch_command(
    quick: bool = typer.Option(False, "--quick", help="One seed instead of five (well under a minute)."),
    output: Path = typer.Option(Path("bench-dispatch"), "--output", help="Directory for results.json and the PNG."),
    profile: Optional[list[str]] = typer.Option(None, "--profile",
                                                help="swe | light (repeatable; default: both)."),
    seeds: Optional[int] = typer.Option(None, "--seeds", help="Number of workload seeds (default 5, --quick 1)."),
) -> None:
    """Run every dispatcher on the same simulated workload and seed; print a table, write results.json and
    dispatch_timeline.png (engine occupancy and runtimes alive per dispatcher)."""
    from rich.console import Console
    from rich.table import Table

    from .dispatch import PROFILES, plot_timelines, run_bench

    console = Console(width=max(Console().width, 128))
    names = profile or ["swe", "light"]
    for name in names:
        if name not in PROFILES:
            raise SkyrlError(f"--profile '{name}' is unknown; valid: {', '.join(PROFILES)}")
    n_seeds = seeds if seeds is not None else (1 if quick else 5)
    if n_seeds < 1:
        raise SkyrlError(f"--seeds must be at least 1, got {n_seeds}")
    t0 = time.perf_counter()
    results = run_bench(names, list(range(n_seeds)))
    elapsed = time.perf_counter() - t0
    output.mkdir(parents=True, exist_ok=True)
    png = output / "dispatch_timeline.png"
    plot_timelines(results, str(png), profile=names[0])
    timelines = results.pop("_timelines")
    results["command"] = "skyrl bench dispatch" + (" --quick" if quick else "") + "".join(
        f" --profile {n}" for n in (profile or [])) + (f" --seeds {seeds}" if seeds is not None else "")
    results["bench_cpu_s"] = round(elapsed, 2)
    results["timeline_png"] = png.name
    (output / "results.json").write_text(json.dumps(results, indent=1, default=float))
    (output / "timelines.json").write_text(json.dumps(timelines))

    for name in names:
        rows = results["profiles"][name]["dispatchers"]
        table = Table(title=f"profile '{name}' ({n_seeds} seed{'s' if n_seeds > 1 else ''}; simulated seconds)")
        for col in ("dispatcher", "wall s", "x bounded", "engine busy", "occupancy", "peak runtimes",
                    "runtime-s/traj", "traj/min"):
            table.add_column(col, justify="right" if col != "dispatcher" else "left", no_wrap=True)
        for d, r in rows.items():
            table.add_row(d, f"{r['wall_s']:.0f}", f"{r['speedup_vs_bounded']:.2f}", f"{r['engine_busy']:.0%}",
                          f"{r['mean_occupancy']:.0%}", f"{r['peak_runtimes']:.0f}", f"{r['runtime_s_per_traj']:.0f}",
                          f"{r['trajectories_per_min']:.1f}")
        console.print(table)
    for check in results["targets"]:
        mark = "[green]met[/green]" if check["ok"] else "[red]missed[/red]"
        console.print(f"{mark}  {check['target']}: {check['value']}")
    console.print(f"wrote {output / 'results.json'} and {png} in {elapsed:.1f} s")
