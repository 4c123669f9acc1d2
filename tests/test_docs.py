"""Documentation stays true: every hook documented with its signature, and every hook has a test."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

from skyrl_core import hookspecs

REPO = Path(__file__).resolve().parents[1]


def hook_specs():
    return {name: fn for name, fn in inspect.getmembers(hookspecs, inspect.isfunction) if name.startswith("register_")}


def test_every_hook_is_documented_with_its_signature():
    text = (REPO / "docs" / "hooks.md").read_text()
    documented = set(re.findall(r"^## (\w+)\(", text, flags=re.M))
    specs = hook_specs()
    assert documented == set(specs), f"docs/hooks.md and hookspecs.py differ: {documented ^ set(specs)}"
    for name, fn in specs.items():
        assert f"## {name}{inspect.signature(fn)}" in text, f"signature of {name} in docs/hooks.md is out of date"


def test_every_contract_is_documented_with_its_members():
    """Each kind of skyrl_core.contracts.CONTRACTS has a contract line in its hook's section of docs/hooks.md naming
    the kind, its Protocol, every required member and every optional one."""
    from skyrl_core.contracts import CONTRACTS, required_members

    text = (REPO / "docs" / "hooks.md").read_text()
    for kind, contract in CONTRACTS.items():
        match = re.search(rf"^## {contract.hook}\(.*?(?=^## |\Z)", text, flags=re.M | re.S)
        assert match, f"docs/hooks.md has no section for {contract.hook} (kind {kind})"
        section = match.group(0)
        assert f"Contract `{kind}`" in section, f"the {contract.hook} section does not state the {kind} contract"
        if not isinstance(contract.protocol, str):
            assert f"Protocol `{contract.protocol.__name__}`" in section, f"{kind}: Protocol not named"
            for name in required_members(contract.protocol):
                assert f"`{name}`" in section, f"{kind}: required member {name} not documented"
        for name in contract.optional:
            assert f"`{name}" in section, f"{kind}: optional member {name} not documented"


def test_every_hook_has_a_docstring_of_one_line():
    for name, fn in hook_specs().items():
        assert fn.__doc__ and "\n" not in fn.__doc__.strip(), name


def test_every_hook_has_a_test():
    sources = "\n".join(p.read_text() for p in (REPO / "tests").rglob("test_*.py"))
    missing = [name for name in hook_specs() if f"def test_hook_{name}(" not in sources]
    assert not missing, f"hooks without a test_hook_<name>: {missing}"


# -- what each factory receives and returns, checked against the real call sites ----------------------------------
FACTORY_HOOKS = ("register_inference_engines", "register_backends", "register_dispatchers", "register_runtimes",
                 "register_loggers")


def stated_call(hook: str) -> tuple[list[str], str]:
    """The ``(A, B | None) -> R`` a factory hook's docstring states: the argument types and the return type."""
    match = re.search(r"``\((.*?)\) -> ([\w ]+)``", getattr(hookspecs, hook).__doc__)
    assert match, f"the docstring of {hook} does not state ``(args) -> Result``"
    return [part.strip() for part in match.group(1).split(",")], match.group(2).strip()


def is_stated_type(value, stated: str) -> bool:
    """Whether ``value`` is one of the ``|``-separated type names (its class or a base class by name)."""
    names = {part.strip() for part in stated.split("|")}
    if value is None:
        return "None" in names
    return any(cls.__name__ in names for cls in type(value).__mro__)


class _Stop(Exception):
    """Raised by a recording factory once it has recorded its arguments (the call site need not go on)."""


def recording_plugin(calls: dict):
    """A real plugin whose factories record what the call sites pass them."""
    from skyrl_core import hookimpl
    from skyrl_core.default_plugins.dispatchers import AsyncBatchDispatcher
    from skyrl_core.runtime import Runtime

    def engine_factory(*args):
        calls["register_inference_engines"] = args
        raise _Stop

    def backend_factory(*args):
        calls["register_backends"] = args

    class RecordingDispatcher(AsyncBatchDispatcher):
        name = "recording"

        def __init__(self, *args):
            calls.setdefault("register_dispatchers", []).append(args)
            super().__init__(*args)

    class RecordingRuntime(Runtime):
        name = "recording"

        def __init__(self, *args):
            calls["register_runtimes"] = args
            super().__init__(*args)

        async def start(self):
            raise _Stop  # the init stage fails; the rollout marks the trajectory error_init and goes on

        async def exec(self, command, timeout_s=30.0, stdin=None, env=None):
            raise AssertionError("never started")

        async def close(self):
            self.closed = True

    def logger_factory(*args):
        calls["register_loggers"] = args

        class Sink:
            def log(self, record):
                pass

            def close(self):
                pass

        return Sink()

    class Plugin:
        @hookimpl
        def register_inference_engines(self, register):
            register(engine_factory, name="recording")

        @hookimpl
        def register_backends(self, register):
            register(backend_factory, name="recording")

        @hookimpl
        def register_dispatchers(self, register):
            register(RecordingDispatcher)

        @hookimpl
        def register_runtimes(self, register):
            register(RecordingRuntime)

        @hookimpl
        def register_loggers(self, register):
            register(logger_factory, name="recording")

    return Plugin(), {"dispatchers": RecordingDispatcher, "runtimes": RecordingRuntime}


def test_factory_hook_docstrings_state_what_the_call_sites_pass(plugins, tmp_path):
    import asyncio

    import attrs
    import pytest

    from skyrl_core import backends, registry
    from skyrl_core.default_plugins.bench.clock import run_virtual
    from skyrl_core.default_plugins.bench.dispatch import PROFILES, simulate
    from skyrl_core.default_plugins.bench.engine import StandInEngine
    from skyrl_core.config import Config, DispatcherConfig, config_from_dict
    from skyrl_core.rollout import RolloutSession
    from skyrl_core.default_plugins.trainer.runlog import MetricsLogger

    calls: dict = {}
    plugin, classes = recording_plugin(calls)
    plugins.register_plugin(plugin, "recording-plugin")
    cfg = config_from_dict({"engine": {"type": "recording"}, "dispatcher": {"type": "recording"},
                            "tasks": [{"name": "gsm8k", "data": {"split": "test", "limit": 1},
                                       "runtime": {"type": "recording"}}],
                            "backend": {"type": "recording"}, "logging": {"loggers": ["recording"]}})

    with pytest.raises(_Stop):  # the engine factory, called by RolloutSession.create
        asyncio.run(RolloutSession.create(cfg))

    async def roll():  # the dispatcher and runtime, constructed by a real rollout
        engine = StandInEngine()
        session = await RolloutSession.create(cfg, engine=engine)
        try:
            trajs, _ = await session.rollout(session.load_instances("train"), 1)
        finally:
            await engine.close()
        return trajs

    trajs = asyncio.run(roll())
    # the runtime's failure stayed in its trajectory
    assert [t.finish_reason for t in trajs] == ["error_init"], [t.error for t in trajs]
    run_virtual(simulate(attrs.evolve(PROFILES["light"], instances=2), DispatcherConfig(type="recording"), 0))
    backends.create_backend(cfg, StandInEngine.__new__(StandInEngine))  # what the trainer calls with its engine
    MetricsLogger(tmp_path, cfg).close()  # as the trainer builds its loggers

    assert isinstance(cfg, Config)
    for hook in FACTORY_HOOKS:
        stated_args, stated_return = stated_call(hook)
        for args in (calls[hook] if hook == "register_dispatchers" else [calls[hook]]):
            assert len(args) == len(stated_args), f"{hook}: the call site passes {len(args)} argument(s), " \
                                                  f"the docstring states {stated_args}"
            for value, stated in zip(args, stated_args):
                assert is_stated_type(value, stated), \
                    f"{hook}: passed a {type(value).__name__}, docstring says {stated}"
        if stated_return[0].isupper():  # a class of the core that the registered classes subclass
            base = {"Engine": "skyrl_core.inference.base", "Backend": "skyrl_core.backends",
                    "Dispatcher": "skyrl_core.dispatchers", "Runtime": "skyrl_core.runtime"}[stated_return]
            import importlib

            base_cls = getattr(importlib.import_module(base), stated_return)
            kind = hook.removeprefix("register_")
            for reg in plugins.registry.items(kind):
                if isinstance(reg.obj, type):
                    assert issubclass(reg.obj, base_cls), f"{kind} '{reg.name}' is not a {stated_return}"
    assert len(calls["register_dispatchers"]) == 2  # the rollout session and skyrl bench dispatch
    assert registry.KINDS["inference_engines"][0] == "register_inference_engines"
