"""Tools: every action an agent takes is an OpenAI-style function call to a Tool.

One abstraction covers three kinds of tool (SkyRL-Agent, arXiv 2511.16108, Sec. 3.1):
stateless tools (a python interpreter), environment-changing tools (a file editor acting on the runtime) and
agent-state-changing tools (summarisation, MemAgent's "next chunk"), which return ``reset_messages`` to replace
the conversation.
"""

from __future__ import annotations

import asyncio
import inspect
import json
from typing import Any, Awaitable, Callable

import attrs
import jsonschema

from .errors import ToolArgumentsError, ToolSchemaError


@attrs.define
class ToolCall:
    """One parsed function call: ``name`` and JSON ``arguments`` (a dict once parsed)."""

    name: str
    arguments: dict[str, Any]
    id: str | None = None
    raw: str = ""


@attrs.define
class ToolResult:
    """What a tool returns.

    ``output`` is the observation shown to the model (text). ``error`` marks a failed call (the loop may add a
    hint). ``finish`` ends the trajectory (``answer`` carries the final answer). ``reset_messages``, when set,
    replaces the agent's conversation (a context reset: the next LLM call starts a new training datum).
    ``images`` are OpenAI image content parts (base64 PNG data URLs, :func:`skyrl_core.multimodal.image_part`):
    sent to engines that accept images, a text stand-in for text-only ones (:mod:`skyrl_core.multimodal`).
    """

    output: str
    error: bool = False
    finish: bool = False
    answer: Any = None
    reset_messages: list[dict] | None = None
    metadata: dict[str, Any] = attrs.Factory(dict)
    images: list[dict] = attrs.Factory(list)


@attrs.define
class AgentState:
    """The agent's mutable state a tool may read or change: the chat ``messages`` and a free ``memory`` dict."""

    messages: list[dict] = attrs.Factory(list)
    memory: dict[str, Any] = attrs.Factory(dict)


@attrs.define
class ToolContext:
    """Handed to ``Tool.call``: the trajectory's runtime, agent state, engine handle and task instance.

    ``store`` is per-trajectory scratch space for tools (e.g. an editor's undo history), keyed by tool name.
    """

    runtime: Any = None
    state: AgentState = attrs.Factory(AgentState)
    engine: Any = None
    instance: Any = None
    store: dict[str, Any] = attrs.Factory(dict)

    def tool_store(self, tool_name: str) -> dict[str, Any]:
        return self.store.setdefault(tool_name, {})


def _check_schema(instance: "Tool", attribute: attrs.Attribute, value: dict) -> None:
    if not isinstance(value, dict):
        raise ToolSchemaError(f"tool '{instance.name}': parameters must be a JSON Schema object, got {type(value).__name__}")
    try:
        jsonschema.Draft202012Validator.check_schema(value)
    except jsonschema.SchemaError as exc:
        path = "/".join(str(p) for p in exc.path) or "(root)"
        raise ToolSchemaError(f"tool '{instance.name}': parameters is not a valid JSON Schema at {path}: {exc.message}") from None
    if value.get("type", "object") != "object":
        raise ToolSchemaError(f"tool '{instance.name}': parameters must describe an object (type: object), got type {value.get('type')!r}")


Handler = Callable[[dict, ToolContext], "ToolResult | str | Awaitable[ToolResult | str]"]


@attrs.define(eq=False)
class Tool:
    """A function the model can call.

    ``parameters`` is a JSON Schema (draft 2020-12) for the arguments object; an invalid schema raises
    ToolSchemaError at construction, so a plugin cannot register one. Either pass ``handler`` (sync or async,
    ``(args, ctx) -> ToolResult | str``; sync handlers run in a worker thread) or subclass and override ``run``.
    ``timeout_s`` bounds one call in seconds (None: the agent's default). ``finishes`` declares that the tool ends
    the trajectory (its result sets ``finish``): the agent's generic examples show another tool, and its
    context-almost-full hint names it.
    """

    name: str
    description: str
    parameters: dict = attrs.field(validator=_check_schema)
    handler: Handler | None = None
    timeout_s: float | None = None
    finishes: bool = False
    _validator: Any = attrs.field(init=False, default=None, repr=False)

    def __attrs_post_init__(self) -> None:
        self._validator = jsonschema.Draft202012Validator(self.parameters)

    def validate(self, args: Any) -> None:
        """Raise ToolArgumentsError naming the first failing argument and what the schema allows."""
        if not isinstance(args, dict):
            raise ToolArgumentsError(f"arguments for '{self.name}' must be a JSON object, got {type(args).__name__}")
        errors = sorted(self._validator.iter_errors(args), key=lambda e: list(e.path))
        if errors:
            err = errors[0]
            where = ".".join(str(p) for p in err.path)
            prefix = f"argument '{where}'" if where else "arguments"
            raise ToolArgumentsError(f"{prefix} of '{self.name}': {cut_message(err.message)}")

    async def call(self, args: dict, ctx: ToolContext) -> ToolResult:
        """Validate ``args`` against the schema, then run the tool. Raises ToolArgumentsError on bad arguments."""
        self.validate(args)
        result = await self.run(args, ctx)
        if isinstance(result, str):
            return ToolResult(output=result)
        if not isinstance(result, ToolResult):
            raise TypeError(f"tool '{self.name}' returned {type(result).__name__}; expected ToolResult or str")
        return result

    async def run(self, args: dict, ctx: ToolContext) -> ToolResult | str:
        if self.handler is None:
            raise TypeError(f"tool '{self.name}' has no handler: pass handler= or subclass Tool and override run()")
        if inspect.iscoroutinefunction(self.handler):
            return await self.handler(args, ctx)
        return await asyncio.to_thread(self.handler, args, ctx)

    def schema(self) -> dict:
        """The OpenAI function-calling description of this tool."""
        return {"type": "function",
                "function": {"name": self.name, "description": self.description, "parameters": self.parameters}}

    def example_call(self) -> str:
        """A valid-looking call built from this tool's own schema (used in corrective messages)."""
        return json.dumps({"name": self.name, "arguments": example_arguments(self.parameters)}, ensure_ascii=False)


MAX_ERROR_CHARS = 400


def cut_message(message: str, limit: int = MAX_ERROR_CHARS) -> str:
    """``message`` (a schema error, which quotes the offending value whole) cut to about ``limit`` characters,
    keeping its head and tail (what the schema wanted is said last: "... is too long") and the characters left out."""
    if len(message) <= limit:
        return message
    tail = limit // 4
    return f"{message[:limit - tail]} [... {len(message) - limit} characters cut ...] {message[-tail:]}"


def example_arguments(parameters: dict) -> dict[str, Any]:
    """Placeholder arguments for a JSON Schema ``parameters`` object: each required property (else the first)
    with a value of its type (strings show their description)."""
    props = (parameters or {}).get("properties", {})
    return {key: _placeholder(props.get(key, {})) for key in (parameters or {}).get("required", list(props)[:1])}


def _placeholder(schema: dict) -> Any:
    if "enum" in schema and schema["enum"]:
        return schema["enum"][0]
    kind = schema.get("type", "string")
    if isinstance(kind, list):
        kind = kind[0]
    return {"string": f"<{schema.get('description', 'text')[:40]}>", "integer": 0, "number": 0, "boolean": False,
            "array": [], "object": {}}.get(kind, "<value>")
