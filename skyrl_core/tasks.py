"""Tasks: a dataset loader bound to an instruction builder, tool names, a runtime and a verifier."""

from __future__ import annotations

import inspect
from typing import Any, Awaitable, Callable

import attrs


@attrs.define(frozen=True)
class Instance:
    """One dataset row: a stable ``id`` and the task-specific fields in ``data``."""

    id: str
    data: dict[str, Any]


# The three outcomes every verifier reports (docs/runtimes.md, "Verifier outcomes"):
SCORED = "scored"  # the reward measures the agent's work
TAMPERED = "tampered"  # the agent's own doing broke or forged the check: reward 0, trained on, reason kept
UNVERIFIABLE = "unverifiable"  # the infrastructure failed: the trajectory ends error_eval, loss-masked, counted
OUTCOMES = (SCORED, TAMPERED, UNVERIFIABLE)


class Unverifiable(Exception):
    """Raised by a verifier (or returned as ``VerifierResult.unverifiable``) when the infrastructure, not the agent,
    kept the outcome from being decided: a dead container, an environment that did not build, a host timeout.
    The trajectory ends ``error_eval`` and is loss-masked; never reward 0 trained as a negative example."""


@attrs.define
class VerifierResult:
    """A verifier's verdict: ``reward`` (a float, usually 0 or 1), per-trajectory ``metrics``, and the ``outcome``:
    ``scored`` (default), ``tampered`` (reward 0, ``reason`` says what was found) or ``unverifiable`` (``reason``
    says what failed; the rollout ends the trajectory ``error_eval``, loss-masked). Blame is decided by evidence
    the agent cannot produce (a control run, exit status, a build log), never by default."""

    reward: float
    metrics: dict[str, Any] = attrs.Factory(dict)
    outcome: str = attrs.field(default=SCORED, validator=attrs.validators.in_(OUTCOMES))
    reason: str | None = None

    @classmethod
    def tampered(cls, reason: str, metrics: dict[str, Any] | None = None) -> "VerifierResult":
        """Reward 0 for the agent's own tampering; ``reason`` names the evidence."""
        return cls(reward=0.0, metrics=dict(metrics or {}), outcome=TAMPERED, reason=reason)

    @classmethod
    def unverifiable(cls, reason: str, metrics: dict[str, Any] | None = None) -> "VerifierResult":
        """No verdict: the infrastructure failed (``reason``); the trajectory is masked, never scored 0."""
        return cls(reward=0.0, metrics=dict(metrics or {}), outcome=UNVERIFIABLE, reason=reason)


@attrs.define(frozen=True)
class DataSpec:
    """Which instances to load. ``path`` (file or dir) or ``name`` (a datasets name); ``split``; ``limit``
    and ``offset`` select a slice after optional ``shuffle`` with ``seed``; ``options`` go to the loader."""

    path: str | None = None
    name: str | None = None
    split: str = "test"
    limit: int | None = None
    offset: int = 0
    shuffle: bool = False
    seed: int = 0
    options: dict[str, Any] = attrs.Factory(dict)


Loader = Callable[[DataSpec], list[Instance]]
InstructionBuilder = Callable[[Instance, "Task"], list[dict]]
Verifier = Callable[[Any, Any, Instance], "Awaitable[VerifierResult | float] | VerifierResult | float"]


@attrs.define(frozen=True)
class Task:
    """A task definition, registered through ``register_tasks``.

    ``load(spec) -> list[Instance]`` reads the data; ``instruction_builder``, ``verifier`` and ``runtime`` name
    registered components; ``tools`` names registered tools. A config may override each of these per task.
    ``content_fields`` names the ``Instance.data`` fields that hold what the model is asked, in the order tried
    (e.g. ``("question",)``): the eval/train overlap check compares them (:func:`skyrl_core.rollout.instance_content`);
    empty (the default) compares the whole of ``Instance.data``.

    ``harness`` (optional, default None: skyrl's agent loop) names an external agent for the run stage
    (docs/gateway.md, "External harnesses"): a command (a string for ``sh -c`` or an argv list, run in the task's
    runtime) or a callable ``harness(base_url, trajectory, runtime, instance=, sampling=)`` (sync or async; the
    instance and the trajectory's ``SamplingParams``, which the harness should send with its calls), run
    against a recording-gateway session with ``OPENAI_BASE_URL`` set; ``tools`` may then be empty.
    """

    name: str
    description: str
    load: Loader
    instruction_builder: str
    tools: tuple[str, ...]
    verifier: str
    runtime: str = "sandbox"
    default_data: DataSpec = DataSpec()
    content_fields: tuple[str, ...] = ()
    harness: Any = None

    def select(self, spec: DataSpec) -> list[Instance]:
        """Load and slice the instances as ``spec`` says (shuffle with seed, then offset and limit)."""
        instances = list(self.load(spec))
        if spec.shuffle:
            import random

            random.Random(spec.seed).shuffle(instances)
        end = None if spec.limit is None else spec.offset + spec.limit
        return instances[spec.offset:end]


async def run_verifier(verifier: Verifier, trajectory: Any, runtime: Any, instance: Instance) -> VerifierResult:
    """Call a sync or async verifier and normalise its answer to a VerifierResult."""
    result = verifier(trajectory, runtime, instance)
    if inspect.isawaitable(result):
        result = await result
    if isinstance(result, (int, float)):
        return VerifierResult(reward=float(result))
    if not isinstance(result, VerifierResult):
        raise TypeError(f"verifier returned {type(result).__name__}; expected VerifierResult or a number")
    return result
