"""Built-in difficulty curation: the ``skyrl curate CONFIG`` command (here) over the bucketing and selection of
:mod:`.curate`."""

from __future__ import annotations

from typing import Optional

from skyrl_core.hookspecs import hookimpl


def _table(title: str, counts: dict[str, dict[str, int]]):
    from rich.table import Table

    table = Table(title=title)
    table.add_column("successes")
    table.add_column("questions", justify="right")
    for bucket, n in counts["buckets"].items():
        table.add_row(bucket, str(n))
    table.add_section()
    for band, n in counts["bands"].items():
        table.add_row(band, str(n))
    return table


@hookimpl(trylast=True)
def register_commands(register):
    import typer

    def curate_command(
        config: str = typer.Argument(..., help="YAML config file: its tasks give the questions."),
        overrides: Optional[list[str]] = typer.Argument(None, help="key.sub=value overrides"),
        from_eval: Optional[str] = typer.Option(None, "--from-eval", help="Read an eval's trajectories (its output "
                                                "directory or trajectories.jsonl) instead of rolling out."),
        k: int = typer.Option(4, "--k", help="Rollouts per question (when rolling out)."),
        split: str = typer.Option("train", "--split", help="Which data to curate: train (data) or eval (eval_data)."),
        mix: Optional[str] = typer.Option(None, "--mix", help="Band shares, default "
                                          "impossible=0.25,hard=0.3,medium=0.3,easy=0.15."),
        size: Optional[int] = typer.Option(None, "--size", help="Questions to keep (default: the most the mix allows)."),
        seed: int = typer.Option(0, "--seed", help="Seed of the draw within each band."),
        output: str = typer.Option("curated.jsonl", "--output", "-o", help="Dataset to write (JSONL)."),
    ) -> None:
        """Bucket CONFIG's questions by successes out of k rollouts (0/k ... k/k) and write a dataset with a target
        mix of impossible/hard/medium/easy questions, printing the bucket table before and after."""
        import asyncio

        from rich.console import Console

        from skyrl_core.config import load_config
        from .curate import (bucket_table, parse_mix, read_trajectories, select, successes_from_trajectories,
                             write_dataset)
        from skyrl_core.errors import ConfigError

        console = Console()
        shares = parse_mix(mix)
        if k < 1:
            raise ConfigError(f"--k must be at least 1, got {k}")
        if split not in ("train", "eval"):
            raise ConfigError(f"--split must be train or eval, got {split!r}")
        cfg = load_config(config, list(overrides or []))

        async def roll() -> tuple[dict, list[dict]]:
            from skyrl_core.rollout import RolloutSession

            session = await RolloutSession.create(cfg)
            try:
                items = session.load_instances(split)
                instances = {(tc.name, inst.id): inst for tc, inst in items}
                console.print(f"rolling out {len(items)} question(s) x {k}")
                trajs, _ = await session.rollout(items, k)
                return instances, [{"task": t.task, "instance_id": t.instance_id, "reward": t.reward} for t in trajs]
            finally:
                await session.close()

        if from_eval:  # the instances only: no engine is loaded
            from skyrl_core.plugins import get_registry

            registry = get_registry()
            instances = {}
            for tc in cfg.tasks:
                task = registry.get("tasks", tc.name)
                spec = tc.data if split == "train" or tc.eval_data is None else tc.eval_data
                instances.update({(tc.name, inst.id): inst for inst in task.select(spec)})
            rows = read_trajectories(from_eval)
        else:
            instances, rows = asyncio.run(roll())
        successes = successes_from_trajectories(rows)
        console.print(_table(f"before: {len(successes)} question(s)", bucket_table(successes)))
        chosen, short = select(successes, shares, size=size, seed=seed)
        path = write_dataset(output, chosen, instances, successes)
        console.print(_table(f"after: {len(chosen)} question(s)", bucket_table({key: successes[key] for key in chosen})))
        for band_name, n in short.items():
            console.print(f"[yellow]band {band_name}: {n} question(s) short of its target[/yellow]")
        console.print(f"wrote {len(chosen)} question(s) to {path}")

    app = typer.Typer(rich_markup_mode=None, add_completion=False)
    app.command("curate")(curate_command)
    register(app, name="curate")
