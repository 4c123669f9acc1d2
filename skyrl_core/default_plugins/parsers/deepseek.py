"""The ``deepseek_v31`` parser: DeepSeek-V3.1's tool-call tokens.

A message's calls sit in one block (the separators are the model's added tokens, full-width bar U+FF5C and
U+2581 in place of spaces)::

    <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>bash<｜tool▁sep｜>{"command": "ls"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>

The DeepSeek-V3 / R1 form, ``<｜tool▁call▁begin｜>function<｜tool▁sep｜>bash\\n```json\\n{...}\\n```<｜tool▁call▁end｜>``,
is read too. Arguments are JSON read as ``hermes`` reads them (the closing token is looked for outside JSON
strings; only unambiguous repairs). These tokens are special tokens of DeepSeek's tokenizer: decode generations
with them kept (they are not dropped by ``skip_special_tokens`` only when the tokenizer marks them
``special=False``, as DeepSeek-V3.1's does).
"""

from __future__ import annotations

import json
import re
from typing import Any

from .scanner import ParseResult, _Extracted, add_json_call, extract_token_calls, parse_with, prompt_parts

CALLS_BEGIN = "<｜tool▁calls▁begin｜>"
CALLS_END = "<｜tool▁calls▁end｜>"
CALL_BEGIN = "<｜tool▁call▁begin｜>"
CALL_END = "<｜tool▁call▁end｜>"
SEP = "<｜tool▁sep｜>"
_TOKENS = (CALLS_BEGIN, CALLS_END, CALL_BEGIN, CALL_END, SEP)
_V3_BODY = re.compile(r"\s*(?P<name>[^\n`]+?)\s*\n\s*```(?:json)?\s*\n(?P<args>.*)\n\s*```\s*$", re.S)


class DeepSeekV31Parser:
    """DeepSeek-V3.1 ``<｜tool▁call▁begin｜>name<｜tool▁sep｜>{json}<｜tool▁call▁end｜>`` calls (and the V3 form).
    Never raises."""

    name = "deepseek_v31"
    reads_formats = ("deepseek_v31",)  # the call formats (parsers.detect.FORMAT_MARKERS) it reads

    def parse(self, text: str, finish_reason: str = "stop") -> ParseResult:
        return parse_with(_extract, text, finish_reason, open_tags=(CALLS_BEGIN, CALL_BEGIN))

    def format_call(self, name: str, arguments: dict[str, Any]) -> str:
        return (f"{CALLS_BEGIN}{CALL_BEGIN}{name}{SEP}{json.dumps(arguments, ensure_ascii=False)}{CALL_END}"
                f"{CALLS_END}")

    def tools_prompt(self, tool_schemas: list[dict]) -> str:
        """System-prompt text listing ``tool_schemas`` in DeepSeek-V3.1's layout and how to call them."""
        fns, _, example = prompt_parts(self.format_call, tool_schemas)
        parts = ["## Tools\nYou can use these tools:"]
        for fn in fns:
            parts.append(f"### {fn.get('name', '')}\nDescription: {fn.get('description', '')}\n\nParameters: "
                         f"{json.dumps(fn.get('parameters') or {}, ensure_ascii=False)}")
        parts.append("To call tools, write exactly this form (several calls go one after another inside the "
                     "outer tokens; the arguments are one JSON object):\n"
                     f"{CALLS_BEGIN}{CALL_BEGIN}tool_name{SEP}{{\"argument\": \"value\"}}{CALL_END}{CALLS_END}\n"
                     f"For example:\n{example}")
        return "\n\n".join(parts)


def _read_call(head_and_body: str, raw: str, ex: _Extracted) -> None:
    name, sep, body = head_and_body.partition(SEP)
    if not sep:
        ex.errors.append(f"a DeepSeek tool call needs name{SEP}arguments; got "
                         f"{json.dumps(raw[:80], ensure_ascii=False)}")
        return
    name = name.strip()
    v3 = _V3_BODY.match(body)
    if name == "function" and v3 is not None:  # V3 / R1: "function<sep>name\n```json\n{...}\n```"
        name, body = v3.group("name"), v3.group("args")
    add_json_call(ex, name, body, raw)


def _extract(text: str, finish_reason: str) -> _Extracted:
    return extract_token_calls(text, finish_reason, CALL_BEGIN, SEP, CALL_END, _read_call, _TOKENS)
