"""A virtual-clock asyncio event loop: ``asyncio.sleep`` and timeouts take no wall time.

When nothing is ready to run, the loop jumps its clock straight to the next scheduled timer instead of
waiting, so a simulated hour of init/run/eval stages runs in the CPU time its bookkeeping costs, and the same
seed gives the same result. (The same idea as the ``looptime`` package; a few lines here keep the bench free
of a test-only dependency.) Threads still work: I/O readiness is polled before the clock jumps.
"""

from __future__ import annotations

import asyncio
from typing import Any, Coroutine, TypeVar

T = TypeVar("T")


class VirtualClockLoop(asyncio.SelectorEventLoop):
    """A selector event loop whose ``time()`` starts at 0 and advances only by jumping to the next timer."""

    def __init__(self) -> None:
        super().__init__()
        self._virtual_now = 0.0
        real_select = self._selector.select  # type: ignore[attr-defined]

        def select(timeout: float | None = None) -> list:
            ready = real_select(0)
            if ready or timeout is None:
                # Nothing scheduled at all: only another thread can wake us, so wait for it for real.
                return ready or real_select(timeout)
            self._virtual_now += max(timeout, 0.0)
            return []

        self._selector.select = select  # type: ignore[attr-defined]

    def time(self) -> float:
        return self._virtual_now


def run_virtual(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` to completion on a fresh :class:`VirtualClockLoop`; leftover tasks are cancelled."""
    loop = VirtualClockLoop()
    try:
        asyncio.set_event_loop(loop)
        return loop.run_until_complete(coro)
    finally:
        pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
        for t in pending:
            t.cancel()
        if pending:
            loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        loop.run_until_complete(loop.shutdown_asyncgens())
        asyncio.set_event_loop(None)
        loop.close()
