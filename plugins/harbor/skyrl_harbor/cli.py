"""``skyrl harbor verify DIR``: check Harbor tasks here — does each parse, does its environment run in the
sandbox, does its reference ``solution/solve.sh`` score 1 and doing nothing score 0."""

from __future__ import annotations

import asyncio
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

import attrs
import typer

from skyrl_core import Instance
from skyrl_core.runtime import RuntimeSpec

SOLUTION_TIMEOUT_S = 600.0  # for solve.sh when the task sets no [agent] timeout_sec
harbor_app = typer.Typer(help="Harbor / Terminal-Bench task directories.", no_args_is_help=True,
                         rich_markup_mode=None)


@harbor_app.callback()
def harbor_group() -> None:
    """Harbor / Terminal-Bench task directories: ``verify`` checks them here."""


async def run_solution(instance: Instance, spec: RuntimeSpec) -> tuple[float | None, str]:
    """(reward, note) of the task's ``solution/solve.sh`` run as the agent would (in its sandbox, solution/
    read-only at /solution, under the agent timeout), then scored by :func:`~skyrl_harbor.verifiers.run_tests`.
    None when the task ships no solution."""
    from .runtime import HarborSandbox
    from .taskdir import load_task
    from .verifiers import run_tests

    task = load_task(instance.data["path"])
    if task.solution is None:
        return None, "no solution/solve.sh"
    private = Path(tempfile.mkdtemp(prefix="skyrl-harbor-solution-"))
    seconds = task.agent_timeout_s or SOLUTION_TIMEOUT_S
    docker = spec.type == "harbor_docker"
    if docker:
        from .runtime_docker import docker_runtime_class
    cls = docker_runtime_class() if docker else HarborSandbox
    runtime = cls(attrs.evolve(spec, cpu_time_s=max(int(spec.cpu_time_s), int(seconds))))
    try:
        shutil.copytree(task.solution.parent, private / "solution")
        for path in [private / "solution", *(private / "solution").rglob("*")]:
            path.chmod(0o755)
        mounts = [(str(private / "solution"), "/solution", False)]
        if docker:  # a container's mounts are fixed when it starts; the sandbox binds them per command
            runtime.mounts = mounts
        await runtime.start()
        await runtime.prepare(instance)
        runtime.mounts = mounts
        result = await runtime.exec(["bash", "/solution/solve.sh"], timeout_s=seconds)
        if docker:
            from .verifiers import run_tests_docker

            carried = await asyncio.to_thread(runtime.carry_out)
            verdict = await run_tests_docker(instance, runtime.workspace, spec, carried)
        else:
            verdict = await run_tests(instance, runtime.workspace, spec)
        if result.exit_code != 0:
            return verdict.reward, f"solve.sh exit {result.exit_code}: {result.output.strip()[-200:]!r}"
        if verdict.reward != 1:
            tail = verdict.metrics.get("test_output_tail", "").strip().splitlines()[-1:] or [""]
            return verdict.reward, (verdict.reason or verdict.metrics.get("reward_problem") or
                                    f"test.sh said: {tail[0][:200]!r}")
        return verdict.reward, ""
    finally:
        await runtime.close()
        shutil.rmtree(private, ignore_errors=True)


async def verify_tasks(root: Path, spec: RuntimeSpec) -> list[dict]:
    """One row per task directory under ``root``: ``task``, ``parses`` (bool), ``runs_here`` (bool),
    ``solution`` and ``nothing`` (rewards, None where not run), ``note`` (the first problem met) and
    ``nothing_note`` (how the tests ended on the untouched environment: their last line of output)."""
    from .environment import sandbox_plan
    from .taskdir import HarborTaskError, find_task_dirs, load_task
    from .verifiers import run_tests

    docker = spec.type == "harbor_docker"
    rows = []
    for directory in find_task_dirs(root):
        row = {"task": directory.name, "parses": False, "runs_here": False, "solution": None, "nothing": None,
               "note": ""}
        if docker:
            row.update(build=None, build_reason="", substitution="", build_seconds=None)
        rows.append(row)
        try:
            task = load_task(directory)
            row["task"], row["parses"] = task.name, True
            if docker:
                await build_row(task, row)
            else:
                sandbox_plan(task)
        except HarborTaskError as exc:
            row["note"] = str(exc)
            continue
        row["runs_here"] = True
        instance = Instance(id=task.name, data={"path": str(task.path)})
        control = await run_tests(instance, None, spec)
        row["nothing"] = None if control.outcome == "unverifiable" else control.reward
        tail = [x for x in str(control.metrics.get("test_output_tail", "")).splitlines() if x.strip()][-1:]
        row["nothing_note"] = control.reason or control.metrics.get("reward_problem") or \
            (f"test.sh said: {tail[0].strip()[:200]!r}" if tail else "")
        row["solution"], row["note"] = await run_solution(instance, spec)
    return rows


async def build_row(task: Any, row: dict) -> None:
    """Build the task's image for a ``verify --docker`` row: ``build`` (bool), ``build_reason`` (the
    ImageBuildError's class, see :data:`skyrl_harbor.images.REASONS`), ``substitution``, ``build_seconds``.
    Re-raises the ImageBuildError (a HarborTaskError) after filling the row."""
    from .images import ImageBuildError, swe_images
    from .runtime_docker import task_image

    client = await asyncio.to_thread(swe_images().docker_client)
    try:
        built = await asyncio.to_thread(task_image, client, task)
    except ImageBuildError as exc:
        row.update(build=False, build_reason=exc.reason)
        raise
    row.update(build=True, substitution=built.substitution, build_seconds=built.seconds)


@harbor_app.command("verify")
def verify_command(
    path: Path = typer.Argument(..., help="A Harbor task directory or a folder of them."),
    as_json: bool = typer.Option(False, "--json", help="Print the rows as JSON."),
    network: bool = typer.Option(False, "--network", help="Allow network access in the sandboxes."),
    docker: bool = typer.Option(False, "--docker", help="Build each task's image (FROM mapped to a local Debian "
                                "base) and run it in containers instead of the bubblewrap sandbox."),
) -> None:
    """Parse every task, and for each whose environment runs here (the sandbox; with --docker, its image builds)
    score its reference solution (expected 1) and doing nothing (expected 0). Exit status 1 when a runnable task
    does not score so."""
    kind = "harbor_docker" if docker else "harbor_sandbox"
    if docker:  # no skyrl-swe or no engine: one line saying which, not a traceback per task
        from .images import swe_images

        try:
            swe_images().docker_client()
        except RuntimeError as exc:
            typer.echo(f"skyrl harbor verify --docker: {exc}", err=True)
            raise typer.Exit(2) from None
    rows = asyncio.run(verify_tasks(path, RuntimeSpec(type=kind, network=network)))
    if as_json:
        typer.echo(json.dumps(rows, indent=1))
    else:
        fmt = lambda v: "-" if v is None else f"{v:g}"  # noqa: E731
        typer.echo(f"{'task':40} {'parses':6} {'runs':5} {'solution':8} {'nothing':7}  note")
        for r in rows:
            typer.echo(f"{r['task'][:40]:40} {'yes' if r['parses'] else 'NO':6} {'yes' if r['runs_here'] else 'no':5}"
                       f" {fmt(r['solution']):8} {fmt(r['nothing']):7}  {r['note'][:160]}")
        for r in rows:
            if r.get("substitution"):
                typer.echo(f"{r['task'][:40]:40} image base: {r['substitution']}")
        ran = [r for r in rows if r["runs_here"]]
        typer.echo(f"{len(rows)} tasks: {sum(r['parses'] for r in rows)} parse, {len(ran)} run here, "
                   f"{sum(r['solution'] == 1 for r in ran)} solution=1, {sum(r['nothing'] == 0 for r in ran)} "
                   f"nothing=0")
    bad = [r for r in rows if r["runs_here"] and (r["solution"] not in (1, None) or r["nothing"] != 0)]
    raise typer.Exit(1 if bad else 0)
