"""The dispatch simulation's virtual clock: ``asyncio.sleep`` and timeouts take no wall time.

A ``looptime`` event loop (the maintained package, used here without its pytest plugin through
``looptime.new_event_loop``): when nothing is ready to run, its clock jumps straight to the next scheduled timer
instead of waiting, so a simulated hour of init/run/eval stages runs in the CPU time its bookkeeping costs, and
the same seed gives the same result. While an executor job (``asyncio.to_thread``) is pending, looptime steps its
clock with the real one, so a thread's work is not skipped past.

Three settings differ from looptime's defaults: ``noop_cycles=0`` (looptime otherwise spins 42 idle loop
iterations before each jump, for pytest fixtures that schedule across loop cycles; asyncio selects with a timeout
only when no callback is ready, so the simulation never needs them, and on its timer-dense workload they cost 6-10x
its CPU time); ``resolution=1e-9`` (looptime keeps time as whole ticks, by default microseconds, and a stage's
measured seconds would then be off its drawn duration by up to half a microsecond; nanoseconds keep them within
float precision of it); ``start=0`` (simulated seconds count from the batch's start).

Against the hand-written loop this replaced (a selector whose ``select`` advanced a float clock by its timeout):
the same simulated results (every variant of both profiles, seed 0, to 1e-6 s) for about 30 % more CPU
(``tests/benchmarks/bench_dispatch_overhead.py``, docs/dispatchers.md "Overhead"), spent in looptime's per-cycle
bookkeeping; the bench's figures are simulated seconds, which the CPU does not change.
"""

from __future__ import annotations

import asyncio
from typing import Any, Coroutine, TypeVar

import looptime

T = TypeVar("T")


def new_virtual_loop() -> asyncio.AbstractEventLoop:
    """A fresh event loop whose ``time()`` starts at 0 and advances only by jumping to the next timer."""
    return looptime.new_event_loop(start=0.0, noop_cycles=0, resolution=1e-9)


def run_virtual(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` to completion on a fresh virtual-clock loop (:func:`new_virtual_loop`); leftover tasks are
    cancelled and the loop is closed. Returns what ``coro`` returns; raises what it raises."""
    loop = new_virtual_loop()
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
