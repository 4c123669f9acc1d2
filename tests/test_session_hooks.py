"""What the rollout session and the agent loop ask the registry for by name: the chat format ``default``, the engine
builder ``default``, the harness runner ``default`` and the format detector ``default``. The built-in plugins
register them (the chat built-in: the tokenizer's template; the engines built-in: the router and the
recording-gateway runner; the parsers built-in: call-format detection); a plugin's
registration of the same name replaces them by hook order, and the core then uses the plugin's."""

from __future__ import annotations

import asyncio

from skyrl_core import hookimpl
from skyrl_core.agent import _unread_call, _unparseable
from skyrl_core.rollout import RolloutSession

from test_placement import FinishEngine, gsm8k


def _plugin(plugins, name, **hooks):
    """Register a plugin ``name`` whose ``tryfirst`` hookimpls are ``hooks`` (hook name -> ``impl(register)``)."""
    plugin = type("Plugin", (), {hook: staticmethod(hookimpl(tryfirst=True)(impl)) for hook, impl in hooks.items()})()
    plugins.register_plugin(plugin, name)
    assert plugins.infos[name].error is None and plugins.infos[name].problems == []


def test_the_builtins_register_what_the_session_and_loop_ask_for(plugins):
    from skyrl_core.default_plugins.engines.harness import HarnessRunner
    from skyrl_core.default_plugins.engines.router import build_engine
    from skyrl_core.default_plugins.parsers import detect_format

    from skyrl_core.default_plugins.chat.template import ChatFormat

    reg = plugins.registry
    assert reg.get("chat_formats", "default") is ChatFormat
    assert reg.entries["chat_formats"]["default"].plugin == "builtin:chat"
    assert reg.get("engine_builders", "default") is build_engine
    assert reg.get("harness_runners", "default") is HarnessRunner
    assert reg.get("format_detectors", "default") is detect_format
    assert {reg.entries[k]["default"].plugin for k in ("engine_builders", "harness_runners")} == {"builtin:engines"}
    assert reg.entries["format_detectors"]["default"].plugin == "builtin:parsers"
    assert reg.entries["async_loops"]["async"].plugin == "builtin:async_training"


def test_hook_register_chat_formats(plugins):
    """The session formats conversations with the chat format ``default``: a plugin's replaces the built-in, is built
    from the engine's tokenizer with each task's ``keep_thinking`` and ``chat_template_kwargs`` (once per distinct
    pair), and the agent loop renders every trajectory's prompt with it."""
    from skyrl_core.default_plugins.chat.template import ChatFormat

    built, started = [], []

    class Counting(ChatFormat):
        def __init__(self, tokenizer, keep_thinking=False, template_kwargs=None):
            built.append((tokenizer, keep_thinking, template_kwargs))
            super().__init__(tokenizer, keep_thinking=keep_thinking, template_kwargs=template_kwargs)

        def start(self, messages, tool_schemas=()):
            started.append(len(messages))
            return super().start(messages, tool_schemas)

    _plugin(plugins, "my-chat", register_chat_formats=lambda register: register(Counting, name="default"))
    cfg = gsm8k("tasks.0.runtime={type: local}", "tasks.0.agent={keep_thinking: true}")

    async def roll():
        session = await RolloutSession.create(cfg, engine=FinishEngine(), registry=plugins.registry)
        try:
            return session, await session.rollout(session.load_instances("train"), 1)
        finally:
            await session.close()

    session, (trajs, _) = asyncio.run(roll())
    tokenizer = session.engine.tokenizer
    assert built == [(tokenizer, False, {}), (tokenizer, True, {})]  # the run's agent, then the task's own
    assert isinstance(session.chat, Counting) and len(started) == 3
    assert [t.finish_reason for t in trajs] == ["finished"] * 3


def test_hook_register_engine_builders(plugins):
    """A session created without an engine builds it with the builder ``default``: a plugin's replaces the built-in
    router, is awaited with the config and the registry, and the session owns (and closes) what it built."""
    calls, closed = [], []

    class Closing(FinishEngine):
        async def close(self):
            closed.append(True)

    async def builder(config, registry):
        calls.append((config, registry))
        return Closing()

    _plugin(plugins, "my-builder", register_engine_builders=lambda register: register(builder, name="default"))
    cfg = gsm8k("tasks.0.runtime={type: local}")

    async def roll():
        session = await RolloutSession.create(cfg, registry=plugins.registry)
        try:
            return session, await session.rollout(session.load_instances("train"), 1)
        finally:
            await session.close()

    session, (trajs, _) = asyncio.run(roll())
    assert calls == [(cfg, plugins.registry)] and isinstance(session.engine, Closing) and session.owns_engine
    assert [t.finish_reason for t in trajs] == ["finished"] * 3 and [t.reward for t in trajs] == [1.0, 0.0, 0.0]
    assert closed == [True]


def test_hook_register_harness_runners(plugins):
    """A session's harness runner is the registered ``default``, built once with the session's engine, chat format
    and parser, and closed with the session."""
    built = []

    class Runner:
        def __init__(self, engine, chat, parser):
            built.append((engine, chat, parser))
            self.closed = False

        async def run(self, trajectory, harness, runtime=None, timeout_s=600.0):
            raise AssertionError("no harness task here")

        async def close(self):
            self.closed = True

    _plugin(plugins, "my-runner", register_harness_runners=lambda register: register(Runner, name="default"))

    async def make():
        session = await RolloutSession.create(gsm8k(), engine=FinishEngine(), registry=plugins.registry)
        runner = session._harness_runner()
        assert session._harness_runner() is runner  # one per session
        await session.close()
        return session, runner

    session, runner = asyncio.run(make())
    assert built == [(session.engine, session.chat, session.parser)] and runner.closed


def test_hook_register_format_detectors(plugins):
    """The agent loop's corrective observations name the format the detector ``default`` finds: a plugin's detector
    (here one that knows a ``<<call ...>>`` format) replaces the built-in for every reply, in both the unread-call
    and the parse-error observations."""
    from skyrl_core.default_plugins.parsers import detect_format

    def detector(text, tools):
        return ("angle", "double-angle") if text.startswith("<<call") else detect_format(text, tools)

    reg = plugins.registry
    tools = {name: reg.get("tools", name) for name in ("python", "finish")}
    parser = reg.get("parsers", "hermes")
    reply = '<<call python {"code": "print(1)"}>>'
    assert _unread_call(reply, tools, parser) is None  # the built-in sees no call format in it
    _plugin(plugins, "my-detector", register_format_detectors=lambda register: register(detector, name="default"))
    obs = _unread_call(reply, tools, parser)
    assert obs.startswith("Error: your reply looks like a tool call in the double-angle format (parser 'angle'), "
                          "but this run reads tool calls in the 'hermes' format, so nothing was run.")
    assert "<tool_call>" in obs  # a valid call in the run's own format
    assert ("Your reply looks like the double-angle format (parser 'angle'); this run reads the 'hermes' format."
            in _unparseable("no JSON object", reply, tools, parser))
