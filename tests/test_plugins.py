"""The plugin manager: hooks, attribution, clashes, allow-list, broken plugins, real entry points."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import click
import pytest

from skyrl_core import Task, Tool, ToolResult, VerifierResult, hookimpl
from skyrl_core.backends import Backend
from skyrl_core.default_plugins.parsers import ParseResult
from skyrl_core.dispatchers import Dispatcher
from skyrl_core.errors import ConfigError, RegistrationError, ToolSchemaError, UnknownComponentError
from skyrl_core.plugins import KINDS
from skyrl_core.runtime import ExecResult, Runtime
from skyrl_core.tasks import DataSpec, Instance

FIXTURE = Path(__file__).parent / "fixtures" / "skyrl-fixture-plugin"


def _tool(name: str) -> Tool:
    return Tool(name=name, description=f"{name} tool",
                parameters={"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]},
                handler=lambda args, ctx: ToolResult(output=str(args["x"] * 2)))


class FakeDispatcher(Dispatcher):
    name = "fake_dispatcher"

    async def dispatch(self, trajectories, stages):
        return {}


class FakeRuntime(Runtime):
    name = "fake_runtime"

    async def start(self):
        pass

    async def exec(self, command, timeout_s=30.0, stdin=None, env=None):
        return ExecResult(exit_code=0, output="")

    async def close(self):
        pass


class FakeBackend(Backend):
    name = "fake_backend"

    async def train_step(self, batch):
        return {}

    async def sync_weights(self, engine):
        pass

    def save(self, directory):
        pass

    def load(self, directory):
        pass


class FakeParser:
    name = "fake_parser"

    def parse(self, text, finish_reason):
        return ParseResult(content=text)


class FakePlugin:
    """Registers one thing of every kind, so each hook is exercised through the public mechanism."""

    @hookimpl
    def register_tools(self, register):
        register(_tool("double"))

    @hookimpl
    def register_instruction_builders(self, register):
        register(lambda instance, task: [{"role": "user", "content": instance.data["q"]}], name="fake_builder")

    @hookimpl
    def register_verifiers(self, register):
        register(lambda traj, runtime, instance: VerifierResult(reward=0.5), name="fake_verifier")

    @hookimpl
    def register_tasks(self, register):
        register(Task(name="fake_task", description="a fake task",
                      load=lambda spec: [Instance(id=str(i), data={"q": f"q{i}"}) for i in range(5)],
                      instruction_builder="fake_builder", tools=("double",), verifier="fake_verifier"))

    @hookimpl
    def register_dispatchers(self, register):
        register(FakeDispatcher)

    @hookimpl
    def register_inference_engines(self, register):
        register(lambda config: "engine-for-" + config, name="fake_engine")

    @hookimpl
    def register_runtimes(self, register):
        register(FakeRuntime)

    @hookimpl
    def register_backends(self, register):
        register(FakeBackend)

    @hookimpl
    def register_parsers(self, register):
        register(FakeParser())

    @hookimpl
    def register_commands(self, register):
        register(click.Command("fake-cmd", callback=lambda: click.echo("fake ran")), name="fake-cmd")

    @hookimpl
    def register_advantage_estimators(self, register):
        # no baseline: the reward minus a fixed 0.5 (a plugin's own estimator, not a built-in's copy)
        register(lambda rewards, groups, std_normalize: [r - 0.5 for r in rewards], name="minus_half")

    @hookimpl
    def register_policy_losses(self, register):
        def sum_loss(logprobs, old_logprobs, advantages, mask, config, rollout_logprobs=None):
            return -(advantages * logprobs * mask).sum(), {"sum_loss_tokens": float(mask.sum())}

        register(sum_loss, name="sum_loss")

    @hookimpl
    def register_loggers(self, register):
        register(MemoryLogger, name="memory")

    @hookimpl
    def register_eval_writers(self, register):
        def answers_csv(output_dir, trajectories, config):
            if any(t.instance_id == "boom" for t in trajectories):
                raise OSError("the writer's disk is full")
            path = output_dir / "answers.csv"
            path.write_text("".join(f"{t.instance_id},{t.reward},{config.model}\n" for t in trajectories))
            return {"answers": path}

        register(answers_csv, name="answers_csv")

    @hookimpl
    def register_placements(self, register):
        from skyrl_core.default_plugins.runtimes.placement import LocalPlacement

        register(LocalPlacement(), name="fake_placement")

    @hookimpl
    def register_config_checks(self, register):
        def no_huge_batches(config):
            if (size := config.train.batch_size) > 4096:
                raise ConfigError(f"config key 'train.batch_size' is at most 4096 here; got {size}")

        register(no_huge_batches, name="fake_check")

    @hookimpl
    def register_config_sources(self, register):
        register(lambda name: None, name="fake_configs")

    # named other than the ``default`` / ``async`` the core asks for, so the built-ins stay in use
    @hookimpl
    def register_chat_formats(self, register):
        from skyrl_core.default_plugins.chat.template import ChatFormat

        register(ChatFormat, name="fake_chat")

    @hookimpl
    def register_engine_builders(self, register):
        register(lambda config, registry: "engine-of-" + config, name="fake_builder")

    @hookimpl
    def register_harness_runners(self, register):
        from skyrl_core.default_plugins.engines.harness import HarnessRunner

        register(HarnessRunner, name="fake_runner")

    @hookimpl
    def register_format_detectors(self, register):
        register(lambda text, tools: ("fake_parser", "fake format") if "<<" in text else None, name="fake_detector")

    @hookimpl
    def register_async_loops(self, register):
        from skyrl_core.default_plugins.async_training.loop import AsyncTraining

        register(AsyncTraining(), name="fake_async")


class MemoryLogger:
    """A logger plugin: keeps the records it is given (and can be told to fail)."""

    records: list = []

    def __init__(self, output, config):
        self.output = output
        MemoryLogger.records = []

    def log(self, record):
        if record.get("fail_logger"):
            raise OSError("disk of the logging service full")
        MemoryLogger.records.append(record)

    def close(self):
        MemoryLogger.records.append("closed")


@pytest.fixture
def fake(plugins):
    plugins.register_plugin(FakePlugin(), "fake")
    try:
        yield plugins
    finally:
        plugins.unregister_plugin("fake")


def test_registry_records_which_plugin_registered_what(fake):
    reg = fake.registry
    info = fake.infos["fake"]
    assert info.error is None
    assert sorted(info.hooks) == sorted(hook for hook, _ in KINDS.values())
    assert info.capabilities["tools"] == ["double"]
    assert reg.entries["tools"]["double"].plugin == "fake"
    assert reg.entries["tools"]["python"].plugin == "builtin:generic_tools"


def test_hook_register_tools(fake):
    tool = fake.registry.get("tools", "double")
    assert tool.description == "double tool"
    import asyncio

    result = asyncio.run(tool.call({"x": 21}, None))
    assert result.output == "42"


def test_hook_register_instruction_builders(fake):
    builder = fake.registry.get("instruction_builders", "fake_builder")
    assert builder(Instance(id="1", data={"q": "why?"}), None) == [{"role": "user", "content": "why?"}]


def test_hook_register_verifiers(fake):
    verifier = fake.registry.get("verifiers", "fake_verifier")
    assert verifier(None, None, None).reward == 0.5


def test_hook_register_tasks(fake):
    task = fake.registry.get("tasks", "fake_task")
    assert [i.id for i in task.select(DataSpec(limit=2, offset=1))] == ["1", "2"]
    shuffled = [i.id for i in task.select(DataSpec(shuffle=True, seed=3))]
    assert sorted(shuffled) == ["0", "1", "2", "3", "4"] and shuffled == [i.id for i in task.select(DataSpec(shuffle=True, seed=3))]


def test_hook_register_dispatchers(fake):
    assert fake.registry.get("dispatchers", "fake_dispatcher").__name__ == "FakeDispatcher"


def test_hook_register_inference_engines(fake):
    assert fake.registry.get("inference_engines", "fake_engine")("cfg") == "engine-for-cfg"


def test_hook_register_runtimes(fake):
    assert fake.registry.get("runtimes", "fake_runtime").__name__ == "FakeRuntime"
    assert fake.registry.entries["runtimes"]["sandbox"].plugin == "builtin:runtimes"


def test_hook_register_backends(fake):
    assert fake.registry.get("backends", "fake_backend").__name__ == "FakeBackend"


def test_hook_register_parsers(fake):
    assert type(fake.registry.get("parsers", "fake_parser")).__name__ == "FakeParser"


def test_hook_register_commands(fake):
    from click.testing import CliRunner

    from skyrl_core.cli import build_cli
    from skyrl_core import plugins as plugins_mod

    plugins_mod._PLUGINS = fake  # the CLI reads the process-wide manager
    result = CliRunner().invoke(build_cli(), ["fake-cmd"])
    assert result.exit_code == 0, result.output
    assert result.output.strip() == "fake ran"


def test_hook_register_advantage_estimators(fake):
    from skyrl_core.postprocess import build_training_batch
    from skyrl_core.transitions import Trajectory, Transition

    assert fake.registry.names("advantage_estimators") == ["grpo", "minus_half", "none", "rloo"]
    calls = [Transition(input_ids=[1, 2], output_ids=[3], output_logprobs=[-0.1], finish_reason="stop")]
    trajs = [Trajectory(instance_id="a", sample_index=i, task="t", group_id="a", transitions=calls, reward=r)
             for i, r in enumerate([1.0, 0.0])]
    batch = build_training_batch(trajs, advantage="minus_half")
    assert [d.advantage for d in batch.data] == [0.5, -0.5]
    assert [d.advantage for d in build_training_batch(trajs, advantage="rloo").data] == [1.0, -1.0]
    with pytest.raises(UnknownComponentError, match="no advantage estimator named 'ppo'.*minus_half"):
        build_training_batch(trajs, advantage="ppo")


def test_hook_register_policy_losses(fake):
    import torch

    from skyrl_core.config import BackendConfig
    from skyrl_core.default_plugins.trainer.local import resolve_policy_loss

    assert fake.registry.names("policy_losses") == ["decoupled_ppo", "gspo", "ppo_clip", "reinforce", "sum_loss"]
    loss_fn = resolve_policy_loss("sum_loss")
    lp = torch.tensor([[-1.0, -2.0]])
    loss, m = loss_fn(lp, lp, torch.ones(1, 2), torch.tensor([[1.0, 0.0]]), BackendConfig())
    assert float(loss) == 1.0 and m == {"sum_loss_tokens": 1.0}
    builtin, _ = resolve_policy_loss("ppo_clip")(lp, lp, torch.ones(1, 2), torch.ones(1, 2), BackendConfig())
    assert float(builtin) == pytest.approx(-1.0)  # on-policy: -mean(A * ratio 1)
    with pytest.raises(UnknownComponentError, match="no policy loss named 'dpo'.*gspo, ppo_clip"):
        resolve_policy_loss("dpo")


def test_hook_register_loggers(fake, tmp_path):
    from skyrl_core.config import Config, LoggingConfig
    from skyrl_core.default_plugins.trainer.metrics import read_jsonl
    from skyrl_core.default_plugins.trainer.runlog import MetricsLogger

    assert fake.registry.names("loggers") == ["jsonl", "memory", "plot", "run", "tensorboard", "wandb"]
    logger = MetricsLogger(tmp_path, Config(logging=LoggingConfig(loggers=["memory"])))
    logger.log({"kind": "train", "step": 1, "reward_mean": 0.5})
    logger.log({"kind": "train", "step": 2, "fail_logger": True})  # the plugin's sink fails: dropped, run goes on
    logger.log({"kind": "train", "step": 3, "reward_mean": 0.7})
    logger.close()
    assert MemoryLogger.records == [{"kind": "train", "step": 1, "reward_mean": 0.5}]
    assert [r["step"] for r in read_jsonl(tmp_path / "metrics.jsonl")] == [1, 2, 3]
    with pytest.raises(UnknownComponentError, match="no logger named 'mlflow'"):
        MetricsLogger(tmp_path, Config(logging=LoggingConfig(loggers=["mlflow"])))
    with pytest.raises(ConfigError, match="'logging.loggers' names 'run', the run's own logger"):
        MetricsLogger(tmp_path, Config(logging=LoggingConfig(loggers=["run"])))


def test_hook_register_config_checks(fake):
    """A registered check runs when a config loads, and its ConfigError is the load's; the built-in engines' check
    of engine.replicas is registered by that built-in, not called by the core's config loader."""
    from skyrl_core.config import config_from_dict

    assert config_from_dict({"train": {"batch_size": 4096}}).train.batch_size == 4096
    with pytest.raises(ConfigError, match="'train.batch_size' is at most 4096 here; got 4097"):
        config_from_dict({"train": {"batch_size": 4097}})
    assert fake.registry.entries["config_checks"]["engine_replicas"].plugin == "builtin:engines"
    with pytest.raises(ConfigError, match="config key 'engine.replicas' must be at least 1; got 0"):
        config_from_dict({"engine": {"replicas": 0}})


def test_hook_register_eval_writers(fake, tmp_path):
    from skyrl_core.config import Config
    from skyrl_core.default_plugins.eval.run import write_outputs
    from skyrl_core.transitions import Trajectory

    assert "answers_csv" in fake.registry.names("eval_writers")
    trajs = [Trajectory(instance_id=i, sample_index=0, task="t", group_id=i, reward=r) for i, r in (("a", 1.0), ("b", 0.0))]
    paths = write_outputs(tmp_path, trajs, {}, config=Config(model="m"))
    assert paths["answers"].read_text() == "a,1.0,m\nb,0.0,m\n"
    # a writer that raises is logged and skipped: the eval keeps its own files
    boom = [Trajectory(instance_id="boom", sample_index=0, task="t", group_id="boom")]
    paths = write_outputs(tmp_path / "boom", boom, {}, config=Config())
    assert "answers" not in paths and paths["trajectories"].exists() and paths["metrics"].exists()


def test_unknown_component_error_lists_valid_names(plugins):
    with pytest.raises(UnknownComponentError) as exc:
        plugins.registry.get("tools", "pyhton")
    assert "no tool named 'pyhton'" in str(exc.value) and "python" in str(exc.value) and "finish" in str(exc.value)


def test_two_third_party_plugins_with_one_name_is_an_error_naming_both(plugins):
    class A:
        @hookimpl
        def register_tools(self, register):
            register(_tool("same"))

    class B:
        @hookimpl
        def register_tools(self, register):
            register(_tool("same"))

    plugins.register_plugin(A(), "plugin_a")
    plugins.register_plugin(B(), "plugin_b")
    registry = plugins.registry  # building it no longer raises: every other command still works
    assert "python" in registry.names("tools") and "same" not in registry.names("tools")
    with pytest.raises(RegistrationError) as exc:
        registry.get("tools", "same")  # only the command that needs the clashing name fails
    assert "'plugin_a'" in str(exc.value) and "'plugin_b'" in str(exc.value) and "tool 'same'" in str(exc.value)
    for name in ("plugin_a", "plugin_b"):  # both listings carry the clash, neither claims the name
        info = plugins.infos[name]
        assert any("tool 'same' is registered by two plugins" in p for p in info.problems)
        assert "same" not in info.capabilities["tools"]
        assert "two plugins" in info.to_json()["error"]


def test_a_register_hook_that_raises_is_reported_not_fatal(plugins):
    class HalfBroken:
        @hookimpl
        def register_tools(self, register):
            register(_tool("kept_tool"))
            raise ValueError("config file ~/.half missing")

        @hookimpl
        def register_verifiers(self, register):
            register(lambda t, r, i: 1.0, name="half_verifier")

    plugins.register_plugin(HalfBroken(), "half_broken")
    registry = plugins.registry
    info = plugins.infos["half_broken"]
    assert info.problems == ["plugin 'half_broken' raised in register_tools: ValueError: config file ~/.half "
                             "missing"]
    # what it registered before raising, and its other hooks, stand; the built-ins are untouched
    assert registry.get("tools", "kept_tool").name == "kept_tool"
    assert "half_verifier" in registry.names("verifiers") and "python" in registry.names("tools")
    with pytest.raises(UnknownComponentError) as exc:
        registry.get("tools", "never_registered")
    assert "half_broken' raised in register_tools" in str(exc.value)


def test_skyrl_plugins_lists_a_broken_plugin_with_its_error(plugins):
    from click.testing import CliRunner

    from skyrl_core.cli import build_cli

    class Raises:
        @hookimpl
        def register_tasks(self, register):
            raise RuntimeError("boom at registration")

    plugins.register_plugin(Raises(), "raises_plugin")
    result = CliRunner().invoke(build_cli(), ["plugins", "--all", "--json"])
    assert result.exit_code == 0, result.output
    rows = {row["name"]: row for row in json.loads(result.output)}
    assert rows["raises_plugin"]["error"] == ("plugin 'raises_plugin' raised in register_tasks: RuntimeError: boom "
                                              "at registration")
    assert "error" not in rows["builtin:generic_tools"]
    table = CliRunner().invoke(build_cli(), ["plugins"])
    assert table.exit_code == 0 and "boom at registration" in table.output


def test_third_party_plugin_may_replace_a_builtin(plugins):
    class Override:
        @hookimpl
        def register_tools(self, register):
            register(_tool("python"))

    plugins.register_plugin(Override(), "override")
    entry = plugins.registry.entries["tools"]["python"]
    assert entry.plugin == "override" and entry.replaces == "builtin:generic_tools"
    assert entry.obj.description == "python tool"


def test_hookimpl_with_unknown_argument_is_reported_not_raised(plugins):
    class Bad:
        @hookimpl
        def register_tools(self, register, workspace):
            pass

    info = plugins.register_plugin(Bad(), "bad")
    assert info.error is not None and "workspace" in info.error
    assert plugins.pm.get_plugin("bad") is None
    assert "python" in plugins.registry.names("tools")  # the rest still works


def test_misspelled_hook_is_reported_by_check_pending(plugins):
    class Typo:
        @hookimpl
        def register_tool(self, register):  # missing the 's'
            pass

    info = plugins.register_plugin(Typo(), "typo")
    assert "register_tool" in info.error and "does not exist" in info.error
    assert plugins.pm.get_plugin("typo") is None


def test_registering_a_tool_with_an_invalid_schema_fails_at_construction():
    with pytest.raises(ToolSchemaError) as exc:
        Tool(name="broken", description="", parameters={"type": "object", "properties": {"x": {"type": "integr"}}},
             handler=lambda a, c: "")
    assert "tool 'broken'" in str(exc.value) and "properties/x/type" in str(exc.value)


def test_registering_a_non_tool_is_an_error(plugins):
    class NotATool:
        @hookimpl
        def register_tools(self, register):
            register({"name": "dict_tool"}, name="dict_tool")

    plugins.register_plugin(NotATool(), "not_a_tool")
    assert "dict_tool" not in plugins.registry.names("tools")
    assert plugins.infos["not_a_tool"].problems == [
        "plugin 'not_a_tool' registered tool 'dict_tool' (a dict), which is not a Tool; valid: an instance of "
        "skyrl_core.tools.Tool"]


def test_broken_plugin_import_is_recorded(plugins):
    def loader():
        raise ModuleNotFoundError("No module named 'missing_dep'")

    info = plugins.load_plugin_entry("broken_one", loader, "skyrl-broken-one", "1.0")
    assert info.error == "failed to import: ModuleNotFoundError: No module named 'missing_dep'"
    assert plugins.infos["broken_one"].distribution == "skyrl-broken-one"
    assert "python" in plugins.registry.names("tools")


def test_allow_list_env_var(monkeypatch):
    from skyrl_core import plugins as plugins_mod

    monkeypatch.setenv("SKYRL_LOAD_PLUGINS", "")
    assert plugins_mod._allowed_plugins() == set()
    monkeypatch.setenv("SKYRL_LOAD_PLUGINS", "skyrl-swe, verl")
    assert plugins_mod._allowed_plugins() == {"skyrl-swe", "verl"}
    monkeypatch.delenv("SKYRL_LOAD_PLUGINS")
    assert plugins_mod._allowed_plugins() is None


@pytest.fixture(scope="module")
def installed_fixture_plugin():
    """pip-install the fixture distribution into this environment for real entry-point loading."""
    pip = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", str(FIXTURE)]
    proc = subprocess.run(pip, capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.fail(f"could not pip-install the fixture plugin: {proc.stderr[-2000:]}")
    try:
        yield
    finally:
        subprocess.run([sys.executable, "-m", "pip", "uninstall", "-y", "-q", "skyrl-fixture-plugin"],
                       capture_output=True)


def _skyrl(*args: str, env_extra: dict | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "SKYRL_LOAD_PLUGINS"}
    env.update(env_extra or {})
    return subprocess.run([sys.executable, "-m", "skyrl_core.cli", *args], capture_output=True, text=True, env=env,
                          timeout=120)


def test_real_entry_point_plugin_is_listed(installed_fixture_plugin):
    proc = _skyrl("plugins", "--json")
    assert proc.returncode == 0, proc.stderr
    listing = {p["name"]: p for p in json.loads(proc.stdout)}
    good = listing["fixture_plugin"]
    assert good["distribution"] == "skyrl-fixture-plugin" and good["version"] == "0.0.1"
    assert good["hooks"] == ["register_commands", "register_tools", "register_verifiers"]
    assert good["capabilities"] == {"tools": ["fixture_reverse"], "verifiers": ["fixture_always"],
                                    "commands": ["fixture-hello"]}
    assert "skyrl-fixture-missing-dependency" in listing["fixture_broken"]["error"]
    assert "workspace" in listing["fixture_badhook"]["error"]
    assert not any(p["builtin"] for p in listing.values())


def test_real_plugin_command_and_tool_run(installed_fixture_plugin, tmp_path):
    proc = _skyrl("fixture-hello", "skyrl")
    assert proc.returncode == 0 and proc.stdout.strip() == "fixture says hello to skyrl"
    proc = _skyrl("tools", "run", "fixture_reverse", '{"text": "abc"}', "--workspace", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "cba"


def test_allow_list_excludes_installed_plugin(installed_fixture_plugin):
    proc = _skyrl("plugins", "--json", env_extra={"SKYRL_LOAD_PLUGINS": ""})
    assert json.loads(proc.stdout) == []
    proc = _skyrl("plugins", "--json", env_extra={"SKYRL_LOAD_PLUGINS": "fixture_plugin"})
    assert [p["name"] for p in json.loads(proc.stdout)] == ["fixture_plugin"]


def test_a_scripted_policy_cannot_register_as_an_inference_engine(plugins):
    """A scripted policy is a benchmark fixture (skyrl_core.default_plugins.eval.scripted): the registry refuses it
    as an engine, so `skyrl plugins` never lists it and no config's engine.type can name it; its plugin's other
    hooks stand."""
    from skyrl_core.default_plugins.eval.scripted import ScriptedPolicy

    class Lookup(ScriptedPolicy):
        name = "lookup"

        async def generate(self, input_ids, sampling):
            raise AssertionError("never called")

    class Plugin:
        @hookimpl
        def register_inference_engines(self, register):
            register(Lookup, name="lookup")

        @hookimpl
        def register_tools(self, register):
            register(_tool("kept"))

    plugins.register_plugin(Plugin(), "scripted-plugin")
    reg = plugins.registry
    assert "lookup" not in reg.names("inference_engines") and "kept" in reg.names("tools")
    assert plugins.infos["scripted-plugin"].capabilities["inference_engines"] == []
    assert any("'lookup', a scripted policy" in e for e in plugins.infos["scripted-plugin"].hook_errors)
    with pytest.raises(UnknownComponentError, match="no inference engine named 'lookup'"):
        reg.get("inference_engines", "lookup")


def test_a_training_run_refuses_a_scripted_policy_it_is_handed(tmp_path):
    import asyncio

    from skyrl_core.config import load_config
    from skyrl_core.errors import ConfigError
    from skyrl_core.default_plugins.eval.scripted import ScriptedPolicy
    from skyrl_core.backends import refuse_scripted_policy
    from skyrl_core.training import TrainRun

    class Lookup(ScriptedPolicy):
        name = "lookup"

        async def generate(self, input_ids, sampling):
            raise AssertionError("never called")

    class Session:
        engine = Lookup()

        async def close(self):
            pass

    async def session_factory(config):
        return Session()

    with pytest.raises(ConfigError, match="engine 'lookup' is a scripted policy"):
        asyncio.run(TrainRun(load_config(None, ["train.steps=1"]), tmp_path / "run",
                             session_factory=session_factory).run())
    refuse_scripted_policy(object())  # anything else passes
    with pytest.raises(Exception, match="no weights to update"):
        asyncio.run(Lookup().update_weights({}))


# -- hooks run through pluggy: wrapper hookimpls, tracing, order -------------------------------------------------
class Registers:
    """A third-party plugin registering the tools named, optionally sleeping first or raising after."""

    def __init__(self, *names: str, sleep_s: float = 0.0, fail: bool = False) -> None:
        self.names, self.sleep_s, self.fail = names, sleep_s, fail

    @hookimpl
    def register_tools(self, register):
        import time

        time.sleep(self.sleep_s)
        for name in self.names:
            register(_tool(name))
        if self.fail:
            raise ValueError("the tools' service is down")


def test_a_wrapper_hookimpl_sees_and_filters_what_the_inner_impls_register(plugins):
    """Calling impls by hand (the old code) ran a wrapper's generator never: it could filter nothing."""
    seen = []

    class Gate:
        @hookimpl(wrapper=True)
        def register_tools(self, register):
            result = yield
            seen.append((register.plugin, [e.name for e in register.entries]))
            register.entries[:] = [e for e in register.entries if not e.name.startswith("secret_")]
            for entry in register.entries:  # and alters what stays: every tool gets a 5 s bound
                entry.obj.timeout_s = 5.0
            return result

    plugins.register_plugin(Registers("secret_key", "open_page"), "tools_plugin")
    plugins.register_plugin(Gate(), "gate")
    reg = plugins.registry
    assert ("tools_plugin", ["secret_key", "open_page"]) in seen
    assert ("builtin:generic_tools", ["python", "finish"]) in seen  # it wraps every plugin's impl, one at a time
    assert "secret_key" not in reg.names("tools") and reg.get("tools", "open_page").timeout_s == 5.0
    assert reg.entries["tools"]["open_page"].plugin == "tools_plugin"  # credited to the plugin that registered it
    assert plugins.infos["tools_plugin"].capabilities["tools"] == ["open_page"]
    assert plugins.infos["gate"].hooks == ["register_tools"] and plugins.infos["gate"].capabilities["tools"] == []


def test_a_wrapper_hookimpl_times_each_plugins_registration(plugins):
    import time

    took: dict[str, float] = {}

    class Timer:
        @hookimpl(wrapper=True, tryfirst=True)
        def register_tools(self, register):
            start = time.perf_counter()
            try:
                return (yield)
            finally:
                took[register.plugin] = time.perf_counter() - start

    plugins.register_plugin(Registers("slow_tool", sleep_s=0.05), "slow")
    plugins.register_plugin(Timer(), "timer")
    assert "slow_tool" in plugins.registry.names("tools")
    assert set(took) == {"slow", "builtin:generic_tools"}
    assert took["slow"] >= 0.05  # a lower bound: holds however loaded the machine is


def test_a_raising_plugin_is_skipped_inside_a_wrapper_and_a_raising_wrapper_is_blamed_on_its_own_plugin(plugins):
    calls = []

    class Passes:  # sees the inner error and lets it through: the inner plugin is blamed, not this one
        @hookimpl(wrapper=True)
        def register_tools(self, register):
            calls.append(register.plugin)
            return (yield)

    class Breaks:
        @hookimpl(hookwrapper=True)  # an old-style wrapper, raising before its yield
        def register_tools(self, register):
            raise RuntimeError("wrapper bug")
            yield  # pragma: no cover

    plugins.register_plugin(Registers("half_done", fail=True), "flaky")
    plugins.register_plugin(Registers("fine_tool"), "fine")
    plugins.register_plugin(Passes(), "passes")
    plugins.register_plugin(Breaks(), "breaks")
    reg = plugins.registry
    assert {"half_done", "fine_tool", "python"} <= set(reg.names("tools"))  # registered before raising: kept
    assert plugins.infos["flaky"].problems == ["plugin 'flaky' raised in register_tools: ValueError: the tools' "
                                               "service is down"]
    assert plugins.infos["breaks"].problems == ["plugin 'breaks' raised in register_tools: RuntimeError: wrapper "
                                                "bug"]
    assert plugins.infos["passes"].problems == [] and plugins.infos["fine"].problems == []
    assert {"flaky", "fine", "builtin:generic_tools"} <= set(calls)


def test_a_plugin_may_not_both_wrap_and_implement_one_hook(plugins):
    class Both:
        @hookimpl(wrapper=True)
        def register_tools(self, register):
            return (yield)

        @hookimpl(specname="register_tools")
        def also_tools(self, register):
            register(_tool("twice"))

    info = plugins.register_plugin(Both(), "both")
    assert "both wraps and implements register_tools" in info.error
    assert plugins.pm.get_plugin("both") is None and "twice" not in plugins.registry.names("tools")


def test_trace_plugins_uses_pluggys_tracer(monkeypatch, caplog):
    import logging

    from skyrl_core import plugins as plugins_mod

    monkeypatch.setenv("SKYRL_TRACE_PLUGINS", "1")
    manager = plugins_mod.SkyrlPlugins(load_entry_points=False)
    manager.register_plugin(Registers("traced_tool"), "traced")
    with caplog.at_level(logging.WARNING, logger="skyrl_core.plugins"):
        manager.registry
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("[trace]")]
    assert any("register_tools [hook]" in line for line in lines)  # pluggy's own call line
    assert any("register: <register tool for plugin 'traced'>" in line for line in lines)
    assert any("plugin 'traced' registered tool: 'traced_tool'" in line for line in lines)
    assert any("plugin 'builtin:generic_tools' registered tool: 'python', 'finish'" in line for line in lines)
    assert any("finish register_tools -->" in line for line in lines)
    monkeypatch.delenv("SKYRL_TRACE_PLUGINS")
    caplog.clear()
    quiet = plugins_mod.SkyrlPlugins(load_entry_points=False)
    with caplog.at_level(logging.WARNING, logger="skyrl_core.plugins"):
        quiet.registry
    assert not [r for r in caplog.records if r.getMessage().startswith("[trace]")]


def test_hook_order_decides_who_replaces_whom(plugins):
    """tryfirst beats plain beats trylast (the built-ins' mark); one rank twice is a clash."""
    class Default:
        @hookimpl(trylast=True)
        def register_tools(self, register):
            register(_tool("shared"))
            register(_tool("contested"))

    class Plain:
        @hookimpl
        def register_tools(self, register):
            register(_tool("shared"))
            register(_tool("contested"))

    class First:
        @hookimpl(tryfirst=True)
        def register_tools(self, register):
            register(_tool("contested"))

    plugins.register_plugin(Plain(), "plain")
    plugins.register_plugin(Default(), "default")  # registered last, still called after the plain impl
    plugins.register_plugin(First(), "first")
    reg = plugins.registry
    assert (reg.entries["tools"]["shared"].plugin, reg.entries["tools"]["shared"].replaces) == ("plain", "default")
    assert reg.entries["tools"]["contested"].plugin == "first"
    assert plugins.infos["default"].capabilities["tools"] == [] and plugins.infos["plain"].problems == []
