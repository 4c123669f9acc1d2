"""``skyrl osworld ...``: per-task success of an eval run, the MiniWoB++ task list, the DesktopEnv bridge path."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import typer

from skyrl_core.default_plugins.eval.scaffold_check import scaffold_check_command

osworld_app = typer.Typer(help="Computer-use tasks: per-task report of an eval run, MiniWoB++ tasks, OSWorld bridge.",
                          no_args_is_help=True, rich_markup_mode=None)


def per_task_success(trajectories_jsonl: Path) -> dict[str, dict[str, float]]:
    """``{task type: {n, success, reward_mean, mean_turns}}`` from a ``skyrl eval`` trajectories.jsonl; the type
    is ``metrics.miniwob_task`` or ``metrics.osworld_task``, else the skyrl task name."""
    rows: dict[str, list[dict]] = defaultdict(list)
    for line in trajectories_jsonl.read_text(encoding="utf-8").splitlines():
        if line.strip():
            t = json.loads(line)
            m = t.get("metrics") or {}
            # an instance id is "<task type>/<seed>" for MiniWoB++ (the verifier may not have run: a timeout)
            kind = m.get("miniwob_task") or m.get("osworld_task")
            if not kind and t.get("task") == "miniwob":
                kind = str(t.get("instance_id", "")).split("/")[0]
            rows[str(kind or t.get("task"))].append(t)
    out = {}
    for name in sorted(rows):
        ts = rows[name]
        out[name] = {"n": len(ts), "success": sum(t.get("reward", 0) >= 1.0 for t in ts) / len(ts),
                     "reward_mean": sum(t.get("reward", 0) for t in ts) / len(ts),
                     "mean_turns": sum(t.get("turns", 0) for t in ts) / len(ts)}
    return out


def markdown_table(table: dict[str, dict[str, float]]) -> str:
    lines = ["| task | n | success | mean turns |", "| --- | ---: | ---: | ---: |"]
    for name, r in table.items():
        lines.append(f"| {name} | {r['n']} | {r['success']:.2f} | {r['mean_turns']:.1f} |")
    n = sum(r["n"] for r in table.values())
    if n:
        total = sum(r["success"] * r["n"] for r in table.values()) / n
        lines.append(f"| **all** | {n} | {total:.2f} | |")
    return "\n".join(lines) + "\n"


def _scripted(config):
    from .scripted import scripted_engine

    return scripted_engine(config)


scaffold_check_command(osworld_app, _scripted, "miniwob_scripted")


@osworld_app.command("report")
def report_command(run_dir: Path = typer.Argument(..., help="A `skyrl eval` output directory.")) -> None:
    """Per-task success of an eval run: a table in the terminal and per_task.md in the run directory."""
    from rich.console import Console
    from rich.table import Table

    path = run_dir / "trajectories.jsonl"
    if not path.is_file():
        raise typer.BadParameter(f"{path} not found: pass the directory `skyrl eval --output` wrote")
    table = per_task_success(path)
    view = Table(title=f"per-task success: {run_dir}")
    for col in ("task", "n", "success", "mean turns"):
        view.add_column(col, justify="left" if col == "task" else "right")
    for name, r in table.items():
        view.add_row(name, str(r["n"]), f"{r['success']:.2f}", f"{r['mean_turns']:.1f}")
    Console().print(view)
    (run_dir / "per_task.md").write_text(markdown_table(table), encoding="utf-8")


@osworld_app.command("miniwob-tasks")
def miniwob_tasks_command() -> None:
    """Every MiniWoB++ task type the installed miniwob package ships (the scripted policy's are starred)."""
    from .miniwob import DEFAULT_TASKS, available_tasks

    for name in available_tasks():
        typer.echo(f"{'*' if name in DEFAULT_TASKS else ' '} {name}")


@osworld_app.command("bridge-path")
def bridge_path_command() -> None:
    """The path of desktop_server.py, to run with OSWorld's own Python (it imports only the standard library)."""
    from . import desktop_server

    typer.echo(Path(desktop_server.__file__).resolve())
