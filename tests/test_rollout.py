"""RolloutSession: registry-built tasks, tools, runtimes and verifiers, run through a registered dispatcher with
the real hf engine and the real sandbox; each trajectory's failure stays its own."""

from __future__ import annotations

import asyncio
from pathlib import Path

import attrs
import pytest

from skyrl_core import hookimpl
from skyrl_core.config import Config, DispatcherConfig, TaskConfig, load_config
from skyrl_core.dispatchers import Dispatcher
from skyrl_core.errors import UnknownComponentError
from skyrl_core.inference.base import GenerationOutput
from skyrl_core.rollout import RolloutSession
from skyrl_core.default_plugins.runtimes.sandbox import LocalSandbox
from skyrl_core.runtime import RuntimeSpec
from skyrl_core.tasks import DataSpec, Instance, Task, VerifierResult
from test_agent import EngineFaultInjector, ScriptedReplyInjector, call

pytestmark = pytest.mark.timeout(300)

QUESTIONS = [("a", "What is 48 + 24?", "72"), ("b", "What is 2 + 3?", "5"), ("c", "FAIL: what is 1 + 1?", "2")]
WORKSPACES: list[Path] = []


def load_arith(spec: DataSpec) -> list[Instance]:
    return [Instance(id=i, data={"question": q, "answer": a}) for i, q, a in QUESTIONS]


def arith_builder(instance: Instance, task: Task) -> list[dict]:
    return [{"role": "system", "content": "Compute with python, then call finish."},
            {"role": "user", "content": instance.data["question"]}]


async def workspace_verifier(trajectory, runtime, instance):
    """Reward 1 when the answer is right; also proves the verifier sees the trajectory's live runtime."""
    WORKSPACES.append(runtime.workspace)
    assert runtime.workspace.is_dir()
    return VerifierResult(reward=float(str(trajectory.answer) == instance.data["answer"]),
                          metrics={"answered": trajectory.answer is not None})


def raising_verifier(trajectory, runtime, instance):
    raise KeyError("expected field 'solution' missing")


VERIFIER_THREADS: list[str] = []


class TextOnlyParser:
    """A parser that reads every reply as plain text (no tool calls). A reply shaped like a call (a
    ``<tool_call>`` tag) is then answered with an observation saying it was not read, never a silent stop."""

    name = "text_only"

    def parse(self, text, finish_reason="stop"):
        from skyrl_core.default_plugins.parsers import ParseResult

        return ParseResult(content=text)


def bad_reward_verifier(trajectory, runtime, instance):
    """Rewards that would poison the group's advantages: NaN, +inf, a string, None."""
    return {"a": VerifierResult(reward=float("nan")), "b": float("inf"), "c": VerifierResult(reward="1")}[instance.id]


def outcome_verifier(trajectory, runtime, instance):
    """One verdict per outcome of the contract: a is scored 1, b tampered (reward 1 asked, 0 given), c unverifiable."""
    return {"a": VerifierResult(reward=1.0),
            "b": VerifierResult(reward=1.0, outcome="tampered", reason="runner shadowed by ./pytest.py"),
            "c": VerifierResult.unverifiable("environment did not build: pip exited 1")}[instance.id]


def blocking_verifier(trajectory, runtime, instance):
    """A synchronous verifier that blocks for 1 s (as a subprocess-based test run does)."""
    import threading
    import time

    VERIFIER_THREADS.append(threading.current_thread().name)
    time.sleep(1.0)
    return 1.0


class BrokenRuntime(LocalSandbox):
    name = "broken_rt"

    async def start(self) -> None:
        raise OSError("no space left on device (injected)")


class SequentialDispatcher(Dispatcher):
    """A tiny test dispatcher: one trajectory at a time, each stage in turn, release always."""

    name = "sequential_test"

    async def dispatch(self, trajectories, stages):
        for traj in trajectories:
            try:
                for stage in (stages.init, stages.run, stages.eval):
                    await stage(traj)
            except Exception as exc:
                traj.fail("error_run", f"{type(exc).__name__}: {exc}")
            finally:
                await stages.release(traj)
        return {"dispatcher": self.name, "n_trajectories": len(trajectories)}


class FakePlugin:
    @hookimpl
    def register_tasks(self, register):
        register(Task(name="arith", description="tiny sums", load=load_arith, instruction_builder="arith",
                      tools=("python", "finish"), verifier="arith_check", runtime="sandbox"))

        register(Task(name="arith_text", description="tiny sums, calls read as plain text", load=load_arith,
                      instruction_builder="arith", tools=("python", "finish"), verifier="arith_check",
                      runtime="sandbox"))

    @hookimpl
    def register_parsers(self, register):
        register(TextOnlyParser())

    @hookimpl
    def register_instruction_builders(self, register):
        register(arith_builder, name="arith")

    @hookimpl
    def register_verifiers(self, register):
        register(workspace_verifier, name="arith_check")
        register(raising_verifier, name="raises")
        register(bad_reward_verifier, name="bad_reward")
        register(blocking_verifier, name="blocking")
        register(outcome_verifier, name="outcomes")

    @hookimpl
    def register_runtimes(self, register):
        register(BrokenRuntime)

    @hookimpl
    def register_dispatchers(self, register):
        register(SequentialDispatcher)


@pytest.fixture
def registry(plugins):
    plugins.register_plugin(FakePlugin(), "fake-rollout-plugin")
    return plugins.registry


@pytest.fixture(scope="module")
def engine():
    from skyrl_core.default_plugins.engines.hf import HFEngine

    eng = HFEngine(model="smollm2-135m-instruct", max_batch=8, device="cpu")
    yield eng
    asyncio.run(eng.close())


class AnswerFromPrompt(ScriptedReplyInjector):
    """Replies with a python call, then finish with the sum asked in the prompt (solving it for real). The
    real engine runs one token per call; the reply is chosen per call (trajectories run concurrently)."""

    def __init__(self, inner, run_model: bool = True):
        super().__init__(inner, [""], run_model=run_model)

    async def generate(self, input_ids, sampling):
        text = self.tokenizer.decode(input_ids)
        question = text.rsplit("hat is ", 1)[-1].split("?")[0]
        if "<|im_start|>tool" in text:
            reply = call("finish", answer=str(eval(question)))
        else:
            reply = call("python", code=f"print({question})")
        if self.run_model:
            await self.inner.generate(input_ids, attrs.evolve(sampling, max_tokens=1))
        ids = self.tokenizer(reply, add_special_tokens=False)["input_ids"]
        ids.append(self.tokenizer.convert_tokens_to_ids("<|im_end|>"))
        return GenerationOutput(output_ids=ids, output_logprobs=[0.0] * len(ids), finish_reason="stop")


def config(**kw) -> Config:
    tasks = kw.pop("tasks", [TaskConfig(name="arith")])
    cfg = Config(tasks=tasks, dispatcher=DispatcherConfig(type=kw.pop("dispatcher", "async_batch_bounded"),
                                                          max_parallel_agents=8))
    cfg.agent.max_turns = 3
    cfg.sampling.temperature = 0.0
    cfg.sampling.max_tokens = 16
    return attrs.evolve(cfg, **kw)


@pytest.mark.slow
async def test_rollout_groups_samples_and_verifies_in_the_live_runtime(registry, engine):
    WORKSPACES.clear()
    session = await RolloutSession.create(config(), engine=AnswerFromPrompt(engine), registry=registry)
    items = session.load_instances("eval")
    assert [inst.id for _, inst in items] == ["a", "b", "c"]
    trajs, metrics = await session.rollout(items[:2], n_samples=2)
    assert [t.group_id for t in trajs] == ["arith:a", "arith:a", "arith:b", "arith:b"]
    assert [t.sample_index for t in trajs] == [0, 1, 0, 1]
    for t in trajs:
        assert t.finish_reason == "finished", t.error
        assert t.reward == 1.0 and t.metrics["answered"]
        assert t.tool_calls == {"python": 1, "finish": 1}
        assert len(t.transitions) == 2 and set(t.timing) == {"init", "run", "eval"}
    assert metrics["n_ok"] == 4 and metrics["runtime_releases"] == 4
    # release closed every runtime: the workspaces the verifier saw are gone
    assert len(WORKSPACES) == 4 and not any(w.exists() for w in WORKSPACES)
    await session.close()


@pytest.mark.slow
async def test_a_failing_engine_call_ends_only_its_trajectory(registry, engine):
    class FailOnMarkedPrompt(EngineFaultInjector):
        async def generate(self, input_ids, sampling):
            if "FAIL" in self.tokenizer.decode(input_ids):
                raise RuntimeError("worker crashed (injected)")
            return await self.inner.generate(input_ids, sampling)

    session = await RolloutSession.create(config(), engine=FailOnMarkedPrompt(AnswerFromPrompt(engine), "raise"),
                                          registry=registry)
    trajs, metrics = await session.rollout(session.load_instances("eval"), n_samples=1)
    by_id = {t.instance_id: t for t in trajs}
    assert by_id["c"].finish_reason == "error_run" and by_id["c"].masked
    assert "worker crashed (injected)" in by_id["c"].error and by_id["c"].reward == 0.0
    assert by_id["a"].reward == 1.0 and by_id["b"].reward == 1.0
    assert metrics["runtime_releases"] == 3


@pytest.mark.slow
async def test_task_overrides_runtime_verifier_tools_and_a_plugin_dispatcher(registry, engine):
    # a runtime that cannot start: error_init for each trajectory, never the batch; released all the same
    cfg = config(tasks=[TaskConfig(name="arith", runtime=RuntimeSpec(type="broken_rt"))],
                 dispatcher="sequential_test")
    session = await RolloutSession.create(cfg, engine=AnswerFromPrompt(engine), registry=registry)
    done = []
    session.on_trajectory_done = done.append
    trajs, metrics = await session.rollout(session.load_instances("eval")[:2], n_samples=1)
    # the plugin dispatcher's metrics are passed on as they are (it keeps no session memory: no cost counts)
    assert metrics == {"dispatcher": "sequential_test", "n_trajectories": 2}
    assert session.dispatch_memory is None
    assert [t.finish_reason for t in trajs] == ["error_run", "error_run"]
    assert all("no space left on device" in t.error for t in trajs)
    assert done == trajs

    # verifier override that raises: error_eval from the real dispatcher; the rollout itself finished
    cfg = config(tasks=[TaskConfig(name="arith", verifier="raises")])
    session = await RolloutSession.create(cfg, engine=AnswerFromPrompt(engine), registry=registry)
    trajs, _ = await session.rollout(session.load_instances("eval")[:1], n_samples=1)
    assert trajs[0].finish_reason == "error_eval" and "solution" in trajs[0].error
    assert trajs[0].answer == "72"

    # tools override: only finish is offered (the python call is then an unknown tool, corrected)
    cfg = config(tasks=[TaskConfig(name="arith", tools=["finish"])])
    session = await RolloutSession.create(cfg, engine=AnswerFromPrompt(engine), registry=registry)
    trajs, _ = await session.rollout(session.load_instances("eval")[:1], n_samples=1)
    assert "no tool named 'python'" in trajs[0].messages[3]["content"]
    assert "Valid tools: finish." in trajs[0].messages[3]["content"]


async def test_instruction_builder_override_and_system_prompt(registry, engine):
    cfg = config(tasks=[TaskConfig(name="arith", instruction_builder="gsm8k")])
    cfg.agent.system_prompt = "Be exact."
    session = await RolloutSession.create(cfg, engine=AnswerFromPrompt(engine, run_model=False), registry=registry)
    trajs, _ = await session.rollout(session.load_instances("eval")[:1], n_samples=1)
    system, user = trajs[0].messages[:2]
    assert system["role"] == "system" and system["content"].startswith("Be exact.\n\n# Tools")
    assert user == {"role": "user", "content": "What is 48 + 24?"}
    assert trajs[0].reward == 1.0 and trajs[0].finish_reason == "finished"


async def test_unknown_components_fail_at_create_naming_them(registry, engine):
    with pytest.raises(UnknownComponentError, match="no tool named 'calculator'.*registered: .*finish"):
        await RolloutSession.create(config(tasks=[TaskConfig(name="arith", tools=["calculator"])]), engine=engine,
                                    registry=registry)
    with pytest.raises(UnknownComponentError, match="no tool-call parser named 'xml'"):
        cfg = config()
        cfg.agent.parser = "xml"
        await RolloutSession.create(cfg, engine=engine, registry=registry)


async def test_gsm8k_split_and_engine_from_the_registry(plugins):
    cfg = load_config(None, ["data.limit=3", "engine.max_batch=2"])
    session = await RolloutSession.create(cfg, registry=plugins.registry)
    try:
        items = session.load_instances("train")
        assert len(items) == 3 and items[0][0].name == "gsm8k"
        assert "Janet" in items[0][1].data["question"]  # the GSM8K test split's first problem
        assert session.engine.name == "hf" and session.chat.tools_in_template is False
    finally:
        await session.close()


async def test_non_finite_and_non_numeric_rewards_end_their_trajectory_error_eval(registry, engine):
    cfg = config(tasks=[TaskConfig(name="arith", verifier="bad_reward")])
    session = await RolloutSession.create(cfg, engine=AnswerFromPrompt(engine, run_model=False), registry=registry)
    trajs, _ = await session.rollout(session.load_instances("eval"), n_samples=2)
    by_id = {t.instance_id: t for t in trajs}
    assert {t.finish_reason for t in trajs} == {"error_eval"}
    assert all(t.masked and t.reward == 0.0 for t in trajs)
    assert "verifier 'bad_reward' returned a non-finite reward nan" in by_id["a"].error
    assert "non-finite reward inf" in by_id["b"].error
    assert "returned reward '1' (str)" in by_id["c"].error
    # the step goes on: the batch builds, with finite advantages
    from skyrl_core.postprocess import build_training_batch

    batch = build_training_batch(trajs)
    assert batch.metrics["failed_trajectories"] == 6.0 and batch.metrics["reward_mean"] == 0.0


async def test_verifier_outcomes_scored_tampered_and_unverifiable(registry, engine):
    """The outcome contract (docs/runtimes.md): tampered trains at reward 0 with its reason; unverifiable is
    error_eval, loss-masked and counted, never a 0 trained as a negative example."""
    from skyrl_core.default_plugins.eval.run import eval_metrics
    from skyrl_core.postprocess import build_training_batch
    from skyrl_core.default_plugins.trainer.runlog import trajectory_summary

    cfg = config(tasks=[TaskConfig(name="arith", verifier="outcomes")])
    session = await RolloutSession.create(cfg, engine=AnswerFromPrompt(engine, run_model=False), registry=registry)
    trajs, _ = await session.rollout(session.load_instances("eval"), n_samples=2)
    by_id = {t.instance_id: t for t in trajs}
    a, b, c = by_id["a"], by_id["b"], by_id["c"]
    assert (a.reward, a.masked, a.metrics["outcome"]) == (1.0, False, "scored")
    assert (b.reward, b.masked, b.finish_reason) == (0.0, False, "finished")
    assert b.metrics["outcome"] == "tampered" and "pytest.py" in b.metrics["tampered"]
    assert (c.finish_reason, c.masked, c.reward, c.metrics["outcome"]) == ("error_eval", True, 0.0, "unverifiable")
    assert "environment did not build" in c.error
    assert eval_metrics(trajs, 1.0)["outcomes"] == {"scored": 2, "tampered": 2, "unverifiable": 2}
    summary = trajectory_summary(trajs)
    assert summary["outcome/unverifiable"] == 2.0 and summary["outcome/tampered"] == 2.0
    batch = build_training_batch(trajs, skip_zero_advantage=False)  # each group's rewards are equal
    masks = {d.trajectory_id.split(":")[1].split("#")[0]: d.loss_mask for d in batch.data}
    assert masks == {"a": 1, "b": 1, "c": 0}
    await session.close()


async def test_a_synchronous_verifier_runs_off_the_event_loop(registry, engine):
    import threading
    import time

    VERIFIER_THREADS.clear()
    cfg = config(tasks=[TaskConfig(name="arith", verifier="blocking")])
    session = await RolloutSession.create(cfg, engine=AnswerFromPrompt(engine, run_model=False), registry=registry)
    ticks: list[float] = []

    async def ticker():
        while True:
            ticks.append(time.perf_counter())
            await asyncio.sleep(0.05)

    tick = asyncio.create_task(ticker())
    t0 = time.perf_counter()
    trajs, _ = await session.rollout(session.load_instances("eval"), n_samples=1)
    wall = time.perf_counter() - t0
    tick.cancel()
    assert [t.reward for t in trajs] == [1.0, 1.0, 1.0]
    assert len(VERIFIER_THREADS) == 3 and threading.main_thread().name not in VERIFIER_THREADS
    # bounds a blocking verifier cannot meet, with no margin asked of a loaded machine: on the loop, three 1 s
    # sleeps take at least 3 s in all and stop the ticker for at least 1 s each (CI under load saw a 0.78 s gap)
    assert wall < 3.0  # the three verifiers overlapped
    gaps = [b - a for a, b in zip(ticks, ticks[1:])]
    assert max(gaps) < 1.0  # the loop kept running while they blocked


async def test_every_sample_of_every_round_gets_its_own_reproducible_seed(registry, engine):
    from skyrl_core.rollout import sample_seed, sampling_params

    class RecordSeeds(AnswerFromPrompt):
        def __init__(self, inner):
            super().__init__(inner, run_model=False)
            self.seeds: list[int] = []

        async def generate(self, input_ids, sampling):
            self.seeds.append(sampling.seed)
            return await super().generate(input_ids, sampling)

    cfg = config()
    eng = RecordSeeds(engine)
    session = await RolloutSession.create(cfg, engine=eng, registry=registry)
    items = session.load_instances("eval")
    sampling = sampling_params(cfg, seed=7)
    per_round = {}
    for name in ("step-1", "step-2", "step-1"):
        eng.seeds.clear()
        trajs, _ = await session.rollout(items, n_samples=2, sampling=sampling, seed_round=name)
        per_trajectory = {(t.group_id, t.sample_index) for t in trajs}
        assert len(per_trajectory) == 6
        seeds = set(eng.seeds)
        assert len(seeds) == 6  # one seed per (instance, sample); both LLM calls of a trajectory share it
        assert seeds == {sample_seed(7, name, g, k) for g, k in per_trajectory}
        per_round.setdefault(name, []).append(seeds)
    assert per_round["step-1"][0] == per_round["step-1"][1]  # reproducible
    assert not per_round["step-1"][0] & per_round["step-2"][0]  # a new step draws new seeds


async def test_parser_auto_picks_the_models_format(registry, engine, caplog):
    cfg = config()
    cfg.agent.parser = "auto"
    with caplog.at_level("INFO", logger="skyrl_core.rollout"):
        session = await RolloutSession.create(cfg, engine=engine, registry=registry)
    # SmolLM2's template renders no call markers; its name is in the model table
    await session.close()
    assert session.parser.name == "hermes"
    assert "agent.parser auto: using parser 'hermes' (the model name" in caplog.text


async def test_a_stand_in_parser_names_the_parser_the_model_uses(plugins, engine, caplog):
    """``auto`` is no special name: any registered parser with the contract's ``for_model`` is a stand-in that
    the session replaces by the parser it names for the model (the built-in ``auto`` is one)."""
    from skyrl_core.contracts import member

    class BySize:
        name = "by_size"
        parse = staticmethod(lambda text, finish_reason: None)
        for_model = staticmethod(lambda tokenizer: ("json", f"{len(tokenizer)} tokens"))

    class StandIn:
        @hookimpl
        def register_parsers(self, register):
            register(BySize())

    plugins.register_plugin(FakePlugin(), "fake-rollout-plugin")
    plugins.register_plugin(StandIn(), "stand-in")
    assert member(plugins.registry.get("parsers", "auto"), "parsers", "for_model") is not None
    cfg = config()
    cfg.agent.parser = "by_size"
    with caplog.at_level("INFO", logger="skyrl_core.rollout"):
        session = await RolloutSession.create(cfg, engine=engine, registry=plugins.registry)
    await session.close()
    assert type(session.parser).__name__ == "JsonParser"
    assert f"agent.parser by_size: using parser 'json' ({len(engine.tokenizer)} tokens)" in caplog.text


async def test_each_task_has_its_own_parser_agent_and_sampling_settings(registry, engine):
    """One run, two tasks: the second reads calls with another parser, has its own system prompt and samples
    at most 5 tokens; the first keeps the run's settings."""

    class RecordMaxTokens(AnswerFromPrompt):
        def __init__(self, inner):
            super().__init__(inner, run_model=False)
            self.seen: list[tuple[str, int]] = []

        async def generate(self, input_ids, sampling):
            text = self.tokenizer.decode(input_ids)
            self.seen.append(("two" if "Task two." in text else "one", sampling.max_tokens))
            return await super().generate(input_ids, sampling)

    cfg = config(tasks=[TaskConfig(name="arith"),
                        TaskConfig(name="arith_text", parser="text_only", agent={"system_prompt": "Task two."},
                                   sampling={"max_tokens": 5})])
    eng = RecordMaxTokens(engine)
    session = await RolloutSession.create(cfg, engine=eng, registry=registry)
    items = session.load_instances("eval")
    assert [tc.name for tc, _ in items] == ["arith"] * 3 + ["arith_text"] * 3
    trajs, _ = await session.rollout([items[0], items[3]], n_samples=1)
    one, two = trajs
    assert one.task == "arith" and one.finish_reason == "finished" and one.reward == 1.0
    assert one.tool_calls == {"python": 1, "finish": 1}
    # the call text the task's parser does not read is answered (issue #32), until the task's turns run out
    assert two.task == "arith_text" and two.finish_reason == "max_turns" and two.tool_calls == {}
    assert two.metrics["unread_calls"] == 3 and "Hermes <tool_call> format" in two.messages[3]["content"]
    assert two.messages[0]["content"].startswith("Task two.") and not one.messages[0]["content"].startswith("Task")
    assert set(eng.seen) == {("one", 16), ("two", 5)}

    from skyrl_core.default_plugins.trainer.runlog import trajectory_summary

    summary = trajectory_summary(trajs)
    assert summary["reward_mean"] == 0.5
    assert summary["task/arith/pass_rate"] == 1.0 and summary["task/arith_text/pass_rate"] == 0.0
    assert summary["task/arith_text/finish/max_turns"] == 1.0
