"""Scripted policies (the built-in eval's): benchmark fixtures that check a scaffold, never inference engines.

A scripted policy (the memagent plugin's oracle, which looks the gold answer up; the osworld plugin's MiniWoB++
script) answers through the engine interface so that the real rollout session, agent loop, chat template, tools
and verifier run unchanged; but it is not a model. Its pass rate measures the scaffold (chunker, memory, actions,
verifier), not any policy's quality, and it cannot learn: a weight update has nothing to change. So:

- it subclasses :class:`ScriptedPolicy` (the engine contract's optional member ``scripted_policy`` is True); the
  core's registry refuses it as an inference engine (``skyrl plugins`` never lists it, no ``engine.type`` names
  it), and :func:`skyrl_core.backends.refuse_scripted_policy` stops a training run that is handed one (``skyrl
  train`` never is);
- its plugin runs it with a ``scaffold-check`` command (``scaffold_check_command`` of this built-in,
  ``skyrl_core/default_plugins/eval/scaffold_check.py``), whose ``metrics.json`` carries ``scaffold_check`` naming
  the policy, and whose figures are reported as scaffold checks, not scores.
"""

from __future__ import annotations

from typing import Any

from skyrl_core.contracts import member
from skyrl_core.errors import SkyrlError
from skyrl_core.inference.base import Engine

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
    return bool(member(obj, "inference_engines", "scripted_policy"))
