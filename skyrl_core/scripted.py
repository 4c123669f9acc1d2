"""Scripted policies: benchmark fixtures that check a scaffold, never inference engines.

A scripted policy (the memagent plugin's oracle, which looks the gold answer up; the osworld plugin's MiniWoB++
script) answers through the engine interface so that the real rollout session, agent loop, chat template, tools
and verifier run unchanged; but it is not a model. Its pass rate measures the scaffold (chunker, memory, actions,
verifier), not any policy's quality, and it cannot learn: a weight update has nothing to change. So:

- it subclasses :class:`ScriptedPolicy`; the registry refuses it as an inference engine (``skyrl plugins`` never
  lists it, no ``engine.type`` names it), and :func:`refuse_scripted_policy` stops a training run that is handed
  one (``skyrl train`` never is);
- its plugin runs it with a ``scaffold-check`` command (:func:`scaffold_check_command`), whose ``metrics.json``
  carries ``scaffold_check`` naming the policy, and whose figures are reported as scaffold checks, not scores.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, Callable

from .errors import ConfigError, SkyrlError
from .inference.base import Engine

SCAFFOLD_NOTE = ("a scripted policy, not a model: its pass rate checks the scaffold (tools, memory, verifier) and "
                 "is no policy's score")


class ScriptedPolicy(Engine):
    """Base class of scripted policies: ``scripted_policy`` is True, and ``update_weights`` raises (there are
    no weights to change, so a training run against it would train nothing it samples from)."""

    scripted_policy = True

    async def update_weights(self, state_dict: Any) -> None:
        raise SkyrlError(f"'{self.name}' is a scripted policy (a benchmark fixture): it has no weights to update; "
                         f"train with a model engine (hf, vllm, openai)")


def is_scripted_policy(obj: Any) -> bool:
    """Whether ``obj`` (an engine, an engine class or a factory marked ``scripted_policy = True``) is one."""
    return bool(getattr(obj, "scripted_policy", False))


def refuse_scripted_policy(engine: Any, where: str = "skyrl train") -> None:
    """Raise ConfigError when ``engine`` is a scripted policy: ``where`` (a training run) cannot learn from it."""
    if is_scripted_policy(engine):
        raise ConfigError(f"{where}: engine '{getattr(engine, 'name', engine)}' is a scripted policy (a benchmark "
                          f"fixture that ignores weight updates), so nothing it samples could be trained; run it "
                          f"with its plugin's scaffold-check command, and train with a model engine")


async def run_scaffold_check(config: Any, output_dir: str | Path, policy: ScriptedPolicy) -> dict[str, Any]:
    """Roll out the config's eval split with ``policy`` through :func:`skyrl_core.evaluate.run_eval` and return
    its metrics, which (like any eval whose engine is a scripted policy) carry ``scaffold_check: {"policy": name,
    "note": ...}``, in ``metrics.json`` too. Raises ConfigError for an engine that is not a ScriptedPolicy."""
    from .evaluate import run_eval

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
        from .config import load_config

        config = load_config(str(config_path), list(overrides or []))
        metrics = asyncio.run(run_scaffold_check(config, output, factory(config)))
        typer.echo(f"scaffold check with the scripted policy '{policy_name}' ({SCAFFOLD_NOTE}): "
                   f"{metrics.get('pass@1', 0.0):.2f} of {metrics['n_instances']} instances solved; "
                   f"outputs in {output}")

    scaffold_check.__doc__ = (f"Run the scripted policy '{policy_name}' over a config's eval split: a check of the "
                              f"scaffold, not a model's score.")
