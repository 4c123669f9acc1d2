"""The one async engine interface: ``generate(input_ids, sampling) -> GenerationOutput``."""

from __future__ import annotations

import abc
import contextvars
import time
from typing import Any

import attrs

from ..errors import SkyrlError

# The trajectory a coroutine generates for (its id), set by the rollout's run stage; an engine that spreads
# requests over replicas reads it to keep a trajectory on one (engine.sticky).
routing_key: contextvars.ContextVar[str | None] = contextvars.ContextVar("skyrl_routing_key", default=None)


class EngineError(SkyrlError):
    """An engine call failed: server error or timeout, a crashed worker, a closed engine. The message names the
    engine and the cause; the agent loop turns it into a named finish reason."""


class EngineStalled(EngineError, TimeoutError):
    """An engine call stopped making progress: no new token for ``engine.timeout_s`` seconds while it was being
    decoded, or the whole call (queueing included) ran past ``engine.call_timeout_s``. A TimeoutError, so the
    agent loop ends the trajectory ``timeout``; the message says which bound, after how many tokens, and how
    long the call waited in the engine's queue before it was admitted (that wait is not a stall)."""


@attrs.define(frozen=True)
class SamplingParams:
    """Sampling settings for one call. ``max_tokens`` counts generated tokens; ``temperature`` 0 is greedy;
    ``stop`` strings end generation (the stop text is kept in the output); ``seed`` makes sampling reproducible
    where the engine supports it."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    max_tokens: int = 512
    stop: tuple[str, ...] = ()
    seed: int | None = None
    logprobs: bool = True


@attrs.define
class GenerationOutput:
    """``output_ids`` [gen_len] token ids as generated; ``output_logprobs`` [gen_len] or None;
    ``finish_reason`` ``stop`` (EOS or stop string), ``length`` (max_tokens or context) or ``abort``."""

    output_ids: list[int]
    output_logprobs: list[float] | None
    finish_reason: str
    text: str | None = None


@attrs.define
class EngineStats:
    """Live load figures a dispatcher reads: requests in flight and queued, and the engine's batch capacity.

    ``forward_passes`` counts model forward calls (prefills + decode steps); ``decode_steps`` the batched decode
    steps and ``decode_rows`` the sum of their batch sizes, so ``decode_rows / decode_steps`` is the mean decode
    batch; ``max_batch_seen`` the largest decode batch; ``errors`` failed requests. Engines that cannot see these
    (a remote server) leave them at 0.

    ``busy_s`` accumulates seconds with at least one request in flight; ``occupancy_integral`` accumulates
    (requests in flight / capacity) x seconds, so ``occupancy_integral / wall`` is the mean batch occupancy.
    ``queue_wait_s`` accumulates the seconds requests waited for a slot before they were admitted (the time
    ``engine.timeout_s`` does not count as a stall).
    """

    capacity: int = 1
    in_flight: int = 0
    queued: int = 0
    requests: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    busy_s: float = 0.0
    occupancy_integral: float = 0.0
    forward_passes: int = 0
    decode_steps: int = 0
    decode_rows: int = 0
    max_batch_seen: int = 0
    errors: int = 0
    queue_wait_s: float = 0.0
    _last: float = attrs.field(factory=time.perf_counter, repr=False)

    def _tick(self, now: float | None = None) -> None:
        now = time.perf_counter() if now is None else now
        dt = now - self._last
        if self.in_flight > 0:
            self.busy_s += dt
            self.occupancy_integral += dt * min(self.in_flight, self.capacity) / max(self.capacity, 1)
        self._last = now

    def started(self, n_in: int) -> None:
        self._tick()
        self.in_flight += 1
        self.requests += 1
        self.tokens_in += n_in

    def finished(self, n_out: int) -> None:
        self._tick()
        self.in_flight -= 1
        self.tokens_out += n_out

    def snapshot(self) -> dict[str, float]:
        self._tick()
        return {"capacity": self.capacity, "in_flight": self.in_flight, "queued": self.queued,
                "requests": self.requests, "tokens_in": self.tokens_in, "tokens_out": self.tokens_out,
                "busy_s": self.busy_s, "occupancy_integral": self.occupancy_integral,
                "forward_passes": self.forward_passes, "decode_steps": self.decode_steps,
                "decode_rows": self.decode_rows, "max_batch_seen": self.max_batch_seen, "errors": self.errors,
                "queue_wait_s": self.queue_wait_s}


class Engine(abc.ABC):
    """An inference engine. Subclasses implement ``generate`` and expose a ``tokenizer`` (a transformers
    tokenizer with a chat template) and live ``stats``.

    ``max_context`` is the model's context window in tokens. ``update_weights(state_dict)`` loads new policy
    weights (called by a trainer after each step; in-process engines may share the module instead).
    """

    name: str = "engine"
    tokenizer: Any
    max_context: int = 2048

    def __init__(self) -> None:
        self.stats = EngineStats()

    @abc.abstractmethod
    async def generate(self, input_ids: list[int], sampling: SamplingParams) -> GenerationOutput:
        """Generate a continuation of ``input_ids`` [prompt_len]. Raises on engine failure (the agent loop
        turns that into a named finish reason)."""

    async def update_weights(self, state_dict: dict[str, Any]) -> None:
        """Load new policy weights. Engines that cannot receive weights raise SkyrlError naming themselves."""
        from ..errors import SkyrlError

        raise SkyrlError(f"engine '{self.name}' cannot receive new weights; use an engine with a weight-update "
                         f"path (hf shares the trainer's module, openai/vllm reload from a checkpoint dir)")

    async def close(self) -> None:
        """Release resources (threads, servers, GPU memory). Safe to call twice."""
