"""Dispatcher ``async_pipeline``: the three stages overlap through bounded queues with backpressure
(SkyRL-Agent, arXiv 2511.16108, Sec. 3.2); ``auto: true`` sizes admission from engine feedback and measured stage
times."""

from __future__ import annotations

import asyncio
import itertools
import logging
import math
from collections import Counter
from typing import Any

from skyrl_core.dispatchers import Stages
from skyrl_core.errors import ConfigError
from skyrl_core.transitions import Trajectory

from .base import BaseDispatcher, mark_cancelled
from .stage_costs import StageCostMemory

log = logging.getLogger(__name__)


# -- the three-stage pipeline ----------------------------------------------------------------------------------
# Pipeline states of one trajectory. A waiting state is held until the scheduler grants the next stage.
_PENDING, _INIT, _READY, _RUN, _RUN_DONE, _EVAL_Q, _EVAL, _RELEASE, _DONE = range(9)
_GRANTS = {"init": _INIT, "run": _RUN, "evalq": _EVAL_Q, "eval": _EVAL}
_WAIT_LABEL = {"init": "queued for init", "run": "queued for run (runtime ready)",
               "evalq": "waiting for room in the eval queue", "eval": "queued for eval"}


class _RecentMean:
    """Mean of the last ``size`` samples (seconds); None before the first."""

    def __init__(self, size: int = 64) -> None:
        self.size = size
        self.values: list[float] = []

    def add(self, x: float) -> None:
        self.values.append(x)
        if len(self.values) > self.size:
            del self.values[0]

    @property
    def value(self) -> float | None:
        return sum(self.values) / len(self.values) if self.values else None


class PipelineDispatcher(BaseDispatcher):
    """Three overlapping stages with bounded queues (SkyRL-Agent, arXiv 2511.16108, Sec. 3.2, Fig. 1b).

    Fixed mode: at most ``init_workers`` inits, ``run_workers`` agent loops and ``eval_workers`` evals at
    once (each defaults to ``max_parallel_agents``); the run and eval queues hold ``queue_capacity``
    trajectories (default ``max_parallel_agents // 2``). Backpressure: an init starts only when its runtime
    will have a place in the run queue, and a finished run keeps its run slot until the eval queue has room, so
    initialised runtimes never pile up idle.

    Auto mode (``auto: true``): the run stage admits as many agent loops as keep the engine's batch full — it
    starts at the engine's capacity and grows by one per ``auto_interval_s`` while a runtime is ready, every
    run slot is taken and the engine's mean occupancy stays below 95 % (agents in tool calls leave batch slots
    free), and shrinks while the engine queues requests. Inits are admitted to fill free run slots plus a
    lookahead sized by Little's law, ``ceil(1.25 * run_slots * mean_init_s / mean_run_s)`` (the runs expected
    to finish while one init takes place), so a runtime is ready when a slot frees. ``mean_run_s`` counts runs
    still going that are older than the finished runs' mean at their age (short runs finish first); before any
    run has finished it is twice the oldest run's age, and no lookahead is admitted until that run is one
    mean init old (see :meth:`run_estimate`). Before any init has finished, ``options.ramp`` (default 2) times
    the run slots are admitted: init times vary several-fold, so the fastest inits fill the engine's batch early
    and the rest become the first lookahead. Once every trajectory has been admitted, ready runtimes start their
    run at once. Every mode honours ``max_runtimes``.

    Grant order (``options.order``): ``fifo`` (the fixed mode's default), ``priority`` (``metrics["priority"]``,
    the ``priority`` dispatcher; trajectories without one after, in ``group_cost`` order) or ``group_cost``
    (the auto mode's default): hint-free longest-first. The
    samples of one instance (``group_id``) cost alike, so inits and run slots go to the samples of the group
    expected to cost most from now (:meth:`group_cost`, learned online from finished and still-running
    siblings); while no run has finished, round-robin over groups (sample k of every group before sample k + 1).
    Longest-first shortens the makespan tail (LPT scheduling, Graham 1969).

    Across a session's rollouts (``dispatcher.remember_costs``, the default) the pipeline remembers what each
    instance's stages cost (:class:`~.stage_costs.StageCostMemory`, its :meth:`session_memory`) and sets the
    ``priority`` that ``options.order: priority`` grants by.
    """

    name = "async_pipeline"
    by_priority = False

    @classmethod
    def session_memory(cls, config: Any) -> StageCostMemory | None:
        """A :class:`~.stage_costs.StageCostMemory` when ``config.remember_costs`` is on, else None."""
        return StageCostMemory() if getattr(config, "remember_costs", True) else None

    LOOKAHEAD_MARGIN = 1.25
    AUTO_RAMP = 2.0
    OCCUPANCY_TARGET = 0.95

    def _setup(self, n: int) -> None:
        c = self.config
        p = c.max_parallel_agents
        self.auto = bool(c.auto)
        inf = math.inf
        self.max_runtimes = c.max_runtimes or inf
        capacity = getattr(self.engine_stats, "capacity", None) if self.engine_stats is not None else None
        if self.auto:
            self.init_workers = c.init_workers or inf
            self.eval_workers = c.eval_workers or inf
            self.eval_queue_capacity = inf
            self.run_floor = c.run_workers or capacity or p
            self.run_limit = self.run_floor
            self.queue_capacity = 0
        else:
            self.init_workers = c.init_workers or p
            self.eval_workers = c.eval_workers or p
            self.run_limit = self.run_floor = c.run_workers or p
            self.queue_capacity = c.queue_capacity if c.queue_capacity is not None else max(1, p // 2)
            self.eval_queue_capacity = self.queue_capacity
        self.state = [_PENDING] * n
        self.count = Counter({_PENDING: n})
        self.waiters: dict[str, list] = {g: [] for g in _GRANTS}
        self.seq = itertools.count()
        self.init_mean = _RecentMean()
        self.run_mean = _RecentMean()
        self.run_started: dict[int, float] = {}
        self.peak_run_limit = self.run_limit
        self.eval_mean = _RecentMean()
        self.stage_mean = {"init": self.init_mean, "run": self.run_mean, "eval": self.eval_mean}
        self.stage_started: dict[str, dict[int, float]] = {"init": {}, "run": self.run_started, "eval": {}}
        self.order = self._order_mode(c)
        self.ramp = self._ramp(c)
        # Per group (the samples of one instance): admitted count and finished stage seconds.
        self.group: list[str] = []
        self.admitted: Counter = Counter()
        self.group_s: dict[str, dict[str, list[float]]] = {}
        self._memo: dict | None = None  # per-selection cache of group costs and stage ages (see _pump)

    # state and gates ----------------------------------------------------------------------------------------
    def _set(self, i: int, state: int) -> None:
        self.count[self.state[i]] -= 1
        self.count[state] += 1
        self.state[i] = state
        mon = self.monitor
        assert mon is not None
        mon.waiting["init"] = self.count[_PENDING]
        mon.waiting["run"] = self.count[_READY]
        mon.waiting["eval"] = self.count[_RUN_DONE] + self.count[_EVAL_Q]
        mon.record()

    def _alive(self) -> int:
        c = self.count
        return c[_INIT] + c[_READY] + c[_RUN] + c[_RUN_DONE] + c[_EVAL_Q] + c[_EVAL] + c[_RELEASE]

    def _in_run(self) -> int:
        return self.count[_RUN] + self.count[_RUN_DONE]

    def run_estimate(self) -> float | None:
        """Auto mode: the expected seconds of one run (agent loop), from what has been seen so far; None while
        there is no basis yet.

        Short runs finish first, so the mean of the finished runs alone is biased low early in a batch (which
        makes the lookahead eager); runs still going that are already older than that mean count too, at their
        age (a lower bound: right-censored durations). Before any run has finished, a run is expected to last
        twice the oldest run's age, but only once that age is at least one mean init: a run younger than an
        init says nothing about how long runs take, and every runtime admitted on it would sit ready, idle.
        """
        now = self.monitor.now()  # type: ignore[union-attr]
        ages = [now - t0 for t0 in self.run_started.values()]
        done = self.run_mean.values
        if done:
            mean = sum(done) / len(done)
            longer = [a for a in ages if a > mean]
            return (sum(done) + sum(longer)) / (len(done) + len(longer))
        init_s = self.init_mean.value
        if not ages or init_s is None or max(ages) < init_s:
            return None
        return 2.0 * max(ages)

    def lookahead(self) -> int:
        """Auto mode: how many trajectories may be initialising or ready (waiting for a run slot) at once —
        the free run slots plus the runs expected to finish during one init (Little's law, with a margin)."""
        free = max(self.run_limit - self._in_run(), 0)
        init_s = self.init_mean.value
        run_s = self.run_estimate()
        if init_s is None or not run_s:
            if init_s is None:
                return math.ceil(free * self.ramp)
            return free
        prefetch = math.ceil(self.LOOKAHEAD_MARGIN * self.run_limit * init_s / max(run_s, init_s))
        return free + min(prefetch, self.run_limit)

    def _gate_open(self, gate: str) -> bool:
        c = self.count
        if gate == "eval":
            return c[_EVAL] < self.eval_workers
        if gate == "evalq":
            return c[_EVAL_Q] < self.eval_queue_capacity + max(self.eval_workers - c[_EVAL], 0)
        if gate == "run":
            if self.auto and c[_PENDING] == 0:
                return True  # nothing left to admit: an initialised runtime never waits idle for a slot
            return self._in_run() < self.run_limit
        # init
        if self._alive() >= self.max_runtimes or c[_INIT] >= self.init_workers:
            return False
        if self.auto:
            return c[_INIT] + c[_READY] < self.lookahead()
        return c[_INIT] + c[_READY] + self._in_run() < self.run_limit + self.queue_capacity

    def _pump(self) -> None:
        """Grant every stage whose gate is open, downstream first (a grant there may open one upstream); each
        grant goes to the waiter with the smallest :meth:`_order_key`."""
        progress = True
        while progress:
            progress = False
            for gate in ("eval", "evalq", "run", "init"):
                waiting = self.waiters[gate]
                while waiting and self._gate_open(gate):
                    waiting[:] = [w for w in waiting if not w[1].done()]  # drop cancelled waiters
                    if not waiting:
                        break
                    # one selection sees one instant: group costs are computed once per group, not per waiter
                    # (2048 trajectories in 256 groups: 29 s of event-loop CPU per batch without this)
                    self._memo = {}
                    try:
                        best = min(waiting, key=lambda w: self._order_key(gate, w))
                    finally:
                        self._memo = None
                    waiting.remove(best)
                    _, fut, i = best
                    if gate == "init":
                        self.admitted[self.group[i]] += 1
                    self._set(i, _GRANTS[gate])
                    fut.set_result(True)
                    progress = True

    # grant order --------------------------------------------------------------------------------------------
    ORDERS = ("fifo", "priority", "group_cost")

    def _order_mode(self, config: Any) -> str:
        options = getattr(config, "options", None) or {}
        order = options.get("order")
        if order is None:
            return "priority" if self.by_priority else ("group_cost" if self.auto else "fifo")
        if order not in self.ORDERS:
            raise ConfigError(f"dispatcher.options.order '{order}' is unknown; valid: {', '.join(self.ORDERS)}")
        return order

    def _ramp(self, config: Any) -> float:
        options = getattr(config, "options", None) or {}
        ramp = options.get("ramp", self.AUTO_RAMP if self.auto else 1.0)
        if not isinstance(ramp, (int, float)) or ramp < 1:
            raise ConfigError(f"dispatcher.options.ramp must be a number >= 1, got {ramp!r}")
        return float(ramp)

    def _order_key(self, gate: str, waiter: tuple) -> tuple:
        """Sort key of one waiter for ``gate`` (smallest is granted first).

        ``priority`` order: trajectories with a ``metrics["priority"]`` go first, highest first (ties in arrival
        order); those without one (None or absent: e.g. a run's first epoch, before the rollout session's
        stage-cost memory knows any instance) follow in :meth:`_group_cost_key` order, the hint-free
        longest-first the auto mode uses. A priority is the caller's own estimate in its own units, so it is
        not compared with the learned group costs (seconds); every trajectory in a batch with one is ranked
        ahead, as if a missing priority were the lowest.
        """
        seq, _, i = waiter
        if self.order == "priority":
            priority = self.trajectories[i].metrics.get("priority")
            if priority is not None:
                return (0, -float(priority), seq)
            return (1, *self._group_cost_key(gate, i, seq))
        if self.order == "fifo":
            return (seq,)
        return self._group_cost_key(gate, i, seq)

    def _group_cost_key(self, gate: str, i: int, seq: int) -> tuple:
        """The ``group_cost`` order's sort key: inits and run slots to the group expected to cost most from
        now (:meth:`group_cost`), then the group's least-admitted sample; arrival order at the eval gates."""
        if gate not in ("init", "run"):
            return (seq,)
        g = self.group[i]
        rank = self.admitted[g] if gate == "init" else 0
        if not self.run_mean.values:
            # No run has finished: differences in cost are noise (a fast init, a young run), so go round-robin.
            return (rank, seq)
        include_init = gate == "init"
        memo = self._memo
        if memo is None:
            return (-self.group_cost(g, include_init=include_init), rank, seq)
        cost = memo.get((g, include_init))
        if cost is None:
            cost = memo[(g, include_init)] = self.group_cost(g, include_init=include_init)
        return (-cost, rank, seq)

    def _group_times(self, g: str) -> dict[str, list[float]]:
        times = self.group_s.get(g)
        if times is None:
            times = self.group_s[g] = {"init": [], "run": [], "eval": []}
        return times

    def group_cost(self, g: str, include_init: bool = True) -> float:
        """The expected seconds one more sample of group ``g`` (the samples of one instance) costs from now:
        init (when ``include_init``) + run + eval, learned online from its siblings — no hint needed.

        Samples of one instance share a repository, a test suite and a task, so their costs correlate. Per
        stage: the mean of the group's finished stages, counting its siblings still in that stage past the
        mean at their age (right-censored durations, as in :meth:`run_estimate`); a group with none finished
        is expected to take at least its oldest sibling's age in the stage and at least the batch-wide mean
        (:meth:`run_estimate` for runs); 0 before anything has finished anywhere.
        """
        cost = self.group_stage_s(g, "run") + self.group_stage_s(g, "eval")
        if include_init:
            cost += self.group_stage_s(g, "init")
        return cost

    def group_stage_s(self, g: str, stage: str) -> float:
        """Expected seconds of ``stage`` for a sample of group ``g`` (see :meth:`group_cost`)."""
        now = self.monitor.now()  # type: ignore[union-attr]
        memo = self._memo
        if memo is not None:  # within one selection: every group's ages in one pass over the stage
            by_group = memo.get(stage)
            if by_group is None:
                by_group = memo[stage] = {}
                for j, t0 in self.stage_started[stage].items():
                    by_group.setdefault(self.group[j], []).append(now - t0)
            ages = by_group.get(g, [])
        else:
            ages = [now - t0 for j, t0 in self.stage_started[stage].items() if self.group[j] == g]
        done = self._group_times(g)[stage]
        if done:
            mean = sum(done) / len(done)
            longer = [a for a in ages if a > mean]
            return (sum(done) + sum(longer)) / (len(done) + len(longer))
        prior = self.run_estimate() if stage == "run" else self.stage_mean[stage].value
        return max(ages + [prior or 0.0])


    def _enqueue(self, gate: str, i: int, traj: Trajectory) -> asyncio.Future:
        fut = asyncio.get_running_loop().create_future()
        self.waiters[gate].append((next(self.seq), fut, i))
        return fut

    async def _wait(self, gate: str, i: int, traj: Trajectory, waiting_state: int,
                    fut: asyncio.Future | None = None) -> bool:
        """Queue for ``gate`` (or await the already queued ``fut``); True once granted, False when the batch
        deadline passed first."""
        if fut is None:
            if self.deadline_passed():
                self._fail_deadline(traj, f"while {_WAIT_LABEL[gate]}")
                return False
            if self.state[i] != waiting_state:
                self._set(i, waiting_state)
            fut = self._enqueue(gate, i, traj)
            self._pump()
        if await fut:
            return True
        self._fail_deadline(traj, f"while {_WAIT_LABEL[gate]}")
        return False

    def _expire(self) -> None:
        """The batch deadline: every queued trajectory gives up (active stages time out on their own)."""
        for waiting in self.waiters.values():
            for _, fut, _ in waiting:
                if not fut.done():
                    fut.set_result(False)
            waiting.clear()

    # auto-mode feedback -------------------------------------------------------------------------------------
    async def _control(self) -> None:
        stats = self.engine_stats
        interval = float(getattr(self.config, "auto_interval_s", 0.5) or 0.5)
        mon = self.monitor
        assert mon is not None
        last = stats.snapshot() if stats is not None else None
        last_t = mon.now()
        while True:
            await asyncio.sleep(interval)
            if stats is not None and last is not None:
                snap = stats.snapshot()
                t = mon.now()
                occupancy = (snap["occupancy_integral"] - last["occupancy_integral"]) / max(t - last_t, 1e-9)
                last, last_t = snap, t
                saturated = self._in_run() >= self.run_limit and self.count[_READY] > 0
                if snap.get("queued", 0) > 0 and self.run_limit > self.run_floor:
                    self.run_limit -= 1
                elif saturated and occupancy < self.OCCUPANCY_TARGET and self._alive() < self.max_runtimes:
                    self.run_limit += 1
                    self.peak_run_limit = max(self.peak_run_limit, self.run_limit)
            self._pump()

    # the trajectory --------------------------------------------------------------------------------------------
    async def _trajectory(self, i: int, traj: Trajectory, stages: Stages, queued: asyncio.Future) -> None:
        mon = self.monitor
        assert mon is not None
        entered = False
        try:
            if not await self._wait("init", i, traj, _PENDING, queued):
                return
            entered = True
            mon.runtime_started()
            t0 = self.stage_started["init"][i] = mon.now()
            ok = await self._stage(traj, "init", stages.init)
            del self.stage_started["init"][i]
            if not ok:
                return
            self.init_mean.add(mon.now() - t0)
            self._group_times(self.group[i])["init"].append(mon.now() - t0)
            if not await self._wait("run", i, traj, _READY):
                return
            t0 = self.run_started[i] = mon.now()
            ok = await self._stage(traj, "run", stages.run)
            del self.run_started[i]
            if not ok:
                return
            self.run_mean.add(mon.now() - t0)
            self._group_times(self.group[i])["run"].append(mon.now() - t0)
            if not await self._wait("evalq", i, traj, _RUN_DONE):
                return
            if not await self._wait("eval", i, traj, _EVAL_Q):
                return
            t0 = self.stage_started["eval"][i] = mon.now()
            ok = await self._stage(traj, "eval", stages.eval)
            del self.stage_started["eval"][i]
            if ok:
                self.eval_mean.add(mon.now() - t0)
                self._group_times(self.group[i])["eval"].append(mon.now() - t0)
        except asyncio.CancelledError:
            mark_cancelled(traj)
            raise
        finally:
            for started in self.stage_started.values():
                started.pop(i, None)
            self._set(i, _RELEASE if entered else _DONE)
            self._pump()
            try:
                if entered:
                    await self._release(traj, stages)
            finally:
                self._set(i, _DONE)
                self._pump()

    async def dispatch(self, trajectories: list[Trajectory], stages: Stages) -> dict[str, Any]:
        self._start(trajectories)
        self._setup(len(trajectories))
        self.trajectories = trajectories
        self.group = [t.group_id or t.instance_id for t in trajectories]
        mon = self.monitor
        assert mon is not None
        mon.waiting["init"] = len(trajectories)
        loop = asyncio.get_running_loop()
        timer = loop.call_at(self._deadline, self._expire) if self._deadline is not None else None
        control = asyncio.ensure_future(self._control()) if self.auto else None
        # Queue every trajectory for init before granting any, so the first grants follow priority too.
        queued = [self._enqueue("init", i, t) for i, t in enumerate(trajectories)]
        tasks = [asyncio.ensure_future(self._trajectory(i, t, stages, queued[i]))
                 for i, t in enumerate(trajectories)]
        self._pump()
        try:
            await self._run_tasks(tasks)
        finally:
            if timer is not None:
                timer.cancel()
            if control is not None:
                control.cancel()
                await asyncio.gather(control, return_exceptions=True)
        extra = {"dispatcher": self.name, "auto": self.auto, "run_slots": self.run_limit,
                 "peak_run_slots": self.peak_run_limit}
        if not self.auto:
            extra.update(init_workers=self.init_workers, eval_workers=self.eval_workers,
                         queue_capacity=self.queue_capacity)
        return mon.finish(trajectories, extra)
