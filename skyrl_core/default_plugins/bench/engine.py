"""A stand-in for a continuous-batching GPU inference server, for the dispatch simulation (not a model).

:class:`StandInEngine` serves up to ``capacity`` requests per decode step; one step takes
``base_s + per_seq_s * batch`` seconds and gives every request in the batch one token. Requests beyond capacity
wait in a FIFO queue and join the batch at the next step boundary (continuous batching, as vLLM and SGLang do).
It keeps an :class:`~skyrl_core.inference.base.EngineStats` on the event loop's clock, so the auto pipeline reads
the same load figures it reads from a real engine, and records requests in flight over time for the timeline.
"""

from __future__ import annotations

import asyncio
import collections
import time
from typing import Callable

import attrs

from skyrl_core.inference.base import Engine, EngineStats, GenerationOutput, SamplingParams


@attrs.define
class ClockedEngineStats(EngineStats):
    """EngineStats integrated over an injectable clock (the event loop's ``time``, virtual in the simulation)."""

    clock: Callable[[], float] = attrs.field(default=time.perf_counter, kw_only=True, repr=False)

    def __attrs_post_init__(self) -> None:
        self._last = self.clock()

    def _tick(self, now: float | None = None) -> None:
        super()._tick(self.clock() if now is None else now)


class _Request:
    __slots__ = ("remaining", "n_out", "fut")

    def __init__(self, n_out: int, fut: asyncio.Future) -> None:
        self.remaining = n_out
        self.n_out = n_out
        self.fut = fut


class StandInEngine(Engine):
    """Stand-in for a batched inference server: ``generate`` returns ``sampling.max_tokens`` placeholder
    tokens after as many decode steps. Must be created inside a running event loop.

    ``capacity``: requests decoded together (the engine's max batch); ``base_s``: seconds of one decode step
    at batch 1 (weights streamed once per step); ``per_seq_s``: extra seconds per sequence in the batch.
    ``timeline`` holds ``(t, requests in flight)`` pairs, one per change.
    """

    name = "stand-in"
    tokenizer = None

    def __init__(self, capacity: int = 32, base_s: float = 0.03, per_seq_s: float = 0.0005) -> None:
        if capacity < 1:
            raise ValueError(f"StandInEngine capacity must be at least 1, got {capacity}")
        self.loop = asyncio.get_running_loop()
        self.capacity = capacity
        self.base_s = base_s
        self.per_seq_s = per_seq_s
        self.stats = ClockedEngineStats(capacity=capacity, clock=self.loop.time)
        self.queue: collections.deque[_Request] = collections.deque()
        self.active: list[_Request] = []
        self.steps = 0
        self.timeline: list[tuple[float, int]] = [(self.loop.time(), 0)]
        self._wake = asyncio.Event()
        self._server: asyncio.Task | None = None

    def step_s(self, batch: int) -> float:
        """Seconds of one decode step with ``batch`` sequences."""
        return self.base_s + self.per_seq_s * batch

    async def generate(self, input_ids: list[int], sampling: SamplingParams) -> GenerationOutput:
        n = max(int(sampling.max_tokens), 1)
        req = _Request(n, self.loop.create_future())
        self.queue.append(req)
        self.stats.queued += 1
        self.stats.tokens_in += len(input_ids)
        if self._server is None or self._server.done():
            self._server = asyncio.ensure_future(self._serve())
        self._wake.set()
        await req.fut  # a cancelled caller cancels the future; the server drops the request
        return GenerationOutput(output_ids=[0] * n, output_logprobs=None, finish_reason="length")

    def _mark(self) -> None:
        n = len(self.active)
        if self.timeline[-1][1] != n:
            self.timeline.append((self.loop.time(), n))

    async def _serve(self) -> None:
        stats = self.stats
        while True:
            while self.queue and len(self.active) < self.capacity:
                req = self.queue.popleft()
                stats.queued -= 1
                if req.fut.done():
                    continue
                stats._tick()
                stats.in_flight += 1
                stats.requests += 1
                self.active.append(req)
            self._mark()
            if not self.active:
                self._wake.clear()
                await self._wake.wait()
                continue
            await asyncio.sleep(self.step_s(len(self.active)))
            self.steps += 1
            still = []
            for req in self.active:
                req.remaining -= 1
                if req.fut.done() or req.remaining <= 0:
                    stats.finished(req.n_out - req.remaining)
                    if not req.fut.done():
                        req.fut.set_result(None)
                else:
                    still.append(req)
            self.active = still

    async def close(self) -> None:
        if self._server is not None:
            self._server.cancel()
            await asyncio.gather(self._server, return_exceptions=True)
