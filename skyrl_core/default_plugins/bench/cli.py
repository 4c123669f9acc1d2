"""The ``skyrl bench`` typer app: ``skyrl bench dispatch``. Heavy imports happen inside the command."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Optional

import typer

from skyrl_core.errors import SkyrlError

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
    real: bool = typer.Option(False, "--real", help="Run the real CPU stack (hf engine, GSM8K, python tool in "
                                                    "the bubblewrap sandbox) instead of the simulation."),
    task: str = typer.Option("gsm8k", "--task", help="--real: gsm8k | gsm8k_steps."),
    instances: Optional[int] = typer.Option(None, "--instances", help="--real: instances (default 4, --quick 2)."),
    samples: Optional[int] = typer.Option(None, "--samples", help="--real: samples per instance (default 2)."),
    max_turns: Optional[int] = typer.Option(None, "--max-turns", help="--real: agent turns (default 3, --quick 2)."),
    max_tokens: Optional[int] = typer.Option(None, "--max-tokens",
                                             help="--real: tokens per turn (default 96, --quick 48)."),
    max_batch: int = typer.Option(4, "--max-batch", help="--real: engine batch capacity."),
    max_parallel_agents: int = typer.Option(4, "--max-parallel-agents", help="--real: dispatcher.max_parallel_agents."),
    threads: Optional[int] = typer.Option(None, "--threads", help="--real: torch threads (1 on a busy shared CPU)."),
    seed: int = typer.Option(0, "--seed", help="--real: sampling seed (the same for every dispatcher)."),
    dispatcher: Optional[list[str]] = typer.Option(
        None, "--dispatcher", help="Only these (repeatable): a registered dispatcher's name, a plugin's included, or a "
                                   "bench variant (async_pipeline_auto, priority_remembered, ...). Default: every "
                                   "built-in variant and every registered dispatcher. The simulation always adds "
                                   "async_batch_bounded, the baseline of 'x bounded'; with --real, include it."),
) -> None:
    """Run every dispatcher on the same simulated workload and seed; print a table, write results.json and
    dispatch_timeline.png (engine occupancy and runtimes alive per dispatcher). With --real, run them on the real
    CPU stack instead and write results_real.json."""
    from rich.console import Console

    console = Console(width=max(Console().width, 128))
    if real:
        from .real import RealBenchSpec

        spec = RealBenchSpec(task=task, instances=instances or (2 if quick else 4), samples=samples or 2,
                             max_turns=max_turns or (2 if quick else 3), max_tokens=max_tokens or (48 if quick else 96),
                             max_batch=max_batch, max_parallel_agents=max_parallel_agents, seed=seed,
                             threads=threads, dispatchers=tuple(dispatcher) if dispatcher else None)
        _real(console, spec, output)
        return
    from rich.table import Table

    from .dispatch import PROFILES, plot_timelines, run_bench

    names = profile or ["swe", "light"]
    for name in names:
        if name not in PROFILES:
            raise SkyrlError(f"--profile '{name}' is unknown; valid: {', '.join(PROFILES)}")
    n_seeds = seeds if seeds is not None else (1 if quick else 5)
    if n_seeds < 1:
        raise SkyrlError(f"--seeds must be at least 1, got {n_seeds}")
    t0 = time.perf_counter()
    results = run_bench(names, list(range(n_seeds)), dispatcher)
    elapsed = time.perf_counter() - t0
    output.mkdir(parents=True, exist_ok=True)
    png = output / "dispatch_timeline.png"
    plot_timelines(results, str(png), profile=names[0])
    timelines = results.pop("_timelines")
    results["command"] = "skyrl bench dispatch" + (" --quick" if quick else "") + "".join(
        f" --profile {n}" for n in (profile or [])) + (f" --seeds {seeds}" if seeds is not None else "") + "".join(
        f" --dispatcher {d}" for d in (dispatcher or []))
    from .training_sim import training_loop_table

    training_rows = training_loop_table(seeds=n_seeds)
    results["training_loop_simulation"] = training_rows
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
        for d, r in rows.items():  # "-": a figure the dispatcher's own metrics do not give
            table.add_row(d, *(format(r[key], spec) if key in r else "-" for key, spec in (
                ("wall_s", ".0f"), ("speedup_vs_bounded", ".2f"), ("engine_busy", ".0%"), ("mean_occupancy", ".0%"),
                ("peak_runtimes", ".0f"), ("runtime_s_per_traj", ".0f"), ("trajectories_per_min", ".1f"))))
        console.print(table)
        if n_seeds > 1:
            for d, r in rows.items():
                console.print(f"  {d}: per-seed wall s {' / '.join(f'{w:.0f}' for w in r['per_seed_wall_s'])}; "
                              f"peak runtimes {' / '.join(f'{p:.0f}' for p in r['per_seed_peak_runtimes'])}")
    table = Table(title="training loop, sync vs async (train.max_staleness k) - SIMULATION, simulated seconds; "
                        "measured: docs/training.md")
    for col in ("gen : train time", "k", "s/step", "steps/h vs k=0", "engine busy", "trainer busy", "max staleness"):
        table.add_column(col, justify="right", no_wrap=True)
    for r in training_rows:
        table.add_row(f"{r['ratio']:g} : 1", str(r["max_staleness"]), f"{r['s_per_step']:.2f}", f"{r['speedup']:.2f}x",
                      f"{r['engine_busy']:.0%}", f"{r['trainer_busy']:.0%}", str(r["max_staleness_seen"]))
    console.print(table)
    for check in results["targets"]:
        mark = "[green]met[/green]" if check["ok"] else "[red]missed[/red]"
        console.print(f"{mark}  {check['target']}: {check['value']}")
    console.print(f"wrote {output / 'results.json'} and {png} in {elapsed:.1f} s")


def _real(console, spec, output: Path) -> None:
    """``--real``: run, print the table, write ``results_real.json`` and ``timelines_real.json``."""
    from rich.console import Console
    from rich.table import Table

    from .real import run_real

    console = Console(width=max(console.width, 170))  # every column unwrapped, also under a test runner
    spec.validate()
    t0 = time.perf_counter()
    results = run_real(spec)
    elapsed = time.perf_counter() - t0
    output.mkdir(parents=True, exist_ok=True)
    timelines = results.pop("_timelines")
    results["command"] = (
        f"skyrl bench dispatch --real --task {spec.task} --instances {spec.instances} --samples {spec.samples} "
        f"--max-turns {spec.max_turns} --max-tokens {spec.max_tokens} --max-batch {spec.max_batch} "
        f"--max-parallel-agents {spec.max_parallel_agents} --seed {spec.seed}"
        + (f" --threads {spec.threads}" if spec.threads else "")
        + "".join(f" --dispatcher {d}" for d in spec.dispatchers or ()))
    results["bench_wall_s"] = round(elapsed, 2)
    (output / "results_real.json").write_text(json.dumps(results, indent=1, default=float))
    (output / "timelines_real.json").write_text(json.dumps(timelines))
    table = Table(title=f"real CPU stack: {spec.task}, {spec.instances} instances x {spec.samples} samples, "
                        f"max_turns {spec.max_turns}, max_tokens {spec.max_tokens}, engine max_batch "
                        f"{spec.max_batch}, max_parallel_agents {spec.max_parallel_agents} (wall seconds)")
    for col in ("dispatcher", "wall s", "x bounded", "engine busy", "occupancy", "peak runtimes", "runtime-s/traj",
                "tokens", "ok/ended early", "leaked"):
        table.add_column(col, justify="right" if col != "dispatcher" else "left", no_wrap=True)
    for d, r in results["dispatchers"].items():
        table.add_row(d, f"{r['wall_s']:.1f}", f"{r['speedup_vs_bounded']:.2f}", f"{r['engine_busy']:.0%}",
                      f"{r['mean_occupancy']:.0%}", f"{r['peak_runtimes']:.0f}", f"{r['runtime_s_per_traj']:.1f}",
                      str(r["tokens_out"]), f"{r['n_ok']}/{r['n_failed']}", str(r["leaked_runtimes"]))
    console.print(table)
    bad = [d for d, r in results["dispatchers"].items() if r["leaked_runtimes"] or not r["accounted"]]
    if bad:
        console.print(f"[red]runtime leak or unaccounted trajectory[/red] in: {', '.join(bad)}")
    console.print(f"wrote {output / 'results_real.json'} in {elapsed:.1f} s (engine load "
                  f"{results['engine_load_s']:.1f} s)")
