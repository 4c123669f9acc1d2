"""Every registered kind has a declared contract (skyrl_core.contracts), checked at registration: a registration
missing a member is refused naming the plugin, the kind, the name and the member; a valid one is registered."""

from __future__ import annotations

import types

import click
import pytest

from skyrl_core import Task, Tool, ToolResult, hookimpl
from skyrl_core.backends import Backend
from skyrl_core.contracts import CONTRACTS, ToolCallParser, member
from skyrl_core.default_plugins.runtimes.placement import LocalPlacement
from skyrl_core.registry import KINDS
from skyrl_core.tasks import Instance

from skyrl_core.default_plugins.chat.template import ChatFormat
from test_plugins import FakeBackend, FakeDispatcher, FakeParser, FakeRuntime, MemoryLogger


def _tool(name):
    return Tool(name=name, description="", parameters={"type": "object"}, handler=lambda a, c: ToolResult(output=""))


class HalfBackend(Backend):  # forgets save and load: abstract
    async def train_step(self, batch):
        return {}

    async def sync_weights(self, engine):
        pass


class NoDispatch:
    name = "no_dispatch"


class StartOnly:
    async def start(self):
        pass


class LogOnly:
    def __init__(self, output, config):
        pass

    def log(self, record):
        pass


class Generates:
    def __init__(self, config):
        pass

    async def generate(self, input_ids, sampling):
        raise AssertionError("never called")


def loss(logprobs, old_logprobs, advantages, mask, config, rollout_logprobs=None):
    return logprobs.sum(), {}


class HalfChat:  # renders a whole conversation but cannot extend one
    def __init__(self, tokenizer):
        pass

    def render_ids(self, messages, tools=None, add_generation_prompt=True):
        return []


class RunsHarness:
    def __init__(self, engine, chat, parser):
        pass

    async def run(self, trajectory, harness, runtime=None, timeout_s=600.0):
        pass

    async def close(self):
        pass


class RunOnly:
    def __init__(self, engine, chat, parser):
        pass

    async def run(self, trajectory, harness, runtime=None, timeout_s=600.0):
        pass


# kind -> (a valid registration, an invalid one, what the refusal must say is wrong)
CASES = {
    "tools": (_tool("ok_tool"), {"name": "bad"}, "which is not a Tool"),
    "instruction_builders": (lambda instance, task: [], lambda instance: [],
                             "cannot be called with 2 positional arguments"),
    "verifiers": (lambda trajectory, runtime, instance: 1.0, "gsm8k_answer", "which is not callable"),
    "tasks": (Task(name="ok_task", description="", load=lambda spec: [Instance(id="0", data={})],
                   instruction_builder="gsm8k", tools=("python",), verifier="gsm8k_answer"),
              {"name": "bad"}, "which is not a Task"),
    "dispatchers": (FakeDispatcher, NoDispatch, "which lacks dispatch"),
    "inference_engines": (Generates, lambda: None, "cannot be called with 1 positional argument"),
    "runtimes": (FakeRuntime, StartOnly, "which lacks exec, close"),
    "backends": (FakeBackend, HalfBackend, "which leaves abstract: load, save"),
    "parsers": (FakeParser(), types.SimpleNamespace(name="no_parse"), "which lacks parse"),
    "commands": (click.Command("ok-cmd", callback=lambda: None), lambda: None,
                 "which is neither a click command nor a typer app"),
    "advantage_estimators": (lambda rewards, group_ids, std_normalize: list(rewards), lambda rewards: rewards,
                             "cannot be called with 3 positional arguments"),
    "policy_losses": (loss, lambda logprobs, mask: 0.0, "cannot be called with 5 positional arguments"),
    "loggers": (MemoryLogger, LogOnly, "which lacks close"),
    "eval_writers": (lambda output_dir, trajectories, config: {}, {"answers": "x"}, "which is not callable"),
    "config_checks": (lambda config: None, "top_k", "which is not callable"),
    "config_sources": (lambda name: None, lambda: None, "cannot be called with 1 positional argument"),
    "placements": (LocalPlacement(), types.SimpleNamespace(name="half", check=lambda config: None),
                   "which lacks place_task, place_engine"),
    "chat_formats": (ChatFormat, HalfChat,
                     "which lacks prepare, start, continuation_ids, needs_rerender, decode"),
    "engine_builders": (lambda config, registry: None, lambda config: None,
                        "cannot be called with 2 positional arguments"),
    "harness_runners": (RunsHarness, RunOnly, "which lacks close"),
    "format_detectors": (lambda text, tools: None, lambda text: None, "cannot be called with 2 positional arguments"),
    "async_loops": (types.SimpleNamespace(check=lambda config, backend: None, producer=lambda run, state=None: None),
                    types.SimpleNamespace(check=lambda config, backend: None), "which lacks producer"),
}


def _plugin(hook: str, obj, name: str):
    def impl(register):
        register(obj, name=name)

    return type("Plugin", (), {hook: staticmethod(hookimpl(impl))})()


def test_an_unhashable_plugin_object_is_refused_not_fatal(plugins):
    info = plugins.register_plugin(types.SimpleNamespace(register_tools=hookimpl(lambda register: None)), "ns")
    assert "unhashable" in info.error and "python" in plugins.registry.names("tools")


def test_every_kind_has_a_contract_and_a_case():
    from test_docs import hook_specs

    assert set(CONTRACTS) == set(KINDS) == set(CASES)
    assert {c.hook for c in CONTRACTS.values()} == set(hook_specs())


@pytest.mark.parametrize("kind", sorted(CASES))
def test_a_registration_breaking_its_contract_is_refused_naming_plugin_and_member(plugins, kind):
    valid, invalid, problem = CASES[kind]
    hook, label = KINDS[kind]
    plugins.register_plugin(_plugin(hook, invalid, "bad_one"), "careless")
    plugins.register_plugin(_plugin(hook, valid, "ok_tool" if kind == "tools" else "ok_one"), "careful")
    reg = plugins.registry
    [refusal] = plugins.infos["careless"].problems
    assert refusal.startswith(f"plugin 'careless' registered {label} 'bad_one' (") and problem in refusal, refusal
    assert "; valid: " in refusal  # and says what would be valid
    assert "bad_one" not in reg.names(kind) and plugins.infos["careless"].capabilities[kind] == []
    assert plugins.infos["careful"].problems == []
    assert plugins.infos["careful"].capabilities[kind] == ["ok_tool" if kind == "tools" else "ok_one"]


def test_every_in_repo_registration_keeps_its_contract(plugins):
    """The built-ins (and whatever plugins this environment has installed) register nothing that breaks one."""
    plugins.registry
    assert [p for info in plugins.infos.values() if info.builtin for p in info.problems] == []


def test_optional_members_have_declared_defaults():
    bare = FakeParser()  # implements parse only
    assert member(bare, "parsers", "stop") == () and member(bare, "parsers", "reads_formats") == ()
    assert member(bare, "parsers", "format_call")("f", {"x": 1}) == \
        '<tool_call>\n{"name": "f", "arguments": {"x": 1}}\n</tool_call>'
    assert isinstance(bare, ToolCallParser)
    with pytest.raises(KeyError, match="'parse' is not an optional member of the tool-call parser contract"):
        member(bare, "parsers", "parse")


def test_the_agent_reads_declared_members_never_a_registered_name():
    """Old code: bare JSON examples only for a parser *named* ``json``, and ``finish`` singled out by its name."""
    from skyrl_core.agent import _call_text, _preferred_example_tool, _resembled
    from skyrl_core.default_plugins.parsers import HermesParser, JsonParser

    class HouseJson(JsonParser):  # a plugin's JSON-call parser under its own name
        name = "house_json"

    call = '{"name": "python", "arguments": {"code": "1"}}'
    assert _call_text(call, HouseJson()) == call
    assert _call_text(call, FakeParser()) == f"<tool_call>\n{call}\n</tool_call>"  # the contract's default

    class NamedHermesReadingNothing(FakeParser):
        name = "hermes"  # the name alone no longer says which formats it reads

    tools = {"python": _tool("python")}
    assert _resembled('<tool_call>{"name": "python", "arguments": {}}</tool_call>', tools, HermesParser())[2] is True
    assert _resembled('<tool_call>{"name": "python", "arguments": {}}</tool_call>', tools,
                      NamedHermesReadingNothing())[2] is False

    submit = Tool(name="submit", description="", parameters={"type": "object"}, handler=lambda a, c: "", finishes=True)
    plain_finish = _tool("finish")  # a tool merely *named* finish is an ordinary tool
    assert _preferred_example_tool({"submit": submit, "finish": plain_finish}) is plain_finish


def test_optional_members_are_read_through_the_contract_not_probed():
    """The core and the built-ins read a registered object's optional members with ``contracts.member`` (the declared
    default when absent), never with a ``getattr``/``hasattr`` of their own. The one exception is the registrar
    naming an object by its ``name`` when ``register`` got none (``plugins.py``), which holds for every kind."""
    import re
    from pathlib import Path

    names = sorted({n for c in CONTRACTS.values() for n in c.optional})
    probe = re.compile(r"(?:getattr|hasattr)\([^()]*?,\s*[\"'](%s)[\"']" % "|".join(map(re.escape, names)))
    core = Path(__file__).resolve().parents[1] / "skyrl_core"
    found = [f"{p.relative_to(core)}:{i}: {line.strip()}" for p in sorted(core.rglob("*.py"))
             for i, line in enumerate(p.read_text().splitlines(), 1)
             if probe.search(line) and not (p.name == "plugins.py" and "Entry(obj=obj" in line)]
    assert not found, "read these through skyrl_core.contracts.member:\n" + "\n".join(found)


def test_the_task_contract_declares_content_fields():
    task = Task(name="t", description="", load=lambda spec: [], instruction_builder="b", tools=("python",),
                verifier="v")
    assert member(task, "tasks", "content_fields") == ()
    assert "content_fields" in CONTRACTS["tasks"].optional
