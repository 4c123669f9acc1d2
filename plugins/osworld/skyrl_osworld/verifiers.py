"""Verifiers that read the environment's own verdict, never the agent's claim.

``miniwob_reward``: the MiniWoB++ page's ``WOB_RAW_REWARD_GLOBAL`` (1 = solved); reward 1.0 when it is positive,
else 0.0. A page the agent navigated away from scores 0. ``osworld_evaluate``: DesktopEnv's ``evaluate()``
(the task config's evaluator), through the ``osworld`` runtime. Both answer *unverifiable* for a trajectory
whose runtime died (loss-masked, counted; docs/runtimes.md, "Verifier outcomes"): a killed browser says nothing
about the policy.
"""

from __future__ import annotations

from typing import Any

from skyrl_core.tasks import Instance, VerifierResult

ERROR_RUNTIME = "error_runtime"


def _runtime_died(trajectory: Any, runtime: Any) -> VerifierResult | None:
    dead = getattr(runtime, "dead", None)
    if not dead:
        return None
    trajectory.finish_reason = ERROR_RUNTIME
    trajectory.masked = True
    trajectory.error = f"{ERROR_RUNTIME}: {dead}"
    return VerifierResult.unverifiable(f"the runtime died: {dead}", {"success": 0.0, "runtime_died": dead})


async def miniwob_reward(trajectory: Any, runtime: Any, instance: Instance) -> VerifierResult:
    """Reward 1.0 when the page's raw reward is positive. Metrics: ``success``, ``miniwob_task``,
    ``miniwob_raw_reward``, ``miniwob_done``, ``miniwob_reason``, ``agent_said`` (DONE/FAIL/None)."""
    from .miniwob import episode_result

    died = _runtime_died(trajectory, runtime)
    if died is not None:
        died.metrics["miniwob_task"] = instance.data.get("task")
        return died
    metrics: dict[str, Any] = {"miniwob_task": instance.data.get("task"), "agent_said": getattr(runtime, "status", None)}
    url = getattr(getattr(runtime, "page", None), "url", None)
    if url != instance.data.get("url"):
        metrics.update(success=0.0, miniwob_reason=f"the page left the task (now at {str(url)[:100]})")
        return VerifierResult(reward=0.0, metrics=metrics)
    from .browser import RuntimeDied

    try:
        result = await episode_result(runtime)
    except RuntimeDied:  # the browser went away after the agent's last action
        died = _runtime_died(trajectory, runtime)
        died.metrics["miniwob_task"] = instance.data.get("task")
        return died
    success = 1.0 if result["done"] and result["raw_reward"] > 0 else 0.0
    metrics.update(success=success, miniwob_raw_reward=result["raw_reward"], miniwob_done=result["done"],
                   miniwob_reason=result["reason"])
    return VerifierResult(reward=success, metrics=metrics)


async def osworld_evaluate(trajectory: Any, runtime: Any, instance: Instance) -> VerifierResult:
    """Reward from DesktopEnv's ``evaluate()`` (a float in [0, 1]); metrics ``success`` (reward >= 1) and
    ``osworld_task`` (the task config id)."""
    died = _runtime_died(trajectory, runtime)
    if died is not None:
        return died
    reward = float(await runtime.evaluate_task())
    return VerifierResult(reward=reward, metrics={"success": float(reward >= 1.0),
                                                  "osworld_task": instance.data.get("id")})
