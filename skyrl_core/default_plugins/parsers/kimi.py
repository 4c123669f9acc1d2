"""The ``kimi_k2`` parser: Kimi-K2's tool-call tokens.

A message's calls sit in one section; each call is named ``functions.NAME:INDEX`` (that string is the call's id,
which Kimi's chat template renders back with the result)::

    <|tool_calls_section_begin|><|tool_call_begin|>functions.bash:0<|tool_call_argument_begin|>{"command": "ls"}<|tool_call_end|><|tool_calls_section_end|>

Arguments are JSON read as ``hermes`` reads them (the end token is looked for outside JSON strings; only
unambiguous repairs). The tokens are special tokens of Kimi's tokenizer: this parser sets
``keep_special_tokens`` so the agent loop decodes generations with them kept.
"""

from __future__ import annotations

import json
import re
from typing import Any

from .scanner import ParseResult, _Extracted, add_json_call, extract_token_calls, parse_with, prompt_parts

SECTION_BEGIN = "<|tool_calls_section_begin|>"
SECTION_END = "<|tool_calls_section_end|>"
CALL_BEGIN = "<|tool_call_begin|>"
ARGUMENT_BEGIN = "<|tool_call_argument_begin|>"
CALL_END = "<|tool_call_end|>"
_TOKENS = (SECTION_BEGIN, SECTION_END, CALL_BEGIN, ARGUMENT_BEGIN, CALL_END, "<|im_end|>")
_CALL_ID = re.compile(r"\s*(?:functions\.)?(?P<name>[^:\s]+?)(?::(?P<index>\d+))?\s*")


class KimiK2Parser:
    """Kimi-K2 ``<|tool_call_begin|>functions.NAME:N<|tool_call_argument_begin|>{json}<|tool_call_end|>`` calls;
    the call id is ``functions.NAME:N`` as written. Never raises."""

    name = "kimi_k2"
    reads_formats = ("kimi_k2",)  # the call formats (parsers.detect.FORMAT_MARKERS) it reads
    keep_special_tokens = True

    def parse(self, text: str, finish_reason: str = "stop") -> ParseResult:
        return parse_with(_extract, text, finish_reason, open_tags=(SECTION_BEGIN, CALL_BEGIN))

    def format_call(self, name: str, arguments: dict[str, Any], index: int = 0) -> str:
        return (f"{SECTION_BEGIN}{CALL_BEGIN}functions.{name}:{index}{ARGUMENT_BEGIN}"
                f"{json.dumps(arguments, ensure_ascii=False)}{CALL_END}{SECTION_END}")

    def tools_prompt(self, tool_schemas: list[dict]) -> str:
        """System-prompt text listing ``tool_schemas`` (OpenAI function schemas) and Kimi-K2's call form."""
        fns, listing, example = prompt_parts(self.format_call, tool_schemas)
        return ("# Tools\n\nYou can call these functions (JSON Schema signatures):\n" + listing + "\n\n"
                "To call functions, write one section; each call is named functions.<name>:<index> (index counts "
                "the calls of this reply from 0) and its arguments are one JSON object:\n"
                f"{SECTION_BEGIN}{CALL_BEGIN}functions.tool_name:0{ARGUMENT_BEGIN}{{\"argument\": \"value\"}}"
                f"{CALL_END}{SECTION_END}\nFor example:\n{example}")


def _read_call(head_and_body: str, raw: str, ex: _Extracted) -> None:
    head, sep, body = head_and_body.partition(ARGUMENT_BEGIN)
    if not sep:
        ex.errors.append(f"a Kimi-K2 tool call needs functions.NAME:INDEX{ARGUMENT_BEGIN}{{arguments}}; got "
                         f"{json.dumps(raw[:80], ensure_ascii=False)}")
        return
    m = _CALL_ID.fullmatch(head)
    if m is None:
        ex.errors.append(f"a Kimi-K2 call id is functions.NAME:INDEX; got {json.dumps(head[:60], ensure_ascii=False)}")
        return
    add_json_call(ex, m.group("name"), body, raw, head.strip())


def _extract(text: str, finish_reason: str) -> _Extracted:
    return extract_token_calls(text, finish_reason, CALL_BEGIN, ARGUMENT_BEGIN, CALL_END, _read_call, _TOKENS)
