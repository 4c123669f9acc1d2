"""``skyrl swe ...``: generate instances from a project on the package index, write predictions files."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Optional

import typer

swe_app = typer.Typer(help="Software-engineering tasks: generate instances, write SWE-bench predictions.",
                      no_args_is_help=True, rich_markup_mode=None)


@swe_app.command("generate")
def generate_command(
    project: str = typer.Argument(..., help="NAME==VERSION on the package index (its sdist), or a project directory."),
    out: Path = typer.Option(Path("swe-generated"), "--out", help="Output directory (instances.jsonl + repos/)."),
    n: int = typer.Option(3, "--n", help="Instances to keep."),
    seed: int = typer.Option(0, "--seed", help="Random seed for choosing mutations."),
    max_tries: int = typer.Option(40, "--max-tries", help="Mutations to try (each runs the test suite)."),
    kind: Optional[list[str]] = typer.Option(None, "--kind", help="Mutation kinds (flip_comparison, drop_branch, "
                                             "off_by_one, swap_arguments); default all."),
    requirement: Optional[list[str]] = typer.Option(None, "--requirement", help="Extra packages the tests need."),
    install: Optional[str] = typer.Option(None, "--install", help="The rows' install step, run in a sandbox "
                                          "(default: 'python -m pip install -e .' when the project has setup.py or "
                                          "pyproject.toml; 'none' for no install step)."),
    pytest_autoload: bool = typer.Option(False, "--pytest-autoload", help="Let pytest autoload the "
                                         "environment's plugins (for a pytest plugin's own tests)."),
    to: Optional[str] = typer.Option(None, "--to", help="A later release: write one instance from the project's "
                                     "real history instead (the change from NAME==VERSION to this release)."),
) -> None:
    """Mutate a project's source until its own tests fail, and write SWE-bench-style instances; with --to, one
    instance from two releases (the later release's source change is the gold patch, its test change the test
    patch)."""
    from .generator import KINDS, generate, generate_from_releases

    step = "" if install == "none" else install
    if to:
        if "==" not in project:
            from skyrl_core.errors import SkyrlError

            raise SkyrlError(f"--to needs the project as NAME==VERSION (got '{project}')")
        name, old = project.split("==", 1)
        row = asyncio.run(generate_from_releases(name, old, to, out, requirements=list(requirement or []),
                                                 install=step, pytest_autoload=pytest_autoload))
        typer.echo(f"{row['instance_id']}: {len(row['FAIL_TO_PASS'])} FAIL_TO_PASS, {len(row['PASS_TO_PASS'])} "
                   f"PASS_TO_PASS; wrote {out / 'instances.jsonl'}")
        return

    kinds = tuple(kind) if kind else KINDS
    bad = [k for k in kinds if k not in KINDS]
    if bad:
        from skyrl_core.errors import SkyrlError

        raise SkyrlError(f"unknown --kind {', '.join(bad)}; valid: {', '.join(KINDS)}")
    logging.getLogger("skyrl_swe").setLevel(logging.INFO)
    rows = asyncio.run(generate(project, out, n=n, seed=seed, max_tries=max_tries, kinds=kinds,
                                requirements=list(requirement or []), install=step,
                                pytest_autoload=pytest_autoload))
    for row in rows:
        typer.echo(f"{row['instance_id']}: {row['mutation']['description']} "
                   f"({len(row['FAIL_TO_PASS'])} FAIL_TO_PASS, {len(row['PASS_TO_PASS'])} PASS_TO_PASS)")
    typer.echo(f"wrote {len(rows)} instance(s) to {out / 'instances.jsonl'}")


@swe_app.command("predictions")
def predictions_command(
    trajectories: Path = typer.Argument(..., help="A trajectories .jsonl written by `skyrl eval`."),
    out: Path = typer.Option(Path("predictions.jsonl"), "--out", help="Predictions file to write."),
    model: str = typer.Option("skyrl", "--model", help="model_name_or_path to record."),
) -> None:
    """Write a SWE-bench predictions file (instance_id, model_name_or_path, model_patch) from trajectories."""
    from .predictions import read_trajectories_jsonl, write_predictions

    path = write_predictions(read_trajectories_jsonl(trajectories), out, model)
    typer.echo(f"wrote {sum(1 for _ in path.open())} prediction(s) to {path}")


@swe_app.command("verify")
def verify_command(
    data: Path = typer.Argument(..., help="Instances (.json/.jsonl/.parquet)."),
    predictions: Optional[Path] = typer.Option(None, "--predictions", help="Predictions .jsonl; default: the gold "
                                               "patches (checks the instances)."),
) -> None:
    """Score patches against instances with the swe_tests verifier; prints one JSON line per instance."""
    from skyrl_core import DataSpec

    from .data import load_instances
    from .verifier import verify_patch

    instances = load_instances(DataSpec(path=str(data)))
    patches = {i.id: i.data.get("patch", "") for i in instances}
    if predictions:
        patches = {}
        for line in predictions.read_text().splitlines():
            if line.strip():
                row = json.loads(line)
                patches[row["instance_id"]] = row.get("model_patch") or ""

    async def go():
        for inst in instances:
            if inst.id not in patches:
                continue
            res = await verify_patch(inst, patches[inst.id])
            typer.echo(json.dumps({"instance_id": inst.id, "reward": res.reward,
                                   "fail_to_pass": res.metrics.get("fail_to_pass"),
                                   "pass_to_pass": res.metrics.get("pass_to_pass"),
                                   "error": res.metrics.get("error")}))

    asyncio.run(go())
