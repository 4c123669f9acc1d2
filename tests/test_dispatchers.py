"""Dispatchers: every trajectory accounted for, no leaked runtime, no hang, each failure reason kept.

Stage coroutines here are small async functions that sleep, raise or hang on purpose; most tests run them on the
virtual-clock loop (``skyrl_core.default_plugins.bench.clock``) so an hour of simulated stages takes milliseconds and
the same seed always gives the same interleaving. pytest-timeout guards against a hang.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import sys
import textwrap
from collections import Counter

import pytest

from skyrl_core.default_plugins.bench.clock import run_virtual
from skyrl_core.config import DispatcherConfig, load_config
from skyrl_core.dispatchers import Stages
from skyrl_core.default_plugins.dispatchers import BUILTIN_DISPATCHERS
from skyrl_core.transitions import CANCELLED, ERROR_EVAL, ERROR_INIT, ERROR_RUN, TIMEOUT, Trajectory

VARIANTS = {
    "async_batch": dict(type="async_batch"),
    "async_batch_bounded": dict(type="async_batch_bounded", max_parallel_agents=8),
    "async_pipeline": dict(type="async_pipeline", max_parallel_agents=8),
    "async_pipeline_auto": dict(type="async_pipeline", max_parallel_agents=8, auto=True),
    "priority": dict(type="priority", max_parallel_agents=8),
    "async_pipeline_group_cost": dict(type="async_pipeline", max_parallel_agents=8, auto=True,
                                      options={"order": "group_cost", "ramp": 1.5}),
}


def make(variant: str, **overrides):
    cfg = DispatcherConfig(**{**VARIANTS[variant], **overrides})
    return BUILTIN_DISPATCHERS[cfg.type](cfg, None), cfg


def trajectories(n: int, samples: int = 4) -> list[Trajectory]:
    return [Trajectory(instance_id=f"i{k // samples}", sample_index=k % samples, task="t",
                       group_id=f"i{k // samples}") for k in range(n)]


class Workload:
    """Stage coroutines with injected faults, and a ledger of runtime starts and releases."""

    def __init__(self, n: int, seed: int = 0, p_fail: float = 0.1, p_hang: float = 0.03, p_slow: float = 0.1):
        rng = random.Random(seed)
        self.plan: dict[int, tuple[str, str] | None] = {}
        for k in range(n):
            r = rng.random()
            stage = rng.choice(["init", "run", "eval"])
            if r < p_fail:
                self.plan[k] = (stage, "raise")
            elif r < p_fail + p_hang:
                self.plan[k] = (stage, "hang")
            elif r < p_fail + p_hang + p_slow:
                self.plan[k] = (stage, "slow")
            else:
                self.plan[k] = None
        self.rng = rng
        self.started: Counter = Counter()
        self.released: Counter = Counter()
        self.entered: dict[str, list[int]] = {"init": [], "run": [], "eval": []}
        self.alive = 0
        self.peak = 0

    def key(self, traj: Trajectory) -> int:
        return int(traj.instance_id[1:]) * 4 + traj.sample_index

    async def _stage(self, traj: Trajectory, stage: str, base: float) -> None:
        k = self.key(traj)
        self.entered[stage].append(k)
        plan = self.plan.get(k)
        if plan and plan[0] == stage:
            if plan[1] == "raise":
                await asyncio.sleep(base / 2)
                raise RuntimeError(f"injected {stage} failure in {traj.id}")
            if plan[1] == "hang":
                await asyncio.Event().wait()
            if plan[1] == "slow":
                await asyncio.sleep(base * 5)
        await asyncio.sleep(base * (0.5 + (k % 7) / 7))

    async def init(self, traj):
        self.started[traj.id] += 1
        self.alive += 1
        self.peak = max(self.peak, self.alive)
        await self._stage(traj, "init", 10.0)

    async def run(self, traj):
        await self._stage(traj, "run", 20.0)
        traj.finish_reason = "finished"

    async def eval(self, traj):
        await self._stage(traj, "eval", 10.0)
        traj.reward = 1.0

    async def release(self, traj):
        self.released[traj.id] += 1
        await asyncio.sleep(0.1)
        self.alive -= 1  # a runtime is alive until its release has finished (as the dispatcher counts it)

    def stages(self) -> Stages:
        return Stages(init=self.init, run=self.run, eval=self.eval, release=self.release)


def test_all_builtins_registered_and_selectable_from_config(plugins, tmp_path):
    assert set(plugins.registry.names("dispatchers")) >= set(BUILTIN_DISPATCHERS)
    for name in BUILTIN_DISPATCHERS:
        cfg = load_config(None, [f"dispatcher={name}", "dispatcher.max_parallel_agents=4"])
        dispatcher = plugins.registry.get("dispatchers", cfg.dispatcher.type)(cfg.dispatcher, None)
        assert dispatcher.name == name
        assert dispatcher.config.max_parallel_agents == 4


@pytest.mark.timeout(60)
@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("seed", [0, 1])
def test_faults_accounted_released_reasons_kept(variant, seed):
    n = 64
    work = Workload(n, seed=seed)
    dispatcher, cfg = make(variant, init_timeout_s=100.0, run_timeout_s=200.0, eval_timeout_s=100.0)
    trajs = trajectories(n)
    metrics = run_virtual(dispatcher.dispatch(trajs, work.stages()))

    # every trajectory accounted for, with the reason its injected fault implies
    expected = Counter()
    for traj in trajs:
        plan = work.plan[work.key(traj)]
        if plan and plan[1] in ("raise", "hang"):
            reason = {"init": ERROR_INIT, "run": ERROR_RUN, "eval": ERROR_EVAL}[plan[0]]
            assert traj.finish_reason == reason, (traj.id, plan, traj.error)
            assert traj.masked and traj.error
            assert ("timed out after" in traj.error) == (plan[1] == "hang")
            assert (f"{plan[0]}_timeout_s" in traj.error) == (plan[1] == "hang")
            expected[reason] += 1
        else:
            assert traj.finish_reason == "finished" and traj.reward == 1.0 and not traj.masked, traj.error
    assert metrics["failures"] == dict(expected)
    assert metrics["n_ok"] + metrics["n_failed"] == n
    assert metrics["n_failed"] == sum(expected.values()) > 0
    # a failed init skips run and eval; a failed run skips eval
    for k, plan in work.plan.items():
        if plan and plan[1] != "slow" and plan[0] == "init":
            assert k not in work.entered["run"]
        if plan and plan[1] != "slow" and plan[0] == "run":
            assert k not in work.entered["eval"]
    # no leaked runtime: exactly one release per trajectory that entered init
    assert work.started == work.released
    assert all(v == 1 for v in work.released.values())
    assert len(work.started) == n
    assert metrics["runtime_starts"] == metrics["runtime_releases"] == n
    assert metrics["release_errors"] == 0
    assert metrics["peak_runtimes"] >= work.peak
    assert metrics["wall_s"] > 0
    assert metrics["timeline"]["runtimes"][-1] == 0
    # stage times are recorded per trajectory
    assert all("init" in t.timing for t in trajs)


@pytest.mark.timeout(60)
def test_concurrency_bounds():
    n = 48
    peaks = {}
    for variant in VARIANTS:
        work = Workload(n, p_fail=0, p_hang=0, p_slow=0)
        dispatcher, _ = make(variant)
        metrics = run_virtual(dispatcher.dispatch(trajectories(n), work.stages()))
        peaks[variant] = (metrics["peak_runtimes"], metrics["wall_s"])
        assert metrics["peak_runtimes"] == work.peak, variant
    assert peaks["async_batch"][0] == n
    assert peaks["async_batch_bounded"][0] == 8
    # pipeline: run workers (8) + run queue (4) + eval queue (4) + eval workers (8) at most
    assert peaks["async_pipeline"][0] <= 8 + 4 + 4 + 8
    # overlapping the stages beats running them back to back in the same number of agent slots
    assert peaks["async_pipeline"][1] < peaks["async_batch_bounded"][1]

    work = Workload(n, p_fail=0, p_hang=0, p_slow=0)
    dispatcher, _ = make("async_batch", max_runtimes=5)
    assert run_virtual(dispatcher.dispatch(trajectories(n), work.stages()))["peak_runtimes"] == 5
    work = Workload(n, p_fail=0, p_hang=0, p_slow=0)
    dispatcher, _ = make("async_pipeline_auto", max_runtimes=6)
    metrics = run_virtual(dispatcher.dispatch(trajectories(n), work.stages()))
    assert metrics["peak_runtimes"] <= 6 and metrics["n_ok"] == n


@pytest.mark.timeout(60)
def test_auto_lookahead_waits_for_evidence_before_prefetching():
    """Auto mode: before any run has finished, no runtime is started ahead of a free run slot until the oldest run
    is one mean init old (a younger run says nothing about run length); after that the lookahead follows Little's
    law from the twice-its-age estimate, so fewer than a full second wave sit ready and idle."""
    from skyrl_core.default_plugins.bench.engine import StandInEngine
    from skyrl_core.inference.base import SamplingParams

    n, init_s = 12, 10.0

    async def main(options):
        engine = StandInEngine(capacity=4, base_s=0.1, per_seq_s=0.0)

        async def init(traj):
            await asyncio.sleep(init_s)

        async def run(traj):
            await engine.generate([0], SamplingParams(max_tokens=1000))  # 100 s at one token per 0.1 s step
            traj.finish_reason = "finished"

        async def noop(traj):
            return None

        cfg = DispatcherConfig(type="async_pipeline", max_parallel_agents=4, auto=True, options=options)
        metrics = await BUILTIN_DISPATCHERS["async_pipeline"](cfg, engine.stats).dispatch(
            trajectories(n), Stages(init=init, run=run, eval=noop, release=noop))
        await engine.close()
        return metrics

    metrics = run_virtual(main({"ramp": 1.0}))
    tl = metrics["timeline"]
    before = [r for t, r in zip(tl["t"], tl["runtimes"]) if t < 2 * init_s - 1e-6]
    assert max(before) == 4  # the 4 run slots only: their runs are younger than one init
    first_done = init_s + 100.0  # the first wave of runs ends at init_s + 100 s
    ramp = [r for t, r in zip(tl["t"], tl["runtimes"]) if t < first_done]
    # 2 * age = 2 * init_s at first -> ceil(1.25 * 4 * 10 / 20) = 3 prefetched, never a whole second wave
    assert max(ramp) == 4 + 3
    assert metrics["n_ok"] == n and metrics["runtime_starts"] == metrics["runtime_releases"] == n
    # the default ramp (2): before any init has finished, twice the run slots start so the fastest fill the batch
    metrics = run_virtual(main({}))
    tl = metrics["timeline"]
    assert max(r for t, r in zip(tl["t"], tl["runtimes"]) if t < init_s - 1e-6) == 2 * 4
    assert metrics["n_ok"] == n and metrics["runtime_starts"] == metrics["runtime_releases"] == n


@pytest.mark.timeout(60)
def test_pipeline_backpressure_keeps_ready_runtimes_bounded():
    """With a slow eval stage, finished runs wait in the (bounded) eval queue and stop new inits."""
    n = 40
    work = Workload(n, p_fail=0, p_hang=0, p_slow=0)

    async def slow_eval(traj):
        await asyncio.sleep(200.0)

    stages = work.stages()
    stages.eval = slow_eval
    dispatcher, _ = make("async_pipeline", eval_workers=2, queue_capacity=3, run_workers=4, init_workers=4)
    metrics = run_virtual(dispatcher.dispatch(trajectories(n), stages))
    assert metrics["n_ok"] == n
    # eval workers 2 + eval queue 3 + run slots 4 + run queue 3 (inits count against the run queue), plus
    # runtimes still closing after their eval (at most one per eval worker)
    assert metrics["peak_runtimes"] <= 2 + 3 + 4 + 3 + 2
    assert metrics["max_waiting_eval"] <= 3 + 4  # the eval queue plus finished runs holding their run slot


@pytest.mark.timeout(60)
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_deadline_marks_timeout_and_releases(variant):
    n = 40
    work = Workload(n, p_fail=0, p_hang=0.2, p_slow=0)
    dispatcher, _ = make(variant, deadline_s=90.0, init_timeout_s=None, run_timeout_s=None, eval_timeout_s=None)
    trajs = trajectories(n)
    metrics = run_virtual(dispatcher.dispatch(trajs, work.stages()))
    assert metrics["wall_s"] <= 90.0 + 1.0  # the deadline plus the releases
    assert all(t.finish_reason in ("finished", TIMEOUT) for t in trajs)
    timed_out = [t for t in trajs if t.finish_reason == TIMEOUT]
    assert timed_out and all("dispatcher.deadline_s" in t.error for t in timed_out)
    # hung trajectories are among the timed-out ones
    for t in trajs:
        if work.plan[work.key(t)]:
            assert t.finish_reason == TIMEOUT
    assert work.started == work.released
    assert metrics["runtime_starts"] == metrics["runtime_releases"] == len(work.started)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_cancellation_releases_every_runtime(variant):
    n = 30
    work = Workload(n, p_fail=0, p_hang=0.3, p_slow=0)
    dispatcher, _ = make(variant, init_timeout_s=None, run_timeout_s=None, eval_timeout_s=None)
    trajs = trajectories(n)

    async def main():
        task = asyncio.ensure_future(dispatcher.dispatch(trajs, work.stages()))
        await asyncio.sleep(25.0)
        assert work.alive > 0
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    run_virtual(main())
    assert work.started == work.released and work.alive == 0
    assert any(t.finish_reason == CANCELLED for t in trajs)
    assert all(t.finish_reason in ("finished", CANCELLED) for t in trajs)


@pytest.mark.timeout(60)
def test_failing_release_is_counted_not_raised():
    n = 12
    work = Workload(n, p_fail=0, p_hang=0, p_slow=0)
    stages = work.stages()

    async def bad_release(traj):
        work.released[traj.id] += 1
        raise OSError("container already gone")

    stages.release = bad_release
    for variant in VARIANTS:
        work.started.clear()
        work.released.clear()
        dispatcher, _ = make(variant)
        metrics = run_virtual(dispatcher.dispatch(trajectories(n), stages))
        assert metrics["release_errors"] == n and metrics["n_ok"] == n
        assert work.started == work.released


@pytest.mark.timeout(60)
def test_priority_grants_highest_first():
    n = 12
    work = Workload(n, p_fail=0, p_hang=0, p_slow=0)
    trajs = trajectories(n)
    for k, t in enumerate(trajs):
        t.metrics["priority"] = float((k * 5) % n)
    dispatcher, _ = make("priority", init_workers=1, run_workers=1, eval_workers=1, queue_capacity=1)
    run_virtual(dispatcher.dispatch(trajs, work.stages()))
    order = [trajs[k].metrics["priority"] for k in work.entered["init"]]
    assert order == sorted(order, reverse=True)
    # the plain pipeline keeps arrival order
    work = Workload(n, p_fail=0, p_hang=0, p_slow=0)
    dispatcher, _ = make("async_pipeline", init_workers=1, run_workers=1, eval_workers=1, queue_capacity=1)
    run_virtual(dispatcher.dispatch(trajs, work.stages()))
    assert work.entered["init"] == list(range(n))


@pytest.mark.timeout(60)
def test_group_cost_order_starts_costliest_group_first():
    """Hint-free longest-first: samples of one instance (group) cost alike; once a sibling's cost is seen, the
    remaining samples of the costliest group are admitted before those of the cheap group."""
    run_s = {"a": 10.0, "c": 100.0}
    starts: list[str] = []

    async def init(t: Trajectory) -> None:
        starts.append(f"{t.group_id}{t.sample_index}")
        await asyncio.sleep(1.0)

    async def run(t: Trajectory) -> None:
        await asyncio.sleep(run_s[t.group_id])

    async def evaluate(t: Trajectory) -> None:
        await asyncio.sleep(1.0)

    async def release(t: Trajectory) -> None:
        await asyncio.sleep(0.0)

    def order(option: str) -> tuple[list[str], dict]:
        starts.clear()
        trajs = [Trajectory(instance_id=g, sample_index=k, task="t", group_id=g) for g in "ac" for k in range(4)]
        cfg = DispatcherConfig(type="async_pipeline", max_parallel_agents=2, queue_capacity=0,
                               options={"order": option})
        metrics = run_virtual(BUILTIN_DISPATCHERS[cfg.type](cfg, None).dispatch(
            trajs, Stages(init=init, run=run, eval=evaluate, release=release)))
        return list(starts), metrics

    fifo, _ = order("fifo")
    assert fifo == ["a0", "a1", "a2", "a3", "c0", "c1", "c2", "c3"]
    grouped, metrics = order("group_cost")
    # round-robin while nothing has finished (a0, c0), a tie at t = 11 s (a1: a0 ran 10 s, c0 is 10 s old), then
    # c's run has outlived a's: every remaining c sample starts before the last two a samples
    assert grouped == ["a0", "c0", "a1", "c1", "c2", "c3", "a2", "a3"]
    assert metrics["n_ok"] == 8 and metrics["runtime_starts"] == metrics["runtime_releases"] == 8


def _starts(cfg: DispatcherConfig, trajs: list[Trajectory], run_s: dict[str, float]) -> dict[str, list[str]]:
    """Dispatch ``trajs`` (groups with the given run seconds; 1 s inits and evals) and return the order in which
    they entered init and run, as ``<group><sample>`` labels."""
    entered: dict[str, list[str]] = {"init": [], "run": []}

    async def init(t: Trajectory) -> None:
        entered["init"].append(f"{t.group_id}{t.sample_index}")
        await asyncio.sleep(1.0)

    async def run(t: Trajectory) -> None:
        entered["run"].append(f"{t.group_id}{t.sample_index}")
        await asyncio.sleep(run_s[t.group_id])

    async def evaluate(t: Trajectory) -> None:
        await asyncio.sleep(1.0)

    async def release(t: Trajectory) -> None:
        await asyncio.sleep(0.0)

    metrics = run_virtual(BUILTIN_DISPATCHERS[cfg.type](cfg, None).dispatch(
        trajs, Stages(init=init, run=run, eval=evaluate, release=release)))
    assert metrics["n_ok"] == len(trajs) and metrics["runtime_starts"] == metrics["runtime_releases"] == len(trajs)
    return entered


def _groups(names: str, samples: int = 4) -> list[Trajectory]:
    return [Trajectory(instance_id=g, sample_index=k, task="t", group_id=g) for g in names for k in range(samples)]


@pytest.mark.timeout(60)
def test_priority_without_priorities_uses_the_group_cost_order():
    """A run's first epoch: the stage-cost memory knows nothing, every priority is unset, and the priority
    dispatcher grants inits and run slots exactly as the hint-free group-cost order does (not arrival order)."""
    run_s = {"a": 10.0, "c": 100.0}
    fixed = dict(max_parallel_agents=2, queue_capacity=0)
    grouped = _starts(DispatcherConfig(type="async_pipeline", options={"order": "group_cost"}, **fixed),
                      _groups("ac"), run_s)
    first_epoch = _starts(DispatcherConfig(type="priority", **fixed), _groups("ac"), run_s)
    assert first_epoch == grouped
    # the same hand-checked order as test_group_cost_order_starts_costliest_group_first (arrival order would be
    # a0 a1 a2 a3 c0 ...)
    assert first_epoch["init"] == ["a0", "c0", "a1", "c1", "c2", "c3", "a2", "a3"]
    # auto mode (what the bench and a real run use): identical to the auto pipeline, init and run, with three
    # groups so that the learned costs reorder the tail
    run_s["b"] = 40.0
    auto = dict(max_parallel_agents=2, auto=True)
    pipeline = _starts(DispatcherConfig(type="async_pipeline", **auto), _groups("abc"), run_s)
    priority = _starts(DispatcherConfig(type="priority", **auto), _groups("abc"), run_s)
    assert priority == pipeline
    assert pipeline["init"] != [f"{g}{k}" for g in "abc" for k in range(4)]
    # None counts as unset (a caller clearing a priority)
    trajs = _groups("abc")
    for t in trajs:
        t.metrics["priority"] = None
    assert _starts(DispatcherConfig(type="priority", **auto), trajs, run_s) == pipeline


@pytest.mark.timeout(60)
def test_priority_order_wins_over_learned_group_costs():
    """With priorities set, they decide, even against what the siblings' measured costs say; in a mixed batch
    the trajectories with a priority go first (highest first) and the rest follow in group-cost order."""
    run_s = {"a": 10.0, "c": 100.0}
    fixed = dict(type="priority", max_parallel_agents=2, queue_capacity=0)
    trajs = _groups("ac")
    for t in trajs:  # the cheap group marked costly: the hint wins over the learned order
        t.metrics["priority"] = {"a": 50.0, "c": 5.0}[t.group_id] - t.sample_index
    assert _starts(DispatcherConfig(**fixed), trajs, run_s)["init"] == [
        "a0", "a1", "a2", "a3", "c0", "c1", "c2", "c3"]
    # mixed: group p carries priorities (p1 highest); groups a and c have none and come after, round-robin
    # first (nothing has finished when they are admitted) and then c, whose runs outlast a's, before a's tail
    run_s["p"] = 1.0
    trajs = _groups("acp", samples=3)
    for t in trajs:
        if t.group_id == "p":
            t.metrics["priority"] = [1.0, 3.0, 2.0][t.sample_index]
    starts = _starts(DispatcherConfig(**fixed), trajs, run_s)
    assert starts["init"] == ["p1", "p2", "p0", "a0", "c0", "a1", "c1", "c2", "a2"]
    # the same batch without priorities: group-cost order throughout (p's 1 s runs: its tail goes last)
    assert _starts(DispatcherConfig(**fixed), _groups("acp", samples=3), run_s)["init"] == [
        "a0", "c0", "p0", "c1", "c2", "a1", "a2", "p1", "p2"]


def test_pipeline_rejects_bad_order_options():
    from skyrl_core.errors import ConfigError

    for options, culprit in (({"order": "lifo"}, "dispatcher.options.order"),
                             ({"ramp": 0.5}, "dispatcher.options.ramp")):
        cfg = DispatcherConfig(type="async_pipeline", options=options)
        with pytest.raises(ConfigError, match=culprit):
            run_virtual(BUILTIN_DISPATCHERS[cfg.type](cfg, None).dispatch(
                trajectories(2), Workload(2, p_fail=0, p_hang=0, p_slow=0).stages()))


@pytest.mark.timeout(30)
@pytest.mark.parametrize("variant", list(VARIANTS))
async def test_real_clock_small_batch(variant):
    """On an ordinary event loop with real (tiny) sleeps and one failure."""
    work = Workload(8, p_fail=0, p_hang=0, p_slow=0)
    work.plan[3] = ("run", "raise")

    async def fast(traj, stage, base):
        work.entered[stage].append(work.key(traj))
        if work.plan.get(work.key(traj)) == (stage, "raise"):
            raise ValueError("boom")
        await asyncio.sleep(0.01)

    work._stage = fast
    dispatcher, _ = make(variant, max_parallel_agents=3)
    trajs = trajectories(8)
    metrics = await dispatcher.dispatch(trajs, work.stages())
    assert metrics["failures"] == {ERROR_RUN: 1}
    assert trajs[3].error == "run raised ValueError: boom"
    assert work.started == work.released and len(work.started) == 8
    assert 0 < metrics["wall_s"] < 5


CTRL_C_SCRIPT = textwrap.dedent("""
    import asyncio, sys
    from skyrl_core.config import DispatcherConfig
    from skyrl_core.dispatchers import Stages
    from skyrl_core.default_plugins.dispatchers import BUILTIN_DISPATCHERS
    from skyrl_core.transitions import Trajectory

    started, released = set(), set()

    async def init(t):
        started.add(t.id)
        if len(started) == 6:
            print("ready", flush=True)
        await asyncio.sleep(3600)

    async def release(t):
        await asyncio.sleep(0.05)  # closing a runtime takes a moment
        released.add(t.id)

    async def nothing(t):
        pass

    cfg = DispatcherConfig(type=sys.argv[1], max_parallel_agents=6)
    trajs = [Trajectory(instance_id=str(k), sample_index=0, task="t", group_id=str(k)) for k in range(10)]
    try:
        asyncio.run(BUILTIN_DISPATCHERS[cfg.type](cfg, None).dispatch(trajs, Stages(init, nothing, nothing, release)))
    except KeyboardInterrupt:
        reasons = sorted({t.finish_reason for t in trajs if t.id in started})
        print(f"interrupted started={len(started)} released={len(released)} leaked={len(started - released)} "
              f"reasons={reasons}", flush=True)
""")


@pytest.mark.timeout(60)
@pytest.mark.parametrize("variant", ["async_batch_bounded", "async_pipeline"])
def test_ctrl_c_closes_every_runtime(variant, tmp_path):
    script = tmp_path / "ctrl_c.py"
    script.write_text(CTRL_C_SCRIPT)
    # SIGINT back to its default in the child: a shell without job control (CI started in the background) starts
    # jobs with it ignored, and an ignored signal stays ignored across exec
    proc = subprocess.Popen([sys.executable, str(script), variant], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"},
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        assert proc.stdout.readline().strip() == "ready"
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert "interrupted started=6 released=6 leaked=0 reasons=['cancelled']" in out, out
