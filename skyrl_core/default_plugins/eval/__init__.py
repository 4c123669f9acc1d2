"""Built-in eval: the ``skyrl eval`` command (here, with its console summary) over :mod:`.run` (roll out a
config's eval split, summarise it as pass@k and friends, write trajectories, metrics and every registered eval
writer's files), and :mod:`.scaffold_check` (the ``scaffold-check`` command a plugin with a scripted policy adds).

Heavy imports (the engine, torch) happen inside the command, so ``skyrl --help`` stays fast.
"""

from __future__ import annotations

from typing import Any, Optional

from skyrl_core.hookspecs import hookimpl


def default_output_dir(root: str = "runs", prefix: str = "eval") -> str:
    """A new timestamped directory name under ``root`` (``runs/eval-20260101-120000``; suffixed if taken)."""
    import time
    from pathlib import Path

    stamp = time.strftime("%Y%m%d-%H%M%S")
    path = Path(root) / f"{prefix}-{stamp}"
    n = 1
    while path.exists():
        path = Path(root) / f"{prefix}-{stamp}-{n}"
        n += 1
    return str(path)


def metrics_table(metrics: dict[str, Any]):
    """A rich Table of the headline eval metrics."""
    from rich.table import Table

    table = Table(title="skyrl eval")
    table.add_column("metric")
    table.add_column("value", justify="right")
    for key, value in metrics.items():
        if key in ("dispatch", "error_messages"):  # error messages: printed in full below the table
            continue
        if isinstance(value, dict):
            value = ", ".join(f"{k}: {v}" for k, v in value.items()) or "-"
        elif isinstance(value, float):
            value = f"{value:.4g}"
        table.add_row(key, str(value))
    return table


def run_problems(metrics: dict[str, Any]) -> tuple[list[str], bool]:
    """What an eval summary must say beyond its numbers, from :func:`.run.eval_metrics`: ``(lines, failed)``.
    ``failed`` is True when no trajectory could run (none got one model turn: every one ended in runtime
    set-up, an engine failure or a stall before its first answer), so ``skyrl eval`` exits nonzero. The lines
    name the first distinct error messages, and say so when the verifier ran on no trajectory (no verdicts, so
    an eval writer that reports them has nothing to report)."""
    lines: list[str] = []
    n = int(metrics.get("n_trajectories", 0))
    ran = int(metrics.get("trajectories_run", n))
    failed = n == 0 or ran == 0
    if n == 0:
        lines.append("no trajectory was rolled out: the eval split is empty (check data/eval_data)")
    elif ran == 0:
        lines.append(f"no trajectory could run: all {n} ended before the model's first answer")
    messages = metrics.get("error_messages") or []
    if messages:
        count = sum((metrics.get("errors") or {}).values())
        lines.append(f"{count} of {n} trajectories ended on an error or a limit; the first message of each kind:")
        lines.extend(f"  {message}" for message in messages)
    if n and not metrics.get("verified", n):
        lines.append(f"the verifier ran on none of the {n} trajectories (each ended before it), so there are no "
                     f"verdicts for the eval's outputs to report")
    return lines, failed


@hookimpl(trylast=True)
def register_commands(register):
    import typer

    def eval_command(
        config: str = typer.Argument(..., help="YAML config file (see docs/config.md)."),
        overrides: Optional[list[str]] = typer.Argument(None, help="key.sub=value overrides, e.g. data.limit=20"),
        output: Optional[str] = typer.Option(None, "--output", "-o",
                                             help="Output directory (default: a new runs/eval-<time>/)."),
    ) -> None:
        """Roll out the eval split of CONFIG's tasks and write trajectories.jsonl, metrics.json and
        trajectories.html. Prints pass@1, pass@k, turns, finish reasons, tool calls, tokens and wall time."""
        import asyncio

        from rich.console import Console
        from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn,
                                   TimeRemainingColumn)

        from skyrl_core.config import load_config
        from .overrides import command_check
        from .run import run_eval

        console = Console()
        cfg = load_config(config, list(overrides or []), check=command_check("eval"))
        out = output or default_output_dir()
        console.print(f"writing to [bold]{out}[/bold]")
        piped = None
        if not console.is_terminal:  # rich's live bar shows nothing in a pipe: a line every interval instead
            import os

            from skyrl_core.default_plugins.trainer.train_command import PROGRESS_INTERVAL_S, PipeProgress

            piped = PipeProgress(Console(stderr=True), float(os.environ.get("SKYRL_PROGRESS_INTERVAL_S",
                                                                            PROGRESS_INTERVAL_S))).start()
        with Progress(TextColumn("[progress.description]{task.description}"), BarColumn(), MofNCompleteColumn(),
                      TextColumn("solved {task.fields[solved]}"), TimeElapsedColumn(), TextColumn("left"),
                      TimeRemainingColumn(), console=console) as progress:
            task = progress.add_task("loading engine", total=None, solved=0)
            solved, done, total = [0], [0], [0]

            def on_start(n: int) -> None:
                total[0] = n
                progress.update(task, description="rollouts", total=n)
                if piped is not None:
                    piped.update("eval", 0, n)

            def on_done(traj) -> None:
                solved[0] += traj.reward >= 1.0
                done[0] += 1
                progress.update(task, advance=1, solved=solved[0])
                if piped is not None:
                    piped.update("eval", done[0], total[0])

            try:
                metrics = asyncio.run(run_eval(cfg, out, on_start=on_start, on_trajectory_done=on_done))
            finally:
                if piped is not None:
                    piped.stop()
        console.print(metrics_table(metrics))
        console.print(f"trajectories: {out}/trajectories.jsonl · metrics: {out}/metrics.json · "
                      f"view: {out}/trajectories.html")
        lines, failed = run_problems(metrics)
        for line in lines:
            console.print(line, markup=False, highlight=False, soft_wrap=True)
        if failed:
            raise typer.Exit(1)

    app = typer.Typer(rich_markup_mode=None, add_completion=False)
    app.command("eval")(eval_command)
    register(app, name="eval")
