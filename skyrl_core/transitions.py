"""Transitions and trajectories: the token-level record of a rollout, and the backend-agnostic training batch.

Every LLM call is recorded as a :class:`Transition` by :func:`record_transition` (SkyRL-Agent, arXiv 2511.16108,
Sec. 3.3 "transition-based recording"): the exact token ids sent and generated and the engine's logprobs. The
agent never builds transitions by hand; training data is derived from them, never from re-tokenised text.
"""

from __future__ import annotations

import contextvars
import functools
import time
from typing import Any, Awaitable, Callable

import attrs


@attrs.define
class Transition:
    """One LLM call.

    ``input_ids`` [prompt_len] and ``output_ids`` [gen_len] are token ids exactly as sent and generated;
    ``output_logprobs`` [gen_len] are the sampler's logprobs of the generated tokens (None when the engine gives
    none); ``finish_reason`` is ``stop`` | ``length`` | ``abort``; ``latency_s`` is seconds spent in the call;
    ``new_context`` is True when the agent reset its context before this call (a new training datum starts);
    ``chat_template_kwargs`` are the template arguments the prompt was rendered with (``agent.chat_template_kwargs``);
    ``policy_version`` is the training loop's policy version (train steps whose weights had reached the engine)
    when the call started, None outside a training run (see :data:`POLICY_VERSION`).
    """

    input_ids: list[int]
    output_ids: list[int]
    output_logprobs: list[float] | None
    finish_reason: str
    latency_s: float = 0.0
    new_context: bool = False
    chat_template_kwargs: dict = attrs.Factory(dict)
    policy_version: int | None = None

    def to_json(self) -> dict:
        return attrs.asdict(self)


#: The policy version a training loop's rollouts generate with: a zero-argument callable returning the number of
#: train steps whose weights have reached the engine, set by the loop for the tasks it starts (a context variable,
#: so two runs in one process do not mix); unset (None) outside training. :func:`record_transition` stamps it on
#: each Transition when the call starts.
POLICY_VERSION: contextvars.ContextVar[Callable[[], int] | None] = contextvars.ContextVar("skyrl_policy_version",
                                                                                          default=None)


# Finish reasons. Terminal conditions a model reached by itself keep the trajectory in the loss; external limits
# and infrastructure errors loss-mask it (it still counts in its group's baseline).
FINISHED = "finished"
NO_TOOL_CALL = "no_tool_call"
MAX_TURNS = "max_turns"
CONTEXT_EXCEEDED = "context_exceeded"
MAX_TOKENS = "max_tokens"
ERROR_INIT = "error_init"
ERROR_RUN = "error_run"
ERROR_EVAL = "error_eval"
ERROR_RUNTIME = "error_runtime"  # the runtime itself was lost (a killed container, a dead Ray actor): errors.RuntimeLost
TIMEOUT = "timeout"
CANCELLED = "cancelled"
MASKED_REASONS = frozenset({MAX_TURNS, CONTEXT_EXCEEDED, MAX_TOKENS, ERROR_INIT, ERROR_RUN, ERROR_EVAL, TIMEOUT,
                            CANCELLED, ERROR_RUNTIME})


@attrs.define
class Trajectory:
    """One rollout of one instance: its transitions, final messages, reward and bookkeeping.

    ``group_id`` ties the ``n_samples`` rollouts of one instance together (advantage baselines are per group).
    ``masked`` is True when the trajectory must not contribute to the loss (external limit or error).
    ``timing`` holds seconds per stage (``init``, ``run``, ``eval``).
    """

    instance_id: str
    sample_index: int
    task: str
    group_id: str
    transitions: list[Transition] = attrs.Factory(list)
    messages: list[dict] = attrs.Factory(list)
    reward: float = 0.0
    finish_reason: str | None = None
    answer: Any = None
    metrics: dict[str, Any] = attrs.Factory(dict)
    masked: bool = False
    error: str | None = None
    turns: int = 0
    tool_calls: dict[str, int] = attrs.Factory(dict)
    timing: dict[str, float] = attrs.Factory(dict)

    @property
    def id(self) -> str:
        return f"{self.task}:{self.instance_id}#{self.sample_index}"

    def fail(self, reason: str, error: str) -> None:
        """Mark this trajectory failed with a named reason; it is loss-masked and keeps reward 0."""
        self.finish_reason = reason
        self.error = error
        self.masked = True

    def to_json(self) -> dict:
        data = attrs.asdict(self, recurse=True)
        data["id"] = self.id
        return data


@attrs.define
class Datum:
    """One training sequence.

    ``prompt_ids`` [prompt_len]; ``response_ids`` [resp_len]; ``response_mask`` [resp_len] is 1 for tokens the
    model generated and 0 for tokens inserted by the environment (observations, hints); ``rollout_logprobs``
    [resp_len] are the sampler's logprobs (0.0 at mask-0 positions), or None; ``reward`` and ``advantage`` are
    the trajectory's (the advantage is broadcast over response tokens); ``loss_mask`` is 0 when the trajectory is
    masked; ``is_last_step`` is True for the final datum of a trajectory (context resets split one trajectory);
    ``policy_version`` is the oldest policy version among its trajectory's calls (None when they carry none).
    """

    prompt_ids: list[int]
    response_ids: list[int]
    response_mask: list[int]
    rollout_logprobs: list[float] | None
    reward: float
    advantage: float
    trajectory_id: str
    group_id: str
    is_last_step: bool
    loss_mask: int = 1
    num_calls: int = 1
    policy_version: int | None = None


@attrs.define
class TrainingBatch:
    """The backend-agnostic training data: a list of :class:`Datum` and batch-level ``metrics``."""

    data: list[Datum] = attrs.Factory(list)
    metrics: dict[str, float] = attrs.Factory(dict)

    def __len__(self) -> int:
        return len(self.data)


def record_transition(fn: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    """Decorate an async ``generate(self, input_ids, sampling, **kw)`` so each call appends a Transition.

    The decorated method's owner must have a ``transitions`` list and may have a ``new_context`` flag (set by
    the agent after a context reset; consumed by the next call) and a ``chat_template_kwargs`` dict. The wrapped call must return an object with
    ``output_ids``, ``output_logprobs`` and ``finish_reason``.
    """

    @functools.wraps(fn)
    async def wrapper(self, input_ids, sampling, *args, **kwargs):
        start = time.perf_counter()
        clock = POLICY_VERSION.get()
        version = None if clock is None else int(clock())
        out = await fn(self, input_ids, sampling, *args, **kwargs)
        new_context = bool(getattr(self, "new_context", False))
        self.transitions.append(Transition(
            input_ids=list(input_ids),
            output_ids=list(out.output_ids),
            output_logprobs=None if out.output_logprobs is None else [float(x) for x in out.output_logprobs],
            finish_reason=out.finish_reason,
            latency_s=time.perf_counter() - start,
            new_context=new_context,
            chat_template_kwargs=dict(getattr(self, "chat_template_kwargs", None) or {}),
            policy_version=version,
        ))
        if new_context:
            self.new_context = False
        return out

    return wrapper
