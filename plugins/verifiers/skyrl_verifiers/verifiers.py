"""The ``verifiers_rubric`` verifier: the verifiers task's own scoring (``Task.score``: its ``@vf.reward``
functions, weighted, its metrics and judges) on the trace the run stage recorded; the reward is the trace's
``reward`` (the weighted sum verifiers reports)."""

from __future__ import annotations

from typing import Any

from skyrl_core import Instance, VerifierResult

from .environments import take_recorded


async def rubric_score(trajectory: Any, runtime: Any, instance: Instance) -> VerifierResult:
    """Score the recorded verifiers trace with its task's rubric. ``metrics``: each named reward and metric as
    ``vf_<name>``. Unverifiable (masked) when the run stage recorded no trace or scoring raised."""
    recorded = take_recorded(trajectory.id)
    if recorded is None:
        return VerifierResult.unverifiable(f"no verifiers trace was recorded for {trajectory.id}")
    task, trace = recorded
    trace = trace.model_copy(deep=True)
    trace.rewards.clear()
    trace.metrics.clear()
    try:
        await task.score(trace)
    except Exception as exc:
        return VerifierResult.unverifiable(f"verifiers scoring failed: {type(exc).__name__}: {exc}"[:2000])
    metrics = {f"vf_{k}": (r.score if r is not None else None) for k, r in trace.rewards.items()}
    metrics.update({f"vf_{k}": v for k, v in trace.metrics.items()})
    return VerifierResult(reward=float(trace.reward), metrics=metrics)
