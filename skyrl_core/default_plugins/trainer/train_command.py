"""``skyrl train CONFIG [overrides] [--output DIR] [--resume]`` and its console (step lines, the progress bar,
:class:`PipeProgress` for piped output) — registered through ``register_commands``; the loop itself is the core's
:class:`skyrl_core.training.TrainRun`. Imports only typer/rich at module level; torch loads when the command runs."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

train_app = typer.Typer(rich_markup_mode=None, add_completion=False)


PROGRESS_INTERVAL_S = 30.0  # how often a piped run prints where its current phase stands


class PipeProgress:
    """Progress lines for a run whose stderr is not a terminal (a pipe, a log file), where rich's live bar shows
    nothing: while a phase (``rollouts``, ``eval``) runs, a daemon thread prints ``<phase>: done/total
    trajectories, <s> s`` every ``interval`` seconds (``SKYRL_PROGRESS_INTERVAL_S``, default 30), so a log under
    load is never minutes of silence; once a trajectory is done the line adds ``, about <s> s left`` (the phase's
    mean seconds per finished trajectory times those left). ``update`` is what ``TrainRun.on_rollout`` calls."""

    def __init__(self, console: Console, interval: float) -> None:
        import threading

        self.console = console
        self.interval = interval
        self.state: tuple[str, int, int, float] | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="skyrl-progress", daemon=True)

    def start(self) -> "PipeProgress":
        self._thread.start()
        return self

    def update(self, phase: str, done: int, total: int) -> None:
        import time

        with self._lock:
            if done == 0 or self.state is None or self.state[0] != phase:
                self.state = (phase, done, total, time.monotonic())
            else:
                self.state = (phase, done, total, self.state[3])
            if done >= total:
                self.state = None

    def line(self) -> str | None:
        import time

        with self._lock:
            if self.state is None:
                return None
            phase, done, total, since = self.state
        elapsed = time.monotonic() - since
        eta = f", about {elapsed / done * (total - done):.0f} s left" if done else ""
        return f"{phase}: {done}/{total} trajectories, {elapsed:.0f} s{eta}"

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            text = self.line()
            if text is not None:
                self.console.print(text, highlight=False, soft_wrap=True)

    def stop(self) -> None:
        self._stop.set()


def task_line(record: dict, key: str, label: str) -> str:
    """``"gsm8k_steps reward 0.50, swe reward 0.00"`` from a multi-task record's ``task/<name>/<key>`` values
    ("" for a single-task record)."""
    parts = [f"{k.split('/')[1]} {label} {_fmt(v)}" for k, v in sorted(record.items())
             if k.startswith("task/") and k.endswith(f"/{key}")]
    return ", ".join(parts)


def timeouts(record: dict, n) -> str:
    """``", 11 of 100 trajectories ended on an engine timeout (engine.timeout_s: docs/engines.md)"`` from a
    record's ``finish/timeout`` fraction of ``n`` trajectories; "" when there were none."""
    count = round(float(record.get("finish/timeout") or 0.0) * float(n or 0))
    if not count:
        return ""
    return (f"; {count} of {int(n)} trajectories ended on an engine timeout (a stall past engine.timeout_s, or "
            f"engine.call_timeout_s: docs/engines.md)")


def default_output(config_path: str) -> Path:
    return Path("runs") / Path(config_path).stem


def backend_launcher(cfg):
    """The ``launch(config, *, output, resume)`` attribute of the configured backend's factory, or None. A
    backend whose trainer owns the loop (rollouts included) has one; ``skyrl train`` then hands it the run."""
    from skyrl_core.contracts import member
    from skyrl_core.plugins import get_registry

    return member(get_registry().get("backends", cfg.backend.type), "backends", "launch")


def _fmt(value, spec=".2f") -> str:
    return format(value, spec) if isinstance(value, (int, float)) else "-"


@train_app.command("train", context_settings={"allow_extra_args": False})
def train_command(
    config: str = typer.Argument(..., help="Run config (YAML), e.g. examples/quickstart.yaml."),
    overrides: Optional[list[str]] = typer.Argument(None, help="key.sub=value overrides, e.g. train.steps=1 "
                                                              "data.limit=4."),
    output: Optional[str] = typer.Option(None, "--output", "-o", help="Run directory (default runs/<config name>)."),
    resume: bool = typer.Option(False, "--resume", help="Continue the run in --output from its latest checkpoint."),
    accept_data_change: bool = typer.Option(False, "--accept-data-change",
                                            help="With --resume: continue although the keys that decide the data "
                                                 "order changed (train instances may then repeat or be skipped)."),
) -> None:
    """Train an agent with RL: rollouts -> training data -> train step -> weight sync, with eval, checkpoints,
    metrics (metrics.jsonl, TensorBoard/W&B when enabled) and a final plot (training.png)."""
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn,
                               TimeRemainingColumn)

    from skyrl_core.config import load_config
    from skyrl_core.default_plugins.eval.overrides import command_check
    from skyrl_core.training import TrainRun

    cfg = load_config(config, list(overrides or []), check=command_check("train"))
    launch = backend_launcher(cfg)
    if launch is not None:  # the backend runs its own training loop (e.g. SkyRL-train's Ray trainer)
        launch(cfg, output=Path(output) if output else default_output(config), resume=resume)
        return
    try:  # transformers' per-file progress bars would tear through the step display
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
    except ImportError:
        pass
    out = Path(output) if output else default_output(config)
    console = Console(stderr=True)
    progress = Progress(TextColumn("[bold]train"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                        TextColumn("left"), TimeRemainingColumn(), TextColumn("{task.description}"), console=console,
                        transient=False)
    task = progress.add_task("", total=cfg.train.steps)
    phase_task = progress.add_task("", total=1, visible=False)

    piped = None
    if not console.is_terminal:
        import os

        piped = PipeProgress(console, float(os.environ.get("SKYRL_PROGRESS_INTERVAL_S", PROGRESS_INTERVAL_S)))

    def on_rollout(phase: str, done: int, total: int) -> None:
        # the trajectories of the current rollout or eval, so the minutes before a step's line are visible too
        progress.update(phase_task, completed=done, total=max(total, 1), visible=done < total,
                        description=f"{phase}: {done}/{total} trajectories")
        if piped is not None:
            piped.update(phase, done, total)

    def on_step(record: dict) -> None:
        if record["kind"] == "eval":
            console.print(f"eval @ step {record['step']}: pass@1 {_fmt(record['pass@1'], '.3f')} "
                          f"on {record['n']} instances, turns {_fmt(record.get('mean_turns'))}, "
                          f"tool calls {_fmt(record.get('tool_calls_per_trajectory'))} "
                          f"({_fmt(record['eval_s'], '.0f')} s){timeouts(record, record.get('n'))}", highlight=False,
                          soft_wrap=True)
            per_task = task_line(record, "pass@1", "pass@1")
            if per_task:
                console.print(f"  per task: {per_task}", highlight=False, soft_wrap=True)
            return
        progress.update(task, completed=record["step"],
                        description=f"reward {_fmt(record.get('reward_mean'))} "
                                    f"loss {_fmt(record.get('train/loss'), '.4f')} "
                                    f"step {_fmt(record.get('step_s'), '.0f')} s")
        console.print(f"step {record['step']}: reward {_fmt(record.get('reward_mean'), '.3f')}, "
                      f"turns {_fmt(record.get('mean_turns'))}, tool calls "
                      f"{_fmt(record.get('tool_calls_per_trajectory'))}, zero-adv groups "
                      f"{_fmt(record.get('batch/zero_advantage_groups'), '.0f')}, loss "
                      f"{_fmt(record.get('train/loss'), '.4f')}, rollout {_fmt(record.get('rollout_s'), '.0f')} s, "
                      f"train {_fmt(record.get('train_s'), '.0f')} s"
                      f"{timeouts(record, record.get('batch/trajectories'))}", highlight=False, soft_wrap=True)
        per_task = task_line(record, "reward_mean", "reward")
        if per_task:
            console.print(f"  per task: {per_task}", highlight=False, soft_wrap=True)

    run = TrainRun(cfg, out, resume=resume, on_step=on_step, on_rollout=on_rollout,
                   accept_data_change=accept_data_change)
    if piped is not None:
        piped.start()
    try:
        with progress:
            if resume:
                progress.update(task, completed=0)
            summary = asyncio.run(run.run())
    finally:
        if piped is not None:
            piped.stop()
    first, last = summary["eval_first"], summary["eval_last"]
    if first and last:
        console.print(f"eval pass@1: {first['pass@1']:.3f} (step {first['step']}) -> {last['pass@1']:.3f} "
                      f"(step {last['step']})", highlight=False, soft_wrap=True)
    plot = out / "training.png"  # the built-in logger ``plot`` (plots.py) drew it when the run closed
    console.print(f"done: {summary['steps']} steps; metrics {out / 'metrics.jsonl'}, "
                  f"plot {plot if plot.is_file() else None}, "
                  f"checkpoint {summary['checkpoint'] or '-'}", highlight=False, soft_wrap=True)
    run_steps, updated = summary.get("steps_run", 0), summary.get("steps_updated", 0)
    if run_steps and updated < run_steps:
        reasons = "; ".join(f"{why} ({n} step{'s' if n > 1 else ''})"
                            for why, n in summary.get("no_update_reasons", {}).items())
        console.print(f"{run_steps - updated} of {run_steps} steps trained nothing: {reasons}", highlight=False,
                      soft_wrap=True)
    if run_steps and not updated:
        console.print("no step of this run updated the policy (the weights are the ones it started from)",
                      highlight=False, soft_wrap=True)
        raise typer.Exit(1)
