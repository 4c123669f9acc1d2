"""The ``glm45`` parser: GLM-4.5 / GLM-4.6's tool-call form (``<think>`` reasoning is split off as for ``hermes``)::

    <tool_call>bash
    <arg_key>command</arg_key>
    <arg_value>grep -n "</arg_value>" src/</arg_value>
    </tool_call>

The function name is the first line after ``<tool_call>``; each argument is an ``<arg_key>``/``<arg_value>`` pair.
Values are raw text (code and quotes need no escaping); a value ends at the first ``</arg_value>`` followed (after
whitespace) by the next ``<arg_key>``, by ``</tool_call>`` or by the end of the text. Types as for
``qwen3_coder``: a value is a string unless the tool's JSON Schema gives the parameter another type, then it is
read as JSON (GLM's template writes non-string values as JSON). A key given twice is an error. Under
``finish_reason == "length"`` a call whose ``</tool_call>`` never came is not run. A ``<tool_call>`` whose body
is a JSON object is read as ``hermes`` reads it.
"""

from __future__ import annotations

import json
import re
from typing import Any, Sequence

from .scanner import (_TOOL_NAME, TOOL_CALL_CLOSE, TOOL_CALL_OPEN, ParseResult, _Extracted, _parse_tag_body,
                      _tag_body_end, parse_with, prompt_parts)
from .xml_parameters import _parameter_types, _typed, value_end

KEY_OPEN, KEY_CLOSE = "<arg_key>", "</arg_key>"
VALUE_OPEN, VALUE_CLOSE = "<arg_value>", "</arg_value>"
_AFTER_VALUE = re.compile(r"\s*(?:<arg_key>|</tool_call>|$)")
_PAIR_HEAD = re.compile(r"\s*<arg_key>(?P<key>.*?)</arg_key>\s*<arg_value>", re.S)
_END_TOKENS = ("<|observation|>", "<|user|>", "<|endoftext|>")


class GLM45Parser:
    """GLM-4.5 ``<tool_call>NAME<arg_key>k</arg_key><arg_value>v</arg_value></tool_call>`` calls. Never raises."""

    name = "glm45"
    reads_formats = ("glm45", "hermes")  # the call formats (parsers.detect.FORMAT_MARKERS) it reads
    needs_tool_schemas = True
    keep_special_tokens = True

    def parse(self, text: str, finish_reason: str = "stop",
              tool_schemas: Sequence[dict] | None = None) -> ParseResult:
        types = _parameter_types(tool_schemas or ())
        return parse_with(lambda t, f: _extract(t, f, types), text, finish_reason, open_tags=(TOOL_CALL_OPEN,))

    def format_call(self, name: str, arguments: dict[str, Any]) -> str:
        """One call as GLM-4.5's template writes it (non-string values as JSON)."""
        pairs = "".join(f"{KEY_OPEN}{k}{KEY_CLOSE}\n{VALUE_OPEN}"
                        f"{v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)}{VALUE_CLOSE}\n"
                        for k, v in arguments.items())
        return f"{TOOL_CALL_OPEN}{name}\n{pairs}{TOOL_CALL_CLOSE}"

    def tools_prompt(self, tool_schemas: list[dict]) -> str:
        """System-prompt text listing ``tool_schemas`` (OpenAI function schemas) in GLM-4.5's layout."""
        fns, listing, example = prompt_parts(self.format_call, tool_schemas)
        return ("# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided "
                f"with function signatures within <tools></tools> XML tags:\n<tools>\n{listing}\n</tools>\n\n"
                "For each function call, output the function name and arguments within the following XML format "
                "(values are written as they are; code and quotes need no escaping):\n"
                f"{TOOL_CALL_OPEN}{{function-name}}\n{KEY_OPEN}{{arg-key-1}}{KEY_CLOSE}\n"
                f"{VALUE_OPEN}{{arg-value-1}}{VALUE_CLOSE}\n...\n{TOOL_CALL_CLOSE}\nFor example:\n{example}")


def _extract(text: str, finish_reason: str, types: dict[str, dict[str, Any]]) -> _Extracted:
    ex = _Extracted()
    pos = last = 0
    while True:
        start = text.find(TOOL_CALL_OPEN, pos)
        if start == -1:
            break
        ex.content_parts.append(text[last:start])
        i = start + len(TOOL_CALL_OPEN)
        if text[i:].lstrip().startswith(("{", "[")):  # a Hermes JSON body
            end, closed, values = _tag_body_end(text, i, TOOL_CALL_OPEN, TOOL_CALL_CLOSE)
            if not closed and end >= len(text) and finish_reason == "length":
                ex.cut()
                last = pos = len(text)
                break
            stop = end + len(TOOL_CALL_CLOSE) if closed else end
            _parse_tag_body(text[i:end], text[start:stop], ex, values)
            last = pos = stop
            continue
        line_end = min((at for at in (text.find(t, i) for t in ("\n", KEY_OPEN, TOOL_CALL_CLOSE)) if at != -1),
                       default=len(text))
        name = text[i:line_end].strip()
        i = line_end
        args: dict[str, Any] = {}
        error = None
        while True:
            p = _PAIR_HEAD.match(text, i)
            if p is None:
                break
            key = p.group("key").strip()
            end = value_end(text, p.end(), VALUE_CLOSE, _AFTER_VALUE)
            if end == -1:
                error = "cut" if finish_reason == "length" else \
                    f"argument '{key}' of '{name}' has no closing {VALUE_CLOSE}"
                i = len(text)
                break
            if key in args:
                error = f"argument '{key}' is given twice in the call of '{name}'; give each argument once"
            args[key] = _typed(text[p.end():end], types.get(name, {}).get(key, "string"))
            i = end + len(VALUE_CLOSE)
        rest = text[i:].lstrip()
        if rest.startswith(TOOL_CALL_CLOSE):
            i = text.index(TOOL_CALL_CLOSE, i) + len(TOOL_CALL_CLOSE)
        elif error is None:
            if not rest or rest in _END_TOKENS:  # ends after the last value: cut off, or the end tag was a stop
                error = "cut" if finish_reason == "length" else None
                i = len(text)
            elif not rest.startswith(TOOL_CALL_OPEN):
                error = (f"the call of '{name}' has text that is not an {KEY_OPEN}/{VALUE_OPEN} pair before its "
                         f"{TOOL_CALL_CLOSE}: {json.dumps(rest[:60], ensure_ascii=False)}")
                close = text.find(TOOL_CALL_CLOSE, i)
                i = close + len(TOOL_CALL_CLOSE) if close != -1 else len(text)
        if error == "cut":
            ex.cut()
            last = pos = len(text)
            break
        if error is not None:
            ex.errors.append(error)
        elif not _TOOL_NAME.fullmatch(name):
            ex.errors.append(f"{TOOL_CALL_OPEN}{name[:60]} does not name a tool (letters, digits, _ . - : /)")
        else:
            ex.calls.append((name, args, text[start:i]))
        last = pos = max(i, start + len(TOOL_CALL_OPEN))
    ex.content_parts.append(text[last:])
    parts = []
    for p in ex.content_parts:
        for token in (TOOL_CALL_CLOSE, *_END_TOKENS):
            p = p.replace(token, "")
        parts.append(p)
    ex.content_parts = parts
    return ex
