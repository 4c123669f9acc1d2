"""The ``harmony`` parser: gpt-oss's harmony format.

A generation is a run of messages, each a header and a body; a tool call is a message on the ``commentary``
channel addressed ``to=functions.NAME`` whose body is the JSON arguments, ended by ``<|call|>``::

    <|channel|>analysis<|message|>I should list the files.<|end|><|start|>assistant<|channel|>commentary to=functions.bash <|constrain|>json<|message|>{"command": "ls"}<|call|>

The recipient may also stand before the channel (``<|start|>assistant to=functions.bash<|channel|>commentary
json<|message|>...``). ``analysis`` bodies are reasoning (calls drafted there are not run), ``final`` and
un-addressed ``commentary`` bodies are content. The end token is looked for outside JSON strings; arguments are
read as ``hermes`` reads JSON (only unambiguous repairs). Under ``finish_reason == "length"`` a call whose body
never ended is not run.

Harmony's tokens are special tokens of gpt-oss's tokenizer: this parser sets ``keep_special_tokens`` so the
agent loop decodes generations with them kept. Text decoded without them (``commentary to=functions.bash
json{"command": "ls"}``) is read too: the JSON object right after ``to=functions.NAME`` is the call.
"""

from __future__ import annotations

import json
import re
from typing import Any

from .repair import _read_prefix
from .scanner import ParseResult, _build, _Extracted, add_json_call, find_tag_outside_strings, prompt_parts

START, CHANNEL, MESSAGE, CONSTRAIN = "<|start|>", "<|channel|>", "<|message|>", "<|constrain|>"
END, CALL, RETURN = "<|end|>", "<|call|>", "<|return|>"
_TOKENS = (START, CHANNEL, MESSAGE, CONSTRAIN, END, CALL, RETURN)
_RECIPIENT = re.compile(r"\bto=(?P<to>[^\s<]+)")
_CHANNEL = re.compile(r"<\|channel\|>\s*(?P<channel>\w+)")
_CUT_HEADER = re.compile(r"\bto=\S*\s*(?:<\|constrain\|>)?\s*(?:json)?\s*$")
_BARE_CALL = re.compile(r"\bto=(?:functions\.)?(?P<name>[\w.\-:/]+?)\s*(?:<\|constrain\|>)?\s*(?:json)?\s*"
                        r"(?:<\|message\|>)?\s*(?=\{)")


class HarmonyParser:
    """gpt-oss ``<|channel|>commentary to=functions.NAME<|message|>{json}<|call|>`` calls. Never raises."""

    name = "harmony"
    reads_formats = ("harmony",)  # the call formats (parsers.detect.FORMAT_MARKERS) it reads
    keep_special_tokens = True

    def parse(self, text: str, finish_reason: str = "stop") -> ParseResult:
        text = text or ""
        if MESSAGE not in text:
            return _bare(text, finish_reason)
        ex, reasoning = _extract(text, finish_reason)
        drafted = sum(1 for r in reasoning if _BARE_CALL.search(r))
        return _build(text, reasoning, ex, drafted, finish_reason, open_tags=(START, CHANNEL))

    def format_call(self, name: str, arguments: dict[str, Any]) -> str:
        return (f"{CHANNEL}commentary to=functions.{name} {CONSTRAIN}json{MESSAGE}"
                f"{json.dumps(arguments, ensure_ascii=False)}{CALL}")

    def tools_prompt(self, tool_schemas: list[dict]) -> str:
        """System-prompt text listing ``tool_schemas`` in harmony's ``namespace functions`` layout."""
        fns, _, example = prompt_parts(self.format_call, tool_schemas)
        lines = ["# Tools", "", "## functions", "", "namespace functions {", ""]
        for fn in fns:
            lines.append(f"// {fn.get('description', '')}")
            params = json.dumps(fn.get("parameters") or {}, ensure_ascii=False)
            lines.append(f"type {fn.get('name', '')} = (_: {params}) => any;")
            lines.append("")
        lines.append("} // namespace functions")
        lines += ["", "Calls to these tools must go to the commentary channel: 'functions'. Write a call as:",
                  f"{CHANNEL}commentary to=functions.tool_name {CONSTRAIN}json{MESSAGE}{{\"argument\": \"value\"}}"
                  f"{CALL}", f"For example:\n{example}"]
        return "\n".join(lines)


def _extract(text: str, finish_reason: str) -> tuple[_Extracted, list[str]]:
    ex = _Extracted()
    reasoning: list[str] = []
    pos = 0
    while pos < len(text):
        at = text.find(MESSAGE, pos)
        if at == -1:
            tail = text[pos:]
            if _RECIPIENT.search(tail) and finish_reason == "length":  # a call header cut off
                ex.cut()
            else:
                ex.content_parts.append(_strip_header(tail))
            break
        header = text[pos:at]
        body_start = at + len(MESSAGE)
        recipient = _RECIPIENT.search(header)
        channel = _CHANNEL.search(header)
        if recipient is not None:
            end, tag = find_tag_outside_strings(text, body_start, (CALL, END, RETURN, START))
        else:
            end, tag = min(((e, t) for t in (CALL, END, RETURN, START) if (e := text.find(t, body_start)) != -1),
                           default=(-1, None))
        stop = len(text) if end == -1 else end + (len(tag) if tag != START else 0)
        body = text[body_start:len(text) if end == -1 else end]
        if recipient is not None:
            if end == -1 and finish_reason == "length":
                ex.cut()
                break
            name = recipient.group("to")
            name = name[len("functions."):] if name.startswith("functions.") else name
            add_json_call(ex, name, body, text[pos:stop])
        elif channel is not None and channel.group("channel") == "analysis":
            reasoning.append(body.strip())
        else:
            ex.content_parts.append(body)
        pos = stop
    return ex, reasoning


def _strip_header(text: str) -> str:
    for token in _TOKENS:
        text = text.replace(token, "")
    return text


def _bare(text: str, finish_reason: str) -> ParseResult:
    """Harmony text decoded without its special tokens: a JSON object right after ``to=functions.NAME``."""
    ex = _Extracted()
    pos = last = 0
    for m in _BARE_CALL.finditer(text):
        if m.start() < pos:
            continue
        got = _read_prefix(text, m.end())
        if got is None:
            if finish_reason == "length":
                ex.cut()
                ex.content_parts.append(text[last:m.start()])
                last = pos = len(text)
                break
            ex.errors.append(f"could not read the arguments of '{m.group('name')}': not one JSON object")
            continue
        value, end = got
        ex.content_parts.append(text[last:m.start()])
        if isinstance(value, dict):
            add_json_call(ex, m.group("name"), json.dumps(value), text[m.start():end])
        else:
            ex.errors.append(f"the arguments of '{m.group('name')}' must be a JSON object")
        last = pos = end
    ex.content_parts.append(text[last:])
    if finish_reason == "length" and not ex.truncated and _CUT_HEADER.search(text):
        ex.cut()
    ex.content_parts = [_strip_header(p) for p in ex.content_parts]
    return _build(text, [], ex, 0, finish_reason, open_tags=(START, CHANNEL))
