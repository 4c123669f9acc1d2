"""What a plugin must register, per kind: one :class:`typing.Protocol` (or a core class) each, and one table.

:data:`CONTRACTS` maps every registry kind to its :class:`Contract`: the hook that registers it, the label used in
messages, the Protocol (the members the host calls), the *form* of what is registered, the arguments the host calls
it with and the optional members with their defaults. Adding a kind is one line in that table (and its hookspec).
The registry checks every registration against its contract (:func:`check`) and refuses one that breaks it with a
:class:`~skyrl_core.errors.RegistrationError` naming the plugin, the kind, the registered name, what is missing and
what would be valid. ``docs/hooks.md`` documents each contract (``tests/test_docs.py`` checks it does).

Forms:

- ``instance``: an instance of a core class (``Tool``, ``Task``);
- ``callable``: a function or callable object, called with ``args`` positional arguments;
- ``object``: an object (or a class, instantiated without arguments) with the Protocol's members;
- ``class_or_factory``: a class the host constructs with ``args`` positional arguments (its members are checked on
  the class, and an abstract class is refused), or a factory callable with those arguments returning an object
  with the Protocol's members (the factory's arity is checked; what it returns is the Protocol's to satisfy, and
  the core base classes -- ``Dispatcher``, ``Engine``, ``Runtime``, ``Backend`` -- implement it);
- ``command``: a click command or a typer app.

Optional members (``Contract.optional``) are read through :func:`member`, which gives the declared default when an
object lacks one: code never probes a registered object with ``getattr`` of its own, and never branches on the
name it was registered under.
"""

from __future__ import annotations

import inspect
import json
from typing import Any, Callable, Protocol, runtime_checkable

import attrs

from .errors import RegistrationError
from .placement import Placement


# -- the Protocols ---------------------------------------------------------------------------------------------
@runtime_checkable
class InstructionBuilder(Protocol):
    """``(instance: Instance, task: Task) -> list[dict]``: the first chat messages of a trajectory."""

    def __call__(self, instance: Any, task: Any) -> list[dict]: ...


@runtime_checkable
class Verifier(Protocol):
    """``(trajectory, runtime, instance) -> VerifierResult | float``, sync or async."""

    def __call__(self, trajectory: Any, runtime: Any, instance: Any) -> Any: ...


@runtime_checkable
class ToolCallParser(Protocol):
    """Reads tool calls from a generation: ``parse(text, finish_reason) -> ParseResult``. Optional members
    (``PARSER_OPTIONAL``): ``name``, ``format_call(name, arguments) -> str`` (how a call is written for this parser:
    demonstrations, corrective examples), ``tools_prompt`` (None, or ``(tool_schemas) -> str`` for a parser that
    describes the tools itself), ``stop`` (extra stop strings), ``keep_special_tokens`` (decode generations with
    special tokens kept), ``needs_tool_schemas`` (``parse`` takes ``tool_schemas=``), ``reads_formats`` (the call
    formats of ``parsers.detect.FORMAT_MARKERS`` it reads) and ``for_model`` (``(tokenizer) -> (name, why)`` on a
    stand-in such as ``auto``: the registered parser a model's run uses instead)."""

    def parse(self, text: str, finish_reason: str) -> Any: ...


@runtime_checkable
class Dispatcher(Protocol):
    """Constructed as ``(DispatcherConfig, EngineStats)``; ``await dispatch(trajectories, stages) -> dict``."""

    async def dispatch(self, trajectories: list, stages: Any) -> dict: ...


@runtime_checkable
class InferenceEngine(Protocol):
    """Built from the run ``Config``; ``await generate(input_ids, sampling) -> GenerationOutput``. The core base
    :class:`skyrl_core.inference.base.Engine` adds ``tokenizer``, ``stats``, ``update_weights`` and ``close``."""

    async def generate(self, input_ids: list[int], sampling: Any) -> Any: ...


@runtime_checkable
class Runtime(Protocol):
    """Constructed as ``(RuntimeSpec)``; async ``start()``, ``exec(command, timeout_s, stdin, env) -> ExecResult``,
    ``close()`` (base: :class:`skyrl_core.runtime.Runtime`). Optional (``RUNTIME_OPTIONAL``): ``prepare``,
    ``limit_hits`` and, on the class, ``unavailable() -> str | None`` (why it cannot start on this host)."""

    async def start(self) -> None: ...

    async def exec(self, command: Any, timeout_s: float = 30.0, stdin: str | None = None,
                   env: dict | None = None) -> Any: ...

    async def close(self) -> None: ...


@runtime_checkable
class Backend(Protocol):
    """Built from ``(Config, Engine | None)``; async ``train_step(batch) -> dict``, async ``sync_weights(engine)``,
    ``save(dir)``, ``load(dir)`` (base: :class:`skyrl_core.backends.Backend`)."""

    async def train_step(self, batch: Any) -> dict: ...

    async def sync_weights(self, engine: Any) -> None: ...

    def save(self, directory: Any) -> None: ...

    def load(self, directory: Any) -> None: ...


@runtime_checkable
class MetricLogger(Protocol):
    """Built from ``(output_dir: Path, config: Config | None)``; ``log(record: dict)`` and ``close()``. Optional
    (``LOGGER_OPTIONAL``): ``truncate_after(step) -> list[dict]`` (it keeps the run's record) and
    ``log_rollout(name, trajectories) -> dict[str, float]`` (the run's logger ``run``: keeps a rollout, returns its
    figures)."""

    def log(self, record: dict) -> None: ...

    def close(self) -> None: ...


@runtime_checkable
class AdvantageEstimator(Protocol):
    """``(rewards, group_ids, std_normalize) -> list[float]``: one advantage per trajectory."""

    def __call__(self, rewards: Any, group_ids: Any, std_normalize: bool) -> list[float]: ...


@runtime_checkable
class PolicyLoss(Protocol):
    """``(logprobs, old_logprobs, advantages, mask, config, rollout_logprobs=None) -> (loss, metrics)``."""

    def __call__(self, logprobs: Any, old_logprobs: Any, advantages: Any, mask: Any, config: Any) -> Any: ...


@runtime_checkable
class EvalWriter(Protocol):
    """``(output_dir: Path, trajectories: list[Trajectory], config: Config) -> dict[str, Path]``."""

    def __call__(self, output_dir: Any, trajectories: list, config: Any) -> dict: ...


@runtime_checkable
class ChatFormat(Protocol):
    """Built from ``(tokenizer, keep_thinking=False, template_kwargs=None)``: token-in/token-out chat formatting
    (the built-in: :class:`skyrl_core.default_plugins.chat.template.ChatFormat`); the rollout session asks for
    ``default``. Its object also has the attributes ``tokenizer``, ``tools_in_template`` (the template renders
    ``tools=``) and ``observation_role`` (``tool`` or ``user``). Optional (``CHAT_OPTIONAL``):
    ``check_drift(trajectory, messages, tool_schemas)``, the re-tokenisation drift check (``agent.drift_check``)."""

    def prepare(self, messages: list, tool_schemas: list, example_call: str | None = None) -> list: ...

    def start(self, messages: list, tool_schemas: list = ()) -> list: ...

    def continuation_ids(self, new_messages: list, last_output_ids: list, tool_schemas: list = ()) -> list: ...

    def needs_rerender(self, messages: list, new_messages: list) -> bool: ...

    def render_ids(self, messages: list, tools: list | None = None, add_generation_prompt: bool = True) -> list: ...

    def decode(self, ids: list, keep_special: bool = False) -> str: ...


@runtime_checkable
class EngineBuilder(Protocol):
    """``(config: Config, registry: Registry) -> Engine``, awaited: the run's engine (``engine.type`` placed by
    ``engine.placement``, one replica or a router over several); the core asks for ``default``."""

    def __call__(self, config: Any, registry: Any) -> Any: ...


@runtime_checkable
class HarnessRunner(Protocol):
    """Built from ``(engine, chat: ChatFormat, parser)``; ``await run(trajectory, harness, runtime, timeout_s)`` runs
    a task's external harness as the trajectory's run stage, ``await close()``; the core asks for ``default``."""

    async def run(self, trajectory: Any, harness: Any, runtime: Any = None, timeout_s: float = 600.0) -> None: ...

    async def close(self) -> None: ...


@runtime_checkable
class FormatDetector(Protocol):
    """``(text: str, tools: dict[str, Tool]) -> (parser name, format name) | None``: the tool-call format a reply
    resembles (corrective observations); the core asks for ``default``."""

    def __call__(self, text: str, tools: Any) -> Any: ...


@runtime_checkable
class AsyncLoop(Protocol):
    """Asynchronous training, asked for as ``async`` when ``train.max_staleness`` > 0: ``check(config, backend)``
    raises ConfigError when the backend (registered class or factory, or built) cannot train that stale;
    ``producer(run, state=None)`` returns the run's producer (``start()``, ``await train_step() -> record``,
    ``to_state()``, ``await close()``), restored from a checkpoint's ``state`` when given."""

    def check(self, config: Any, backend: Any) -> None: ...

    def producer(self, run: Any, state: Any = None) -> Any: ...


@runtime_checkable
class ConfigCheck(Protocol):
    """``(config: Config) -> None``: raise ConfigError naming the key that is wrong and what would be valid."""

    def __call__(self, config: Any) -> None: ...


@runtime_checkable
class ConfigSource(Protocol):
    """``(name: str) -> Path | None``: the config file ``name`` stands for, None when not this source's name."""

    def __call__(self, name: str) -> Any: ...


# -- optional members and their defaults -----------------------------------------------------------------------
def _tool_call_tag(name: str, arguments: dict) -> str:
    """The default ``format_call``: a Hermes ``<tool_call>`` tag around the call's JSON."""
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False) + "\n</tool_call>"


PARSER_OPTIONAL: dict[str, Any] = {"name": None, "format_call": _tool_call_tag, "tools_prompt": None, "stop": (),
                                   "keep_special_tokens": False, "needs_tool_schemas": False, "reads_formats": (),
                                   "for_model": None}
RUNTIME_OPTIONAL: dict[str, Any] = {"prepare": None, "limit_hits": None, "unavailable": None}
DISPATCHER_OPTIONAL: dict[str, Any] = {"session_memory": None}
TASK_OPTIONAL: dict[str, Any] = {"content_fields": (), "harness": None}
LOGGER_OPTIONAL: dict[str, Any] = {"truncate_after": None, "log_rollout": None}
BACKEND_OPTIONAL: dict[str, Any] = {"launch": None}
CHAT_OPTIONAL: dict[str, Any] = {"check_drift": None}
ENGINE_OPTIONAL: dict[str, Any] = {"name": None, "max_context": None, "accepts_images": False,
                                   "generate_messages": None, "scripted_policy": False}


# -- the table -------------------------------------------------------------------------------------------------
@attrs.frozen
class Contract:
    """What one kind's registrations must be: see the module docstring for ``form``. ``protocol`` is a Protocol
    class, or for ``instance`` the dotted path of the core class (imported when first checked). ``args`` is the
    number of positional arguments the host calls a callable, class or factory with."""

    hook: str
    label: str
    form: str
    protocol: Any
    args: int | None = None
    optional: dict[str, Any] = attrs.field(factory=dict)


CONTRACTS: dict[str, Contract] = {
    "tools": Contract("register_tools", "tool", "instance", "skyrl_core.tools:Tool"),
    "instruction_builders": Contract("register_instruction_builders", "instruction builder", "callable",
                                     InstructionBuilder, 2),
    "verifiers": Contract("register_verifiers", "verifier", "callable", Verifier, 3),
    "tasks": Contract("register_tasks", "task", "instance", "skyrl_core.tasks:Task", None, TASK_OPTIONAL),
    "dispatchers": Contract("register_dispatchers", "dispatcher", "class_or_factory", Dispatcher, 2,
                            DISPATCHER_OPTIONAL),
    "inference_engines": Contract("register_inference_engines", "inference engine", "class_or_factory",
                                  InferenceEngine, 1, ENGINE_OPTIONAL),
    "runtimes": Contract("register_runtimes", "runtime", "class_or_factory", Runtime, 1, RUNTIME_OPTIONAL),
    "backends": Contract("register_backends", "backend", "class_or_factory", Backend, 2, BACKEND_OPTIONAL),
    "parsers": Contract("register_parsers", "tool-call parser", "object", ToolCallParser, None, PARSER_OPTIONAL),
    "commands": Contract("register_commands", "command", "command", "click.Command | typer.Typer"),
    "advantage_estimators": Contract("register_advantage_estimators", "advantage estimator", "callable",
                                     AdvantageEstimator, 3),
    "policy_losses": Contract("register_policy_losses", "policy loss", "callable", PolicyLoss, 5),
    "loggers": Contract("register_loggers", "logger", "class_or_factory", MetricLogger, 2, LOGGER_OPTIONAL),
    "eval_writers": Contract("register_eval_writers", "eval writer", "callable", EvalWriter, 3),
    "placements": Contract("register_placements", "placement", "object", Placement),
    "config_checks": Contract("register_config_checks", "config check", "callable", ConfigCheck, 1),
    "config_sources": Contract("register_config_sources", "config source", "callable", ConfigSource, 1),
    "chat_formats": Contract("register_chat_formats", "chat format", "class_or_factory", ChatFormat, 1,
                             CHAT_OPTIONAL),
    "engine_builders": Contract("register_engine_builders", "engine builder", "callable", EngineBuilder, 2),
    "harness_runners": Contract("register_harness_runners", "harness runner", "class_or_factory", HarnessRunner, 3),
    "format_detectors": Contract("register_format_detectors", "format detector", "callable", FormatDetector, 2),
    "async_loops": Contract("register_async_loops", "asynchronous loop", "object", AsyncLoop),
}


def required_members(protocol: Any) -> list[str]:
    """The members a Protocol declares (methods and annotated attributes), ``__call__`` excepted."""
    names = [n for n, v in vars(protocol).items() if callable(v) and not n.startswith("_")]
    return names + [n for n in getattr(protocol, "__annotations__", {}) if n not in names]


def member(obj: Any, kind: str, name: str) -> Any:
    """``obj``'s optional member ``name`` of the ``kind`` contract, or the contract's declared default."""
    optional = CONTRACTS[kind].optional
    if name not in optional:
        raise KeyError(f"'{name}' is not an optional member of the {CONTRACTS[kind].label} contract; "
                       f"optional: {', '.join(optional) or 'none'}")
    value = getattr(obj, name, None)
    return optional[name] if value is None else value


def display_name(obj: Any, kind: str) -> str:
    """How messages name a registered object: its ``name`` member, else its class name."""
    return str(member(obj, kind, "name") or type(obj).__name__)


def check(kind: str, name: Any, obj: Any, plugin: str) -> None:
    """Raise RegistrationError when ``obj``, registered by ``plugin`` as the ``kind`` ``name``, breaks its contract
    (naming the plugin, kind, name, the missing member(s) and what would be valid); return None otherwise."""
    contract = CONTRACTS[kind]
    what = f"plugin '{plugin}' registered {contract.label} '{name}' ({_describe(obj)})"
    problem = _problem(contract, obj)
    if problem is not None:
        raise RegistrationError(f"{what}, which {problem}; valid: {valid(kind)}")


def valid(kind: str) -> str:
    """What a valid registration of ``kind`` is, in words (used in errors and docs)."""
    c = CONTRACTS[kind]
    members = ", ".join(required_members(c.protocol)) if not isinstance(c.protocol, str) else ""
    args = f"{c.args} positional argument{'s' if c.args != 1 else ''}" if c.args is not None else ""
    if c.form == "instance":
        return f"an instance of {c.protocol.replace(':', '.')}"
    if c.form == "callable":
        return f"a callable taking {args} ({c.protocol.__doc__.split(':')[0]})"
    if c.form == "command":
        return "a click command or a typer app"
    if c.form == "object":
        return f"an object or class with {members} (Protocol skyrl_core.contracts.{c.protocol.__name__})"
    return (f"a class constructed with {args} that has {members}, or a factory taking {args} "
            f"(Protocol skyrl_core.contracts.{c.protocol.__name__})")


def _problem(c: Contract, obj: Any) -> str | None:
    if c.form == "instance":
        module, _, cls_name = c.protocol.partition(":")
        import importlib

        cls = getattr(importlib.import_module(module), cls_name)
        return None if isinstance(obj, cls) else f"is not a {cls_name}"
    if c.form == "command":
        return None if _is_command(obj) else "is neither a click command nor a typer app"
    if c.form == "callable":
        if not callable(obj):
            return "is not callable"
        return _arity_problem(obj, c.args)
    missing = [m for m in required_members(c.protocol) if not callable(getattr(obj, m, None))]
    if c.form == "object":
        return f"lacks {', '.join(missing)}" if missing else None
    # class_or_factory
    if isinstance(obj, type):
        if missing:
            return f"lacks {', '.join(missing)}"
        abstract = sorted(getattr(obj, "__abstractmethods__", ()))
        if abstract:
            return f"leaves abstract: {', '.join(abstract)}"
        return _arity_problem(obj, c.args)
    if not callable(obj):
        return "is neither a class nor a factory (not callable)"
    return _arity_problem(obj, c.args)


def _arity_problem(obj: Callable, n: int | None) -> str | None:
    """Whether ``obj`` can be called with ``n`` positional arguments (None when its signature cannot be read)."""
    if n is None:
        return None
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):  # a builtin without a readable signature: it is taken at its word
        return None
    try:
        sig.bind(*range(n))
    except TypeError:
        return f"cannot be called with {n} positional argument{'s' if n != 1 else ''} (its signature: {sig})"
    return None


def _is_command(obj: Any) -> bool:
    import sys

    import click

    if isinstance(obj, click.Command):
        return True
    typer = sys.modules.get("typer")  # a typer app's module is imported by whoever built it
    if typer is not None and isinstance(obj, typer.Typer):
        return True
    # typer may vendor its own click: its commands are instances of that package's Command
    return any(c.__name__ == "Command" and c.__module__.split(".")[0] in ("click", "typer")
               for c in type(obj).__mro__)


def _describe(obj: Any) -> str:
    if isinstance(obj, type):
        return f"class {obj.__qualname__}"
    if inspect.isfunction(obj) or inspect.ismethod(obj):
        return f"function {obj.__qualname__}"
    return f"a {type(obj).__qualname__}"
