"""The ``mistral_v11`` parser: Mistral's tool-call tokens from tokenizer v11 on (Mistral-Small-3.1/3.2,
Magistral, Devstral)::

    [TOOL_CALLS]bash[ARGS]{"command": "ls"}[TOOL_CALLS]finish[ARGS]{"answer": "4"}

Each call is ``[TOOL_CALLS]NAME[ARGS]{json}``; a ``[CALL_ID]id`` between name and ``[ARGS]`` (some releases
write one) becomes the call's id. The older form ``[TOOL_CALLS][{"name": ..., "arguments": {...}}, ...]``
(tokenizer v3; v7 adds an ``"id"`` to each, kept as the call's id) is read too. A call's arguments run to the
next ``[TOOL_CALLS]`` outside a JSON string, or to the end of the message, and are read as ``hermes`` reads JSON
(only unambiguous repairs). ``[TOOL_CALLS]`` and ``[ARGS]`` are special tokens of Mistral's tokenizers: this
parser sets ``keep_special_tokens`` so the agent loop decodes generations with them kept.
"""

from __future__ import annotations

import json
import re
from typing import Any

from .repair import JSONRepairError, loads_tolerant, loads_tolerant_many
from .scanner import (ParseResult, _CallError, _expand, _Extracted, _normalize_call, find_tag_outside_strings,
                      parse_with, prompt_parts)

TOOL_CALLS = "[TOOL_CALLS]"
ARGS = "[ARGS]"
CALL_ID = "[CALL_ID]"
_EOS = ("</s>",)
_HEAD = re.compile(r"\s*(?P<name>[^\[\]{}\s]+)\s*(?:\[CALL_ID\]\s*(?P<id>[^\[\s]*)\s*)?\[ARGS\]")


class MistralV11Parser:
    """Mistral ``[TOOL_CALLS]NAME[ARGS]{json}`` calls (tokenizer v11+), and the v3 ``[TOOL_CALLS][{...}]`` list.
    Never raises."""

    name = "mistral_v11"
    reads_formats = ("mistral_v11",)  # the call formats (parsers.detect.FORMAT_MARKERS) it reads
    keep_special_tokens = True

    def parse(self, text: str, finish_reason: str = "stop") -> ParseResult:
        return parse_with(_extract, text, finish_reason, open_tags=(TOOL_CALLS,))

    def format_call(self, name: str, arguments: dict[str, Any]) -> str:
        return f"{TOOL_CALLS}{name}{ARGS}{json.dumps(arguments, ensure_ascii=False)}"

    def tools_prompt(self, tool_schemas: list[dict]) -> str:
        """System-prompt text listing ``tool_schemas`` (as Mistral's ``[AVAILABLE_TOOLS]`` JSON) and the call form."""
        fns, _, example = prompt_parts(self.format_call, tool_schemas)
        listing = json.dumps([{"type": "function", "function": fn} for fn in fns], ensure_ascii=False)
        return (f"You can call these tools: {listing}\n\nTo call a tool, write {TOOL_CALLS}, the tool's name, "
                f"{ARGS} and the arguments as one JSON object; several calls follow one another:\n"
                f"{TOOL_CALLS}tool_name{ARGS}{{\"argument\": \"value\"}}\nFor example:\n{example}")


def _body(text: str, start: int) -> int:
    """End of a call body starting at ``start``: the next ``[TOOL_CALLS]`` outside JSON strings, else the end."""
    at, _ = find_tag_outside_strings(text, start, (TOOL_CALLS,))
    return at if at != -1 else len(text)


def _strip_eos(body: str) -> str:
    body = body.rstrip()
    for eos in _EOS:
        if body.endswith(eos):
            body = body[:-len(eos)].rstrip()
    return body


def _loads(body: str, cut: bool) -> Any:
    """The JSON value of a call body; a body cut off by max tokens gets no bracket closing (that would be a
    guess at the rest of the call)."""
    if not cut:
        return loads_tolerant(body)
    values = loads_tolerant_many(body, close_brackets=False)
    if len(values) != 1:
        raise JSONRepairError(f"expected one JSON value, found {len(values)}", at_end=True)
    return values[0]


def _extract(text: str, finish_reason: str) -> _Extracted:
    ex = _Extracted()
    pos = last = 0
    while (start := text.find(TOOL_CALLS, pos)) != -1:
        ex.content_parts.append(text[last:start])
        m = _HEAD.match(text, start + len(TOOL_CALLS))  # None: the v3 form, a JSON list of calls
        body_start = m.end() if m else start + len(TOOL_CALLS)
        end = _body(text, body_start)
        body = _strip_eos(text[body_start:end])
        cut = finish_reason == "length" and end == len(text)
        last = pos = end
        if cut and not body.strip():  # cut before its arguments
            ex.cut()
            break
        if m is None and body.lstrip()[:1] not in ("[", "{"):
            if cut:
                ex.cut()
                break
            ex.errors.append(f"a Mistral tool call is {TOOL_CALLS}NAME{ARGS}{{arguments}}; got "
                             f"{json.dumps(text[start:end][:80], ensure_ascii=False)}")
            continue
        try:
            value = _loads(body, cut) if body else {}
        except JSONRepairError as exc:
            if cut and exc.at_end:
                ex.cut()
                break
            what = f"the arguments of '{m.group('name')}'" if m else f"the tool calls after {TOOL_CALLS}"
            ex.errors.append(f"could not read {what}: {exc.message}")
            continue
        for obj in [{"name": m.group("name"), "arguments": value}] if m else _expand(value):
            try:
                call_id = m.group("id") if m else obj.get("id") if isinstance(obj, dict) else None
                ex.calls.append((*_normalize_call(obj), text[start:end], call_id if isinstance(call_id, str) else None))
            except _CallError as exc:
                ex.errors.append(str(exc))
    ex.content_parts.append(text[last:])
    ex.content_parts = [p.replace(ARGS, "").replace("</s>", "") for p in ex.content_parts]
    return ex
