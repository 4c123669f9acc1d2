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
    out: Optional[Path] = typer.Option(None, "--out", help="Predictions file to write (default predictions.jsonl; "
                                       "with --oracle, predictions.oracle-best-of-N.jsonl)."),
    model: str = typer.Option("skyrl", "--model", help="model_name_or_path to record."),
    selection: str = typer.Option("vote", "--select", help="How one sample per instance is picked without reading "
                                  "the reward: vote (the most common patch) or first (sample 0)."),
    oracle: bool = typer.Option(False, "--oracle", help="Pick the best-rewarded sample instead (it read the hidden "
                                "tests: an oracle best-of-n upper bound, not a pass@1)."),
) -> None:
    """Write a SWE-bench predictions file (instance_id, model_name_or_path, model_patch) from trajectories,
    with the rule that picked each instance's sample in a .meta.json beside it."""
    from .predictions import oracle_file_name, read_trajectories_jsonl, write_predictions

    if selection not in ("vote", "first"):
        raise typer.BadParameter(f"'{selection}' is not a reward-free selection; valid: vote, first "
                                 f"(the reward-picked file is --oracle)", param_hint="--select")
    rows = read_trajectories_jsonl(trajectories)
    if oracle:
        n = max((t.sample_index for t in rows), default=0) + 1
        path = write_predictions(rows, out or Path(oracle_file_name(n)), model, "oracle")
    else:
        path = write_predictions(rows, out or Path("predictions.jsonl"), model, selection)
    typer.echo(f"wrote {sum(1 for _ in path.open())} prediction(s) to {path} "
               f"({'oracle best-of-n' if oracle else selection})")


@swe_app.command("verify")
def verify_command(
    data: Path = typer.Argument(..., help="Instances (.json/.jsonl/.parquet)."),
    predictions: Optional[Path] = typer.Option(None, "--predictions", help="Predictions .jsonl; default: the gold "
                                               "patches (checks the instances)."),
    runtime: str = typer.Option("swe_sandbox", "--runtime", help="Where the tests run: swe_sandbox or docker "
                                "(the instance's image; see build-images)."),
) -> None:
    """Score patches against instances with the swe_tests verifier: one JSON line per instance (every one, also
    after one fails to verify: its ``outcome`` is then ``error`` with the exception), then a summary table.
    Exits 1 when any instance could not be verified (error, unverifiable or skipped)."""
    from skyrl_core import DataSpec

    from .data import load_instances
    from .verifiers import verify_patch

    skipped: list[dict] = []
    instances = load_instances(DataSpec(path=str(data), options={"runtime": runtime}), skipped=skipped)
    patches = {i.id: i.data.get("patch", "") for i in instances}
    if predictions:
        patches = {}
        for line in predictions.read_text().splitlines():
            if line.strip():
                row = json.loads(line)
                patches[row["instance_id"]] = row.get("model_patch") or ""

    if runtime not in ("swe_sandbox", "docker"):
        from skyrl_core.errors import SkyrlError

        raise SkyrlError(f"--runtime must be swe_sandbox or docker, got '{runtime}'")
    from skyrl_core.runtime import RuntimeSpec

    from .docker_runtime import DockerRuntime
    from .runtime import SweSandbox

    runtime_cls = DockerRuntime if runtime == "docker" else SweSandbox

    rows: list[dict] = [{"instance_id": s["instance_id"], "outcome": "skipped", "reward": None,
                         "error": s["reason"]} for s in skipped]

    async def go():
        for inst in instances:
            if inst.id not in patches:
                continue
            try:
                res = await verify_patch(inst, patches[inst.id], runtime_cls, RuntimeSpec(type=runtime))
            except Exception as exc:  # one broken instance never hides the others' results
                row = {"instance_id": inst.id, "outcome": "error", "reward": None,
                       "error": f"{type(exc).__name__}: {exc}"}
            else:
                row = {"instance_id": inst.id, "outcome": res.outcome, "reward": res.reward,
                       "fail_to_pass": res.metrics.get("fail_to_pass"),
                       "pass_to_pass": res.metrics.get("pass_to_pass"),
                       "error": res.metrics.get("error"), "reason": res.reason}
            rows.append(row)
            typer.echo(json.dumps(row))

    asyncio.run(go())
    typer.echo(verify_summary(rows))
    if any(r["outcome"] not in ("scored", "tampered") for r in rows):
        raise typer.Exit(1)


def verify_summary(rows: list[dict]) -> str:
    """A plain-text table of ``skyrl swe verify`` results (one line per instance, the error cut to 100
    characters) and the counts per outcome and of reward 1."""
    width = max([len("instance")] + [len(r["instance_id"]) for r in rows])
    lines = [f"{'instance':<{width}}  {'outcome':<12}  reward  f2p      p2p      error",]
    for r in rows:
        reward = "-" if r.get("reward") is None else f"{r['reward']:g}"
        error = " ".join(str(r.get("error") or "").split())
        lines.append(f"{r['instance_id']:<{width}}  {r['outcome']:<12}  {reward:<6}  "
                     f"{str(r.get('fail_to_pass') or '-'):<7}  {str(r.get('pass_to_pass') or '-'):<7}  "
                     f"{error[:100] + ('...' if len(error) > 100 else '')}")
    counts = {o: sum(r["outcome"] == o for r in rows) for o in ("scored", "tampered", "unverifiable", "error",
                                                                  "skipped")}
    resolved = sum(r.get("reward") == 1.0 for r in rows)
    lines.append(f"{len(rows)} instance(s): {resolved} reward 1; " + ", ".join(f"{n} {o}" for o, n in counts.items()))
    return "\n".join(lines)


@swe_app.command("localize")
def localize_command(
    instances: Path = typer.Argument(..., help="SWE-bench rows (.json/.jsonl/.parquet) with problem_statement."),
    source: Optional[Path] = typer.Option(None, "--source", help="The repository checkout to search (every row); "
                                          "default: each row's repo_dir."),
    top: int = typer.Option(10, "--top", help="Files and functions to show per instance."),
    out: Optional[Path] = typer.Option(None, "--out", help="Also write one JSON line per instance here."),
) -> None:
    """Rank the files and functions each instance's issue text is about (the `localize` tool, offline)."""
    from .localize import localize_instances

    results = localize_instances(instances, source, top, out, echo=typer.echo)
    done = sum("files" in r for r in results)
    if not done:  # nothing was localised: a script must not read that as success
        typer.echo(f"no instance localised ({len(results)} row(s) in {instances}, {len(results) - done} skipped)",
                   err=True)
        raise typer.Exit(1)


@swe_app.command("build-images")
def build_images_command(
    data: Optional[Path] = typer.Argument(None, help="Instances (.json/.jsonl/.parquet); omit with --base-only."),
    ids: Optional[list[str]] = typer.Option(None, "--id", help="Only these instance ids (repeatable)."),
    network: bool = typer.Option(False, "--network", help="Let a row's install command use the network."),
    rebuild: bool = typer.Option(False, "--rebuild", help="Build again even when the same content was built."),
    base_only: bool = typer.Option(False, "--base-only", help="Only make sure the base image exists."),
) -> None:
    """Build one docker image per instance (cached by content) from a local Debian base image: the row's test
    packages, the repository at its base commit in /testbed (history cut there), its install command. An
    instance whose row image or SWE-bench image exists locally is used as it is."""
    import time

    from rich.console import Console
    from rich.table import Table

    from skyrl_core import DataSpec
    from skyrl_core.errors import SkyrlError

    from .docker_client import docker_client
    from .images import BASE_IMAGE, build_images, ensure_base_image

    console = Console(stderr=True)
    try:
        client = docker_client()
    except RuntimeError as exc:
        raise SkyrlError(str(exc)) from None
    t0 = time.monotonic()
    with console.status(f"making sure {BASE_IMAGE} exists (debootstrap once, about 40 s)"):
        ensure_base_image(client)
    console.print(f"{BASE_IMAGE}: ready ({time.monotonic() - t0:.1f} s)")
    if base_only:
        return
    if data is None:
        raise SkyrlError("give the instances file (or --base-only)")
    from .data import load_instances

    rows = [i.data for i in load_instances(DataSpec(path=str(data), options={"check_repo": False}))
            if not ids or i.id in ids]
    if not rows:
        raise SkyrlError(f"no instances to build in {data}" + (f" with ids {', '.join(ids)}" if ids else ""))
    with console.status(f"building {len(rows)} image(s)") as status:
        done = []

        def progress(entry: dict) -> None:
            done.append(entry)
            status.update(f"built {len(done)}/{len(rows)}: {entry['instance_id']} ({entry['status']})")

        results = build_images(rows, network=network, rebuild=rebuild, progress=progress)
    table = Table("instance", "image", "status", "seconds")
    for r in results:
        table.add_row(r["instance_id"], r["image"] or "-", r["status"] if not r["error"] else r["error"][:200],
                      f"{r['seconds']:.1f}")
    console.print(table)
    for r in results:
        typer.echo(json.dumps(r))
    if any(r["error"] for r in results):
        raise typer.Exit(1)
