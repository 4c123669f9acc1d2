"""Dispatchers ``async_batch`` (every trajectory at once) and ``async_batch_bounded`` (at most
``max_parallel_agents`` in flight, each init -> run -> eval)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from skyrl_core.dispatchers import Stages
from skyrl_core.transitions import Trajectory

from .base import BaseDispatcher, mark_cancelled

log = logging.getLogger(__name__)


class AsyncBatchDispatcher(BaseDispatcher):
    """Every trajectory at once, each running init -> run -> eval; ``max_runtimes`` caps those in flight
    when set. Fast, but holds a runtime for every trajectory of the batch at its peak."""

    name = "async_batch"

    def limit(self) -> int | None:
        return self.config.max_runtimes

    async def dispatch(self, trajectories: list[Trajectory], stages: Stages) -> dict[str, Any]:
        self._start(trajectories)
        mon = self.monitor
        assert mon is not None
        limit = self.limit()
        sem = asyncio.Semaphore(limit) if limit else None
        mon.waiting["init"] = len(trajectories)
        mon.record()

        async def one(traj: Trajectory) -> None:
            if sem is None:
                mon.waiting["init"] -= 1
                await self._sequential(traj, stages)
                return
            try:
                await sem.acquire()
            except asyncio.CancelledError:
                mark_cancelled(traj)
                raise
            finally:
                mon.waiting["init"] -= 1
            try:
                await self._sequential(traj, stages)
            finally:
                sem.release()

        tasks = [asyncio.ensure_future(one(t)) for t in trajectories]
        await self._run_tasks(tasks)
        return mon.finish(trajectories, {"dispatcher": self.name, "max_in_flight": limit or len(trajectories)})

    async def _sequential(self, traj: Trajectory, stages: Stages) -> None:
        mon = self.monitor
        assert mon is not None
        if self.deadline_passed():
            self._fail_deadline(traj, "before the trajectory started")
            return
        mon.runtime_started()
        try:
            if await self._stage(traj, "init", stages.init) and await self._stage(traj, "run", stages.run):
                await self._stage(traj, "eval", stages.eval)
        except asyncio.CancelledError:
            mark_cancelled(traj)
            raise
        finally:
            await self._release(traj, stages)


class BoundedBatchDispatcher(AsyncBatchDispatcher):
    """At most ``max_parallel_agents`` trajectories in flight (and at most ``max_runtimes``), each running
    init -> run -> eval. The engine idles while a slot's trajectory is in init or eval."""

    name = "async_batch_bounded"

    def limit(self) -> int | None:
        caps = [c for c in (self.config.max_parallel_agents, self.config.max_runtimes) if c]
        return min(caps) if caps else None
