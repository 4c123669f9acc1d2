"""The ``qwen3_coder`` parser: the XML-parameter tool-call form of Qwen3-Coder and SkyRL-Agent.

A call is written as (the ``<tool_call>`` wrapper is optional; several calls may follow one another)::

    <tool_call>
    <function=str_replace_editor>
    <parameter=command>
    str_replace
    </parameter>
    <parameter=old_str>
    return "</parameter>"
    </parameter>
    </function>
    </tool_call>

Parameter values are raw text: they may hold code, markup, quotes and closing-tag text. A value ends at the first
``</parameter>`` that is followed (after whitespace) by the next ``<parameter=``, by ``</function>`` or by the end
of the text; the ``</function>`` that ends a call is the first one followed by ``</tool_call>``, a new call or the
end. One newline after ``<parameter=name>`` and one before ``</parameter>`` belong to the layout and are removed.

Types: values are strings unless the tool's JSON Schema (``parse(..., tool_schemas=...)``; the agent loop passes
the trajectory's tools because this parser sets ``needs_tool_schemas``) gives the parameter another type, in
which case the value is read as JSON (``3``, ``true``, ``[1, 2]``, ``{"a": 1}``); a value that does not read as
its type stays a string, and the tool's schema check names it. A parameter given twice is an error (which value
was meant is a guess). Cut-off rule as for ``hermes``: under ``finish_reason == "length"`` a call whose
``</function>`` never came is not run.
"""

from __future__ import annotations

import json
import re
from typing import Any, Sequence

from .scanner import _TOOL_NAME, ParseResult, TOOL_CALL_CLOSE, TOOL_CALL_OPEN, _Extracted, parse_with, prompt_parts

FUNCTION_OPEN = "<function="
FUNCTION_CLOSE = "</function>"
PARAMETER_OPEN = "<parameter="
PARAMETER_CLOSE = "</parameter>"

_HEAD = re.compile(r"<function=([^>\n]*)>")
_PARAM_HEAD = re.compile(r"\s*<parameter=([^>\n]*)>")
_AFTER_VALUE = re.compile(r"\s*(?:<parameter=|</function>|$)")
_CALL_CLOSE = re.compile(r"\s*</function>(?:\s*</tool_call>)?")


class XmlParameterParser:
    """``<function=name><parameter=p>value</parameter></function>`` calls (Qwen3-Coder, SkyRL-Agent's SWE
    agent), optionally inside ``<tool_call>`` tags. Never raises."""

    name = "qwen3_coder"
    reads_formats = ("qwen3_coder",)  # the call formats (parsers.detect.FORMAT_MARKERS) it reads
    needs_tool_schemas = True

    def parse(self, text: str, finish_reason: str = "stop",
              tool_schemas: Sequence[dict] | None = None) -> ParseResult:
        types = _parameter_types(tool_schemas or ())
        return parse_with(lambda t, f: _extract(t, f, types), text, finish_reason,
                          open_tags=(FUNCTION_OPEN, TOOL_CALL_OPEN))

    def format_call(self, name: str, arguments: dict[str, Any]) -> str:
        """One call in this form (non-string values written as JSON)."""
        params = "".join(f"<parameter={k}>\n{v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)}\n"
                         f"{PARAMETER_CLOSE}\n" for k, v in arguments.items())
        return f"{TOOL_CALL_OPEN}\n<function={name}>\n{params}{FUNCTION_CLOSE}\n{TOOL_CALL_CLOSE}"

    def tools_prompt(self, tool_schemas: list[dict]) -> str:
        """System-prompt text listing ``tool_schemas`` (OpenAI function schemas) and how to call them."""
        fns, listing, example = prompt_parts(self.format_call, tool_schemas)
        return ("# Tools\n\nYou can call these functions (their signatures, as JSON Schema, are inside "
                f"<tools></tools>):\n<tools>\n{listing}\n</tools>\n\n"
                "To call a function, write it in this form, one <parameter=...> block per argument; values are "
                "written as they are (code and quotes need no escaping):\n"
                f"{example}\n\nReply with the call and nothing after it; its result comes back to you.")


def _parameter_types(tool_schemas: Sequence[dict]) -> dict[str, dict[str, Any]]:
    """{tool name: {parameter: JSON Schema type}} from OpenAI function schemas."""
    out: dict[str, dict[str, Any]] = {}
    for schema in tool_schemas:
        fn = schema.get("function", schema) if isinstance(schema, dict) else {}
        props = (fn.get("parameters") or {}).get("properties") or {}
        out[str(fn.get("name"))] = {k: (v or {}).get("type", "string") for k, v in props.items()
                                    if isinstance(v, dict)}
    return out


def _typed(value: str, kind: Any) -> Any:
    kinds = kind if isinstance(kind, list) else [kind]
    if not kinds or "string" in kinds:
        return value
    try:
        parsed = json.loads(value)
    except ValueError:
        lowered = value.strip()
        if "boolean" in kinds and lowered in ("True", "False"):
            return lowered == "True"
        return value
    names = {bool: "boolean", int: "integer", float: "number", list: "array", dict: "object", type(None): "null"}
    got = names.get(type(parsed))
    if got in kinds or (got == "integer" and "number" in kinds):
        return parsed
    return value


def _strip_layout(value: str) -> str:
    value = value[1:] if value.startswith("\n") else value
    return value[:-1] if value.endswith("\n") else value


def value_end(text: str, start: int, close: str = PARAMETER_CLOSE, after: re.Pattern = _AFTER_VALUE) -> int:
    """Index of the ``close`` tag that ends the raw value starting at ``start``: the first one that ``after``
    matches right behind (the next parameter, the end of the call, or the end of the text); -1 when there is
    none. Shared with GLM-4.5's ``</arg_value>``."""
    at = text.find(close, start)
    while at != -1:
        if after.match(text, at + len(close)):
            return at
        at = text.find(close, at + 1)
    return -1


def _extract(text: str, finish_reason: str, types: dict[str, dict[str, Any]]) -> _Extracted:
    ex = _Extracted()
    pos = last = 0
    while True:
        m = _HEAD.search(text, pos)
        if m is None:
            break
        name = m.group(1).strip()
        start = m.start()
        wrapper = text.rfind(TOOL_CALL_OPEN, last, start)
        if wrapper != -1 and not text[wrapper + len(TOOL_CALL_OPEN):start].strip():
            start = wrapper
        ex.content_parts.append(text[last:start])
        i = m.end()
        args: dict[str, Any] = {}
        error = None
        while True:
            p = _PARAM_HEAD.match(text, i)
            if p is None:
                break
            key = p.group(1).strip()
            end = value_end(text, p.end())
            if end == -1:
                error = "cut" if finish_reason == "length" else \
                    f"parameter '{key}' of '{name}' has no closing </parameter>"
                i = len(text)
                break
            if key in args:
                error = (f"parameter '{key}' is given twice in the call of '{name}'; give each parameter once")
            args[key] = _typed(_strip_layout(text[p.end():end]), types.get(name, {}).get(key, "string"))
            i = end + len(PARAMETER_CLOSE)
        close = _CALL_CLOSE.match(text, i)
        rest = text[i:].lstrip()
        if close is not None:
            i = close.end()
        elif error is None:
            if rest.startswith(TOOL_CALL_CLOSE):  # </function> left out inside a closed wrapper
                i = text.index(TOOL_CALL_CLOSE, i) + len(TOOL_CALL_CLOSE)
            elif not rest:  # ends after the last parameter: cut off, or </function> was a stop string
                error = "cut" if finish_reason == "length" else None
            elif not rest.startswith((TOOL_CALL_OPEN, FUNCTION_OPEN)):
                error = (f"the call of '{name}' has text that is not a <parameter=...> block before its "
                         f"</function>: {json.dumps(rest[:60], ensure_ascii=False)}")
        raw = text[start:i]
        if error == "cut":
            ex.cut()
            last = pos = len(text)
            break
        if error is not None:
            ex.errors.append(error)
        elif not _TOOL_NAME.fullmatch(name):
            ex.errors.append(f"<function={name[:60]}> does not name a tool (letters, digits, _ . - : /)")
        else:
            ex.calls.append((name, args, raw))
        last = pos = max(i, m.end())
    ex.content_parts.append(text[last:])
    ex.content_parts = [p.replace(TOOL_CALL_OPEN, "").replace(TOOL_CALL_CLOSE, "") for p in ex.content_parts]
    return ex
