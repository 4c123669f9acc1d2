"""How the built-in engines bound and count a call: :class:`CallClock` (a call's progress), :func:`bounded_call`
(``engine.timeout_s`` / ``engine.call_timeout_s``: EngineStalled when a call stops making progress or runs too
long) and :func:`tracked` (the EngineStats load figures the dispatchers read). An engine of a plugin may use them
too; the core's interface is :class:`skyrl_core.inference.base.Engine`."""

from __future__ import annotations

import asyncio
import time
from typing import Any, Awaitable, Callable

import attrs

from skyrl_core.inference.base import EngineStalled, EngineStats


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



async def tracked(stats: EngineStats, slots: Any, prompt_tokens: int, produce: Callable[[], Awaitable[Any]],
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

