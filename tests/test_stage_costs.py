"""Stage-cost memory: running means per instance, priorities from it in a real rollout session, and its round
trip through the trainer's checkpoint state."""

from __future__ import annotations

import asyncio
import json
from collections import Counter

import pytest

from skyrl_core import hookimpl
from skyrl_core.config import Config, DispatcherConfig, TaskConfig
from skyrl_core.default_plugins.dispatchers.stage_costs import StageCostMemory, instance_key, supplied_cost
from skyrl_core.errors import SkyrlError
from skyrl_core.tasks import DataSpec, Instance, Task, VerifierResult
from skyrl_core.transitions import ERROR_RUN, MAX_TOKENS, TIMEOUT, Trajectory

pytestmark = pytest.mark.timeout(300)


def traj(task="t", iid="a", **timing) -> Trajectory:
    t = Trajectory(instance_id=iid, sample_index=0, task=task, group_id=f"{task}:{iid}")
    t.timing.update(timing)
    return t


def test_running_mean_per_stage_and_count():
    mem = StageCostMemory()
    assert mem.expected("k") is None and mem.mean_expected() is None and mem.count("k") == 0
    assert mem.record("k", {"init": 10.0, "run": 100.0, "eval": 20.0})
    assert mem.record("k", {"init": 20.0, "run": 50.0, "eval": 40.0})
    assert mem.record("k", {"init": 30.0, "run": 60.0, "eval": 30.0})
    assert mem.count("k") == 3
    assert mem.stage_means("k") == pytest.approx({"init": 20.0, "run": 70.0, "eval": 30.0})
    assert mem.expected("k") == pytest.approx(120.0)
    # a missing stage or a non-finite / negative value records nothing
    assert not mem.record("k", {"init": 1.0, "run": 1.0})
    assert not mem.record("k", {"init": float("nan"), "run": 1.0, "eval": 1.0})
    assert not mem.record("k", {"init": -1.0, "run": 1.0, "eval": 1.0})
    assert mem.count("k") == 3
    mem.record("j", {"init": 1.0, "run": 2.0, "eval": 3.0})
    assert mem.mean_expected() == pytest.approx((120.0 + 6.0) / 2)


def test_record_trajectories_skips_failed_and_cut_off_ones():
    ok = traj(iid="a", init=4.0, run=8.0, eval=2.0)
    ok.finish_reason = "finished"
    limit = traj(iid="a", init=4.0, run=20.0, eval=2.0)
    limit.fail(MAX_TOKENS, "generation hit sampling.max_tokens=2 mid-call")  # a real cost under the settings
    failed = traj(iid="a", init=4.0, run=300.0, eval=0.0)
    failed.fail(ERROR_RUN, "run raised RuntimeError: boom")
    deadline = traj(iid="c", init=4.0, run=30.0, eval=1.0)
    deadline.fail(TIMEOUT, "batch deadline reached during eval")
    no_eval = traj(iid="b", init=1.0, run=2.0)
    mem = StageCostMemory()
    assert mem.record_trajectories([ok, limit, failed, deadline, no_eval], ["a", "a", "a", "c", "b"]) == 2
    assert mem.expected("a") == pytest.approx(20.0) and "b" not in mem and "c" not in mem
    with pytest.raises(ValueError, match="3 trajectories but 2 keys"):
        mem.record_trajectories([ok, failed, no_eval], ["a", "a"])


def test_assign_precedence_instance_memory_mean_unset():
    mem = StageCostMemory()
    empty = [traj(iid="x"), traj(iid="y")]
    assert mem.assign(empty, ["x", "y"]) == {"instance": 0, "memory": 0, "mean": 0, "unset": 2, "preset": 0}
    assert all("priority" not in t.metrics for t in empty)
    mem.record("a", {"init": 10.0, "run": 20.0, "eval": 30.0})  # 60 s
    mem.record("b", {"init": 1.0, "run": 2.0, "eval": 3.0})  # 6 s
    trajs = [traj(iid=i) for i in ("a", "b", "new", "given", "preset")]
    trajs[4].metrics["priority"] = -5.0
    counts = mem.assign(trajs, ["a", "b", "new", "given", "a"], supplied={"given": 500.0})
    assert [t.metrics["priority"] for t in trajs] == pytest.approx([60.0, 6.0, 33.0, 500.0, -5.0])
    assert counts == {"instance": 1, "memory": 2, "mean": 1, "unset": 0, "preset": 1}
    # an instance's own cost wins over the memory
    t = traj(iid="a")
    mem.assign([t], ["a"], supplied={"a": 7.5})
    assert t.metrics["priority"] == 7.5


def test_state_round_trip_and_old_checkpoints():
    mem = StageCostMemory()
    mem.record("gsm8k:0#abc", {"init": 1.5, "run": 2.5, "eval": 0.5})
    mem.record("gsm8k:0#abc", {"init": 2.5, "run": 3.5, "eval": 1.5})
    state = json.loads(json.dumps(mem.to_state()))  # what state.json holds
    back = StageCostMemory.from_state(state)
    assert back.count("gsm8k:0#abc") == 2 and back.stage_means("gsm8k:0#abc") == mem.stage_means("gsm8k:0#abc")
    assert StageCostMemory.from_state(None).mean_expected() is None  # a checkpoint from before the memory
    with pytest.raises(SkyrlError, match="no 'entries'"):
        StageCostMemory.from_state({"version": 1})
    with pytest.raises(SkyrlError, match="entry 'k' is malformed.*expected n, init, run, eval"):
        StageCostMemory.from_state({"entries": {"k": {"n": 1, "init": 1.0}}})


def test_instance_key_tells_splits_apart_and_supplied_cost_is_checked():
    train0 = Instance(id="0", data={"question": "2 + 2?", "answer": "4"})
    test0 = Instance(id="0", data={"question": "3 + 5?", "answer": "8"})
    assert instance_key("gsm8k", train0) != instance_key("gsm8k", test0)
    assert instance_key("gsm8k", train0) == instance_key("gsm8k", Instance(id="0", data=dict(train0.data)))
    assert instance_key("gsm8k", train0).startswith("gsm8k:0#")
    assert supplied_cost(train0) is None
    assert supplied_cost(Instance(id="s", data={"expected_cost_s": 42})) == 42.0
    for bad in ("long", -1.0, float("inf"), True):
        with pytest.raises(SkyrlError, match="instance 'b': data.expected_cost_s must be a number of seconds"):
            supplied_cost(Instance(id="b", data={"expected_cost_s": bad}))


# -- a real rollout session: tiny random model through the hf engine, the local runtime ------------------------
INIT_ORDER: list[str] = []
DELAYS = {"quick": 0.0, "medium": 0.15, "slow": 0.3}


def load_delays(spec: DataSpec) -> list[Instance]:
    return [Instance(id=name, data={"delay_s": d}) for name, d in DELAYS.items()]


async def slow_builder(instance: Instance, task: Task) -> list[dict]:
    """Init costs what the instance says (its repository set-up, say); records the order inits ran in."""
    INIT_ORDER.append(instance.id)
    await asyncio.sleep(instance.data["delay_s"])
    return [{"role": "user", "content": "Say hi."}]


def zero_verifier(trajectory, runtime, instance):
    return VerifierResult(reward=0.0)


class CostPlugin:
    @hookimpl
    def register_tasks(self, register):
        register(Task(name="delays", description="inits of known cost", load=load_delays,
                      instruction_builder="slow_builder", tools=("finish",), verifier="zero", runtime="local"))

    @hookimpl
    def register_instruction_builders(self, register):
        register(slow_builder, name="slow_builder")

    @hookimpl
    def register_verifiers(self, register):
        register(zero_verifier, name="zero")


@pytest.fixture(scope="module")
def tiny_engine(tiny_chat_model_dir):
    from skyrl_core.default_plugins.engines.hf import HFEngine

    engine = HFEngine(model=tiny_chat_model_dir, max_batch=8, device="cpu")
    yield engine
    asyncio.run(engine.close())


def session_config(dispatcher: DispatcherConfig) -> Config:
    cfg = Config(tasks=[TaskConfig(name="delays")], dispatcher=dispatcher)
    cfg.agent.max_turns = 1
    cfg.sampling.max_tokens = 2
    cfg.sampling.seed = 0
    return cfg


async def test_second_rollout_orders_by_remembered_costs(plugins, tiny_engine):
    from skyrl_core.rollout import RolloutSession

    plugins.register_plugin(CostPlugin(), "cost-plugin")
    # one init, run and eval at a time, highest priority first (as tests/test_dispatchers.py checks the order)
    cfg = session_config(DispatcherConfig(type="priority", max_parallel_agents=1, init_workers=1, run_workers=1,
                                          eval_workers=1, queue_capacity=1))
    session = await RolloutSession.create(cfg, engine=tiny_engine, registry=plugins.registry)
    items = session.load_instances("train")
    keys = {inst.id: instance_key("delays", inst) for _, inst in items}

    INIT_ORDER.clear()
    first, metrics = await session.rollout(items, n_samples=2)
    assert all("priority" not in t.metrics for t in first)  # nothing known yet
    # no priority: the dispatcher's group-cost order, round-robin over instances until a run finishes (then the
    # order follows the measured seconds of this real-clock run, which the test does not pin)
    assert INIT_ORDER[:2] == ["quick", "medium"] and Counter(INIT_ORDER) == {iid: 2 for iid in DELAYS}
    assert {t.finish_reason for t in first} == {"max_tokens"}  # 2 tokens of a random model: a limit, recorded
    assert metrics["priority_from_unset"] == 6 and metrics["costs_recorded"] == 6
    mem = session.dispatch_memory  # the priority dispatcher's session memory
    assert isinstance(mem, StageCostMemory)
    for iid in DELAYS:
        mine = [t for t in first if t.instance_id == iid]
        assert mem.count(keys[iid]) == 2
        assert mem.expected(keys[iid]) == pytest.approx(
            sum(t.timing["init"] + t.timing["run"] + t.timing["eval"] for t in mine) / 2)
        assert mem.stage_means(keys[iid])["init"] >= DELAYS[iid]
    assert mem.expected(keys["slow"]) > mem.expected(keys["medium"]) > mem.expected(keys["quick"])

    # the second rollout of the same instances (plus one never seen) is ordered by what the first measured
    new = Instance(id="new", data={"delay_s": 0.0})
    supplied = Instance(id="given", data={"delay_s": 0.0, "expected_cost_s": 1000.0})
    tc = items[0][0]
    expected = {iid: mem.expected(keys[iid]) for iid in DELAYS}
    INIT_ORDER.clear()
    second, metrics = await session.rollout([*items, (tc, new), (tc, supplied)], n_samples=1)
    prio = {t.instance_id: t.metrics["priority"] for t in second}
    assert prio["given"] == 1000.0
    assert {iid: prio[iid] for iid in DELAYS} == pytest.approx(expected)
    assert prio["new"] == pytest.approx(sum(expected.values()) / 3)
    arrival = ["quick", "medium", "slow", "new", "given"]
    assert INIT_ORDER == sorted(arrival, key=lambda i: (-prio[i], arrival.index(i)))
    assert INIT_ORDER[:2] == ["given", "slow"] and INIT_ORDER[-1] == "quick"
    assert metrics["priority_from_instance"] == 1 and metrics["priority_from_memory"] == 3
    assert metrics["priority_from_mean"] == 1 and metrics["costs_remembered_instances"] == 5
    assert mem.count(keys["slow"]) == 3  # the second rollout was recorded too


@pytest.mark.parametrize("dispatcher", [DispatcherConfig(type="priority", max_parallel_agents=4, remember_costs=False),
                                        DispatcherConfig(type="async_batch_bounded", max_parallel_agents=4)])
async def test_no_session_memory_leaves_priorities_alone(plugins, tiny_engine, dispatcher):
    """``remember_costs: false``, or a dispatcher that never reads a priority (the batch ones): no memory."""
    from skyrl_core.rollout import RolloutSession

    plugins.register_plugin(CostPlugin(), "cost-plugin")
    session = await RolloutSession.create(session_config(dispatcher), engine=tiny_engine, registry=plugins.registry)
    items = session.load_instances("train")
    for _ in range(2):
        trajs, metrics = await session.rollout(items, n_samples=1)
        assert all("priority" not in t.metrics for t in trajs)
        assert "costs_recorded" not in metrics
    assert session.dispatch_memory is None


def test_the_pipeline_dispatchers_offer_the_memory_and_the_core_does_not_build_it():
    from skyrl_core.default_plugins.dispatchers import BUILTIN_DISPATCHERS

    offered = {name: type(cls.session_memory(DispatcherConfig())).__name__ for name, cls in BUILTIN_DISPATCHERS.items()}
    assert offered == {"async_batch": "NoneType", "async_batch_bounded": "NoneType",
                       "async_pipeline": "StageCostMemory", "priority": "StageCostMemory"}
    assert BUILTIN_DISPATCHERS["priority"].session_memory(DispatcherConfig(remember_costs=False)) is None


def test_checkpoint_state_carries_the_memory(tmp_path):
    """TrainRun.checkpoint writes the session's memory into state.json; a resume loads it back, and a checkpoint
    written before the memory existed loads as an empty memory."""
    from skyrl_core.checkpoint import load_checkpoint, save_checkpoint
    from skyrl_core.training import TrainRun

    class Backend:
        def save(self, directory):
            (directory / "w.txt").write_text("w")

        def load(self, directory):
            assert (directory / "w.txt").read_text() == "w"

    class Session:
        def __init__(self):
            self.dispatch_memory = StageCostMemory()

    run = TrainRun(Config(), tmp_path)
    run.backend, run.session, run.step, run._cursor_done = Backend(), Session(), 3, 6
    run.session.dispatch_memory.record("gsm8k:1#00", {"init": 3.0, "run": 9.0, "eval": 1.0})
    path = run.checkpoint()
    state = load_checkpoint(path, Backend())
    assert state["cursor"] == 6 and state["step"] == 3
    resumed = TrainRun(Config(), tmp_path, resume=True)
    resumed.session = Session()
    resumed._restore_dispatch_memory(state)
    restored = resumed.session.dispatch_memory
    assert restored.expected("gsm8k:1#00") == pytest.approx(13.0) and restored.count("gsm8k:1#00") == 1
    old = save_checkpoint(tmp_path / "old", 1, Backend(), {"cursor": 2})
    resumed._restore_dispatch_memory(load_checkpoint(old, Backend()))
    assert len(resumed.session.dispatch_memory) == 0 and resumed.session.dispatch_memory.mean_expected() is None
