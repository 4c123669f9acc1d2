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
from skyrl_core.errors import RegistrationError, ToolSchemaError, UnknownComponentError
from skyrl_core.plugins import KINDS
from skyrl_core.tasks import DataSpec, Instance

FIXTURE = Path(__file__).parent / "fixtures" / "skyrl-fixture-plugin"


def _tool(name: str) -> Tool:
    return Tool(name=name, description=f"{name} tool",
                parameters={"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]},
                handler=lambda args, ctx: ToolResult(output=str(args["x"] * 2)))


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
        register(type("FakeDispatcher", (), {"name": "fake_dispatcher"}))

    @hookimpl
    def register_inference_engines(self, register):
        register(lambda config: "engine-for-" + config, name="fake_engine")

    @hookimpl
    def register_runtimes(self, register):
        register(type("FakeRuntime", (), {"name": "fake_runtime"}))

    @hookimpl
    def register_backends(self, register):
        register(type("FakeBackend", (), {"name": "fake_backend"}))

    @hookimpl
    def register_parsers(self, register):
        register(type("FakeParser", (), {"name": "fake_parser"})())

    @hookimpl
    def register_commands(self, register):
        register(click.Command("fake-cmd", callback=lambda: click.echo("fake ran")), name="fake-cmd")


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
    with pytest.raises(RegistrationError) as exc:
        plugins.registry
    assert "'plugin_a'" in str(exc.value) and "'plugin_b'" in str(exc.value) and "tool 'same'" in str(exc.value)


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
    with pytest.raises(RegistrationError, match="not_a_tool"):
        plugins.registry


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
