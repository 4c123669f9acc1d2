"""What the built-in dispatchers share: the stage machinery (:class:`BaseDispatcher`: stage timeouts, the batch
deadline, failure marking, exactly-once release) and the bookkeeping of one dispatch (:class:`DispatchMonitor`:
clock, counters, timeline, metrics). The interface they implement (:class:`~skyrl_core.dispatchers.Dispatcher`,
:class:`~skyrl_core.dispatchers.Stages`) is the core's; a plugin's dispatcher may subclass :class:`BaseDispatcher`
too, to get the same fault handling."""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from typing import Any

from skyrl_core.dispatchers import Dispatcher, StageFn, Stages
from skyrl_core.errors import RuntimeLost
from skyrl_core.transitions import CANCELLED, ERROR_EVAL, ERROR_INIT, ERROR_RUN, ERROR_RUNTIME, TIMEOUT, Trajectory

log = logging.getLogger(__name__)

STAGES = ("init", "run", "eval")
STAGE_ERRORS = {"init": ERROR_INIT, "run": ERROR_RUN, "eval": ERROR_EVAL}
# A trajectory that ended with one of these skips its remaining stages.
_STOP_REASONS = frozenset({ERROR_INIT, ERROR_RUN, TIMEOUT, CANCELLED, ERROR_RUNTIME})


# -- bookkeeping -------------------------------------------------------------------------------------------
class DispatchMonitor:
    """Clock, counters and timeline of one ``dispatch`` call; turns them into the metrics dict.

    Times are seconds of the running event loop's clock (``loop.time()``), so they are virtual seconds under a
    virtual-clock loop (the bench) and wall seconds otherwise. ``waiting`` counts trajectories queued before a
    stage; ``active`` those inside it; ``runtimes`` those between the start of ``init`` and the end of
    ``release``.
    """

    def __init__(self, n: int, engine_stats: Any = None) -> None:
        self.loop = asyncio.get_running_loop()
        self.t0 = self.loop.time()
        self.n = n
        self.engine_stats = engine_stats
        self.engine_start = engine_stats.snapshot() if engine_stats is not None else None
        self.waiting = {s: 0 for s in STAGES}
        self.active = {s: 0 for s in STAGES}
        self.runtimes = 0
        self.peak_runtimes = 0
        self.runtime_starts = 0
        self.runtime_releases = 0
        self.release_errors = 0
        self.runtime_seconds = 0.0
        self.stage_s: dict[str, list[float]] = {s: [] for s in STAGES}
        self._last_t = 0.0
        self.timeline: dict[str, list[float]] = {
            "t": [], "runtimes": [], **{f"waiting_{s}": [] for s in STAGES}, **{f"active_{s}": [] for s in STAGES},
        }
        self.record()

    def now(self) -> float:
        """Seconds since the dispatch started."""
        return self.loop.time() - self.t0

    def record(self) -> None:
        """Integrate runtimes alive up to now and append a timeline point (one point per instant)."""
        t = self.now()
        self.runtime_seconds += self.runtimes * max(t - self._last_t, 0.0)
        self._last_t = t
        tl = self.timeline
        if tl["t"] and tl["t"][-1] == t:
            for values in tl.values():
                values.pop()
        tl["t"].append(t)
        tl["runtimes"].append(self.runtimes)
        for s in STAGES:
            tl[f"waiting_{s}"].append(self.waiting[s])
            tl[f"active_{s}"].append(self.active[s])

    def runtime_started(self) -> None:
        self.runtimes += 1
        self.runtime_starts += 1
        self.peak_runtimes = max(self.peak_runtimes, self.runtimes)
        self.record()

    def runtime_released(self, ok: bool) -> None:
        self.runtimes -= 1
        self.runtime_releases += 1
        self.release_errors += 0 if ok else 1
        self.record()

    def finish(self, trajectories: list[Trajectory], extra: dict[str, Any] | None = None) -> dict[str, Any]:
        """The metrics dict: scalars plus ``failures`` (reason -> count) and ``timeline`` (lists over time)."""
        self.record()
        wall = self.now()
        failures = Counter(t.finish_reason for t in trajectories if t.error is not None)
        ok = sum(1 for t in trajectories if t.error is None)
        metrics: dict[str, Any] = {
            "n_trajectories": self.n,
            "n_ok": ok,
            "n_failed": self.n - ok,
            "failures": dict(failures),
            "wall_s": wall,
            "trajectories_per_min": 60.0 * self.n / wall if wall > 0 else 0.0,
            "ok_trajectories_per_min": 60.0 * ok / wall if wall > 0 else 0.0,
            "peak_runtimes": self.peak_runtimes,
            "runtime_starts": self.runtime_starts,
            "runtime_releases": self.runtime_releases,
            "release_errors": self.release_errors,
            "runtime_s_per_traj": self.runtime_seconds / self.n if self.n else 0.0,
            "mean_runtimes": self.runtime_seconds / wall if wall > 0 else 0.0,
        }
        for s in STAGES:
            xs = self.stage_s[s]
            metrics[f"{s}_s_mean"] = sum(xs) / len(xs) if xs else 0.0
            metrics[f"{s}_s_max"] = max(xs) if xs else 0.0
            metrics[f"{s}_s_total"] = sum(xs)
            metrics[f"max_waiting_{s}"] = max(self.timeline[f"waiting_{s}"])
        if self.engine_stats is not None and self.engine_start is not None and wall > 0:
            end = self.engine_stats.snapshot()
            metrics["engine_busy"] = min((end["busy_s"] - self.engine_start["busy_s"]) / wall, 1.0)
            metrics["mean_occupancy"] = min(
                (end["occupancy_integral"] - self.engine_start["occupancy_integral"]) / wall, 1.0)
            metrics["engine_requests"] = end["requests"] - self.engine_start["requests"]
            # seconds engine calls waited for a batch slot: load, reported apart from stalls (docs/engines.md)
            metrics["engine_queue_wait_s"] = end.get("queue_wait_s", 0.0) - self.engine_start.get("queue_wait_s", 0.0)
        if extra:
            metrics.update(extra)
        metrics["timeline"] = self.timeline
        return metrics


def mark_cancelled(traj: Trajectory) -> None:
    if traj.error is None:  # keep an earlier, more specific failure reason
        traj.fail(CANCELLED, "dispatch cancelled (Ctrl-C or caller) before the trajectory finished")


# -- the shared stage machinery ------------------------------------------------------------------------------
class BaseDispatcher(Dispatcher):
    """Stage execution with timeouts, the batch deadline, failure marking and exactly-once release."""

    def __init__(self, config: Any, engine_stats: Any = None) -> None:
        super().__init__(config, engine_stats)
        self.monitor: DispatchMonitor | None = None
        self._deadline: float | None = None

    # timeouts ---------------------------------------------------------------------------------------------
    def _stage_timeout(self, stage: str) -> float | None:
        return getattr(self.config, f"{stage}_timeout_s", None)

    def _deadline_left(self) -> float | None:
        if self._deadline is None:
            return None
        return self._deadline - asyncio.get_running_loop().time()

    def deadline_passed(self) -> bool:
        left = self._deadline_left()
        return left is not None and left <= 0

    def _fail_deadline(self, traj: Trajectory, where: str) -> None:
        traj.fail(TIMEOUT, f"batch deadline of {self.config.deadline_s:g} s (dispatcher.deadline_s) reached "
                           f"{where}")

    async def _stage(self, traj: Trajectory, stage: str, fn: StageFn) -> bool:
        """Run one stage; on exception or timeout mark the trajectory failed. True when the trajectory goes on."""
        mon = self.monitor
        assert mon is not None
        limit = self._stage_timeout(stage)
        left = self._deadline_left()
        by_deadline = left is not None and (limit is None or left < limit)
        timeout = max(left, 0.0) if by_deadline else limit
        start = mon.now()
        mon.active[stage] += 1
        mon.record()
        try:
            await asyncio.wait_for(fn(traj), timeout)
        except asyncio.CancelledError:
            raise
        except (asyncio.TimeoutError, TimeoutError) as exc:
            elapsed = mon.now() - start
            if timeout is not None and elapsed >= timeout - 1e-9:
                if by_deadline:
                    self._fail_deadline(traj, f"during {stage}")
                else:
                    traj.fail(STAGE_ERRORS[stage], f"{stage} timed out after {timeout:g} s "
                                                   f"(dispatcher.{stage}_timeout_s)")
            else:
                traj.fail(STAGE_ERRORS[stage], f"{stage} raised {type(exc).__name__}: {exc}")
            log.info("trajectory %s: %s", traj.id, traj.error)
            return False
        except Exception as exc:  # a failing stage fails its trajectory, never the batch
            reason = exc.finish_reason if isinstance(exc, RuntimeLost) else STAGE_ERRORS[stage]
            traj.fail(reason, f"{stage} raised {type(exc).__name__}: {exc}")
            log.info("trajectory %s: %s", traj.id, traj.error)
            return False
        finally:
            elapsed = mon.now() - start
            traj.timing[stage] = elapsed
            mon.stage_s[stage].append(elapsed)
            mon.active[stage] -= 1
            mon.record()
        return traj.finish_reason not in _STOP_REASONS

    async def _release(self, traj: Trajectory, stages: Stages) -> None:
        """Await ``stages.release`` once, to completion, even if this task is cancelled meanwhile."""
        mon = self.monitor
        assert mon is not None
        timeout = getattr(self.config, "release_timeout_s", None)

        async def release() -> bool:
            try:
                await asyncio.wait_for(stages.release(traj), timeout)
                return True
            except asyncio.CancelledError:
                raise
            except BaseException as exc:  # release must not raise; a broken one is counted and logged
                log.warning("trajectory %s: release failed: %s: %s", traj.id, type(exc).__name__, exc)
                return False

        task = asyncio.ensure_future(release())
        cancelled = False
        while not task.done():
            try:
                await asyncio.shield(task)
            except asyncio.CancelledError:
                # Finish releasing first: a runtime must not outlive a cancelled dispatch.
                cancelled = True
        ok = (not task.cancelled()) and task.result()
        mon.runtime_released(ok)
        if cancelled:
            raise asyncio.CancelledError

    async def _run_tasks(self, tasks: list[asyncio.Task]) -> None:
        """Wait for every trajectory task; on cancellation cancel them all and wait for their releases."""
        if not tasks:
            return
        try:
            await asyncio.wait(tasks)
        except asyncio.CancelledError:
            for t in tasks:
                t.cancel()
            while True:
                try:
                    await asyncio.shield(asyncio.wait(tasks))
                    break
                except asyncio.CancelledError:
                    continue
            raise
        for t in tasks:
            if not t.cancelled() and t.exception() is not None:
                raise t.exception()  # a dispatcher bug, not a stage failure (those are caught per stage)

    def _start(self, trajectories: list[Trajectory]) -> None:
        self.monitor = DispatchMonitor(len(trajectories), self.engine_stats)
        d = getattr(self.config, "deadline_s", None)
        self._deadline = None if d is None else asyncio.get_running_loop().time() + d
