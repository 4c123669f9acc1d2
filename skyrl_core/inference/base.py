"""The one async engine interface: ``generate(input_ids, sampling) -> GenerationOutput``."""

from __future__ import annotations

import abc
import asyncio
import contextvars
import time
from typing import Any, Awaitable, Callable

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


@attrs.define
class CallClock:
    """Progress of one engine call, for :func:`bounded_call`. ``queued_at`` when the call reached the engine,
    ``admitted_at`` when the engine took it into a batch (None while it waits for a slot), ``progress_at`` when
    it last made progress (admission, a prefill, a token), ``tokens`` generated so far; all ``time.monotonic()``
    seconds. An engine calls :meth:`admit` and :meth:`tick` from any thread (float stores are atomic)."""

    queued_at: float = attrs.field(factory=time.monotonic)
    admitted_at: float | None = None
    progress_at: float | None = None
    tokens: int = 0

    def admit(self) -> None:
        self.admitted_at = self.progress_at = time.monotonic()

    def tick(self, tokens: int = 1) -> None:
        if self.admitted_at is None:
            self.admitted_at = time.monotonic()
        self.tokens += tokens
        self.progress_at = time.monotonic()

    def queue_s(self, now: float | None = None) -> float:
        """Seconds spent waiting for a slot (so far, while still queued)."""
        end = self.admitted_at if self.admitted_at is not None else (time.monotonic() if now is None else now)
        return end - self.queued_at

    def stalled_s(self, now: float | None = None) -> float:
        """Seconds since the last progress of an admitted call (0 while it is queued)."""
        if self.progress_at is None:
            return 0.0
        return (time.monotonic() if now is None else now) - self.progress_at


async def bounded_call(work: Awaitable[Any], clock: CallClock, stall_s: float | None, total_s: float | None,
                       engine: str, poll_s: float = 1.0) -> Any:
    """Await ``work`` (an engine's generation, reporting to ``clock``) under two bounds: ``stall_s`` seconds
    without progress once admitted (``engine.timeout_s``; the time queued behind other requests is not
    counted, so a busy or loaded machine that is still decoding never trips it) and ``total_s`` seconds for
    the whole call, queueing included (``engine.call_timeout_s``). None disables a bound. On either, ``work`` is
    cancelled and EngineStalled raised, naming the bound, the tokens generated and the seconds queued.
    Checks every ``poll_s`` seconds (less for small bounds). Returns what ``work`` returned."""
    task = asyncio.ensure_future(work)
    bounds = [b for b in (stall_s, total_s) if b is not None]
    poll = min([poll_s] + [max(b / 4, 0.01) for b in bounds])
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=poll if bounds else None)
            if done:
                return task.result()
            now = time.monotonic()
            why = None
            if stall_s is not None and clock.stalled_s(now) > stall_s:
                why = f"produced no token for {stall_s:g} s (engine.timeout_s)"
            elif total_s is not None and now - clock.queued_at > total_s:
                why = f"did not finish the call within {total_s:g} s (engine.call_timeout_s)"
            if why is not None:
                raise EngineStalled(f"engine '{engine}' {why} after {clock.tokens} tokens; the call had waited "
                                    f"{clock.queue_s(now):.0f} s in the engine's queue before it was admitted")
    finally:
        if not task.done():
            task.cancel()


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

    @property
    def spare_capacity(self) -> int:
        return max(self.capacity - self.in_flight - self.queued, 0)

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


async def tracked(stats: "EngineStats", slots: Any, prompt_tokens: int, produce: Callable[[], Awaitable[Any]],
                  count: Callable[[Any], int] = lambda out: len(out.output_ids)) -> Any:
    """Await ``produce()`` in one of the ``slots`` (an ``asyncio.Semaphore``: the engine's concurrency), keeping the
    load figures the dispatchers read: ``stats.queued`` while waiting for a slot (also when cancelled there), then
    in flight with ``prompt_tokens`` (tokens), finished with ``count(result)`` generated tokens; an exception is
    counted in ``stats.errors`` and re-raised. Returns what ``produce`` returned."""
    stats.queued += 1
    waiting = True
    since = time.monotonic()
    try:
        async with slots:
            stats.queued -= 1
            waiting = False
            stats.queue_wait_s += time.monotonic() - since
            stats.started(prompt_tokens)
            out = None
            try:
                out = await produce()
                return out
            except Exception:
                stats.errors += 1
                raise
            finally:
                stats.finished(count(out) if out is not None else 0)
    finally:
        if waiting:
            stats.queued -= 1

