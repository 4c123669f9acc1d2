"""The ``gymenv_reward`` verifier: the reward the trajectory's skyrl-gym environment reported, and its metrics.

The reward is the sum of the rewards ``step`` returned over the trajectory (skyrl-gym's envs give turn-level
rewards — gsm8k multi-turn rewards every turn — or one reward when done — search and text2sql); skyrl trains on
one reward per trajectory, so their return is it. It is read from the ``gymenv`` runtime, which the agent cannot
write: in these in-process text envs the agent's only input is the action text, parsed and scored by the env's own
code (its ``compute_score``). An env that is not done when the trajectory ends (the turn limit) keeps the reward
earned so far.

Metrics: ``env_steps``, ``env_done`` (1/0), ``env_reward_last``, ``env_step_errors``, ``env_refused_actions`` (text2sql SQL refused before the env saw
it) and the env's own
``get_metrics()`` under ``env_<name>`` (e.g. gsm8k multi-turn's ``env_steps``).
"""

from __future__ import annotations

from typing import Any

from skyrl_core import VerifierResult


async def gymenv_reward(trajectory: Any, runtime: Any, instance: Any) -> VerifierResult:
    """Verifier ``gymenv_reward``: reward = the sum of the env's step rewards (a float; 0 with no step)."""
    if getattr(runtime, "name", None) != "gymenv" or getattr(runtime, "env", None) is None:
        return VerifierResult.unverifiable("gymenv_reward needs the trajectory's gymenv runtime with its "
                                           "environment; it had none")
    metrics: dict[str, Any] = {f"env_{k}": v for k, v in runtime.env_metrics().items()}
    metrics.update({"env_steps": len(runtime.rewards), "env_done": int(runtime.done),
                    "env_reward_last": runtime.rewards[-1] if runtime.rewards else 0.0,
                    "env_step_errors": len(runtime.step_errors),
                    "env_refused_actions": runtime.refused, "env_id": runtime.env_id})
    return VerifierResult(reward=float(sum(runtime.rewards)), metrics=metrics)
