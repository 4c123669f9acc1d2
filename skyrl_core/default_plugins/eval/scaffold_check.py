"""The ``scaffold-check`` command a plugin with a scripted policy adds (:mod:`.scripted`): the config's
eval split rolled out by the policy through :func:`.run.run_eval`, its pass rate labelled as a scaffold check.
A plugin imports :func:`scaffold_check_command` from here inside its ``register_commands`` hookimpl."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, Callable

from skyrl_core.errors import ConfigError
from .run import run_eval
from skyrl_core.default_plugins.eval.scripted import SCAFFOLD_NOTE, ScriptedPolicy, is_scripted_policy


async def run_scaffold_check(config: Any, output_dir: str | Path, policy: ScriptedPolicy) -> dict[str, Any]:
    """Roll out the config's eval split with ``policy`` through :func:`.run.run_eval` and return
    its metrics, which (like any eval whose engine is a scripted policy) carry ``scaffold_check: {"policy": name,
    "note": ...}``, in ``metrics.json`` too. Raises ConfigError for an engine that is not a ScriptedPolicy."""
    if not is_scripted_policy(policy):
        raise ConfigError(f"run_scaffold_check takes a ScriptedPolicy, got {type(policy).__name__}: a model is "
                          f"evaluated with `skyrl eval`")
    return await run_eval(config, output_dir, engine=policy)


def scaffold_check_command(app: Any, factory: Callable[[Any], ScriptedPolicy], policy_name: str) -> None:
    """Add ``scaffold-check CONFIG [k=v ...] --output DIR`` to a plugin's typer ``app``: the config's eval split
    rolled out by ``factory(config)`` (:func:`run_scaffold_check`), printing pass@1 labelled as a scaffold
    check."""
    import typer

    @app.command("scaffold-check", context_settings={"allow_extra_args": False})
    def scaffold_check(
        config_path: Path = typer.Argument(..., help="A config whose eval split the scripted policy runs."),
        overrides: list[str] = typer.Argument(None, help="key=value overrides, as for `skyrl eval`."),
        output: Path = typer.Option(Path("runs/scaffold-check"), "--output", "-o", help="Output directory."),
    ) -> None:
        from skyrl_core.config import load_config

        config = load_config(str(config_path), list(overrides or []))
        metrics = asyncio.run(run_scaffold_check(config, output, factory(config)))
        typer.echo(f"scaffold check with the scripted policy '{policy_name}' ({SCAFFOLD_NOTE}): "
                   f"{metrics.get('pass@1', 0.0):.2f} of {metrics['n_instances']} instances solved; "
                   f"outputs in {output}")

    scaffold_check.__doc__ = (f"Run the scripted policy '{policy_name}' over a config's eval split: a check of the "
                              f"scaffold, not a model's score.")
