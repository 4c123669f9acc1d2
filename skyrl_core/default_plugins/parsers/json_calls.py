"""Parser ``json``: bare JSON tool calls anywhere in the text."""

from __future__ import annotations

import json

from .scanner import TOOL_CALL_CLOSE, TOOL_CALL_OPEN, ParseResult, _build, _scan_json, split_reasoning


class JsonParser:
    """Bare JSON tool calls anywhere in the text: ``{"name": ..., "arguments": ...}`` objects, ```json fences,
    lists of calls, and the ``{"function": {...}}`` / ``{"tool": ..., "parameters": ...}`` shapes. Never raises."""

    name = "json"
    reads_formats = ("json", "hermes")  # the call formats (parsers.detect.FORMAT_MARKERS) it reads

    def format_call(self, name: str, arguments: dict) -> str:
        """A call as this parser reads it: the bare JSON object."""
        return json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False)

    def parse(self, text: str, finish_reason: str = "stop") -> ParseResult:
        text = text or ""
        visible, reasoning = split_reasoning(text)
        drafted = sum(len(_scan_json(r, "stop").calls) for r in reasoning)
        ex = _scan_json(visible, finish_reason)
        ex.content_parts = [p.replace(TOOL_CALL_OPEN, "").replace(TOOL_CALL_CLOSE, "") for p in ex.content_parts]
        return _build(visible, reasoning, ex, drafted, finish_reason)
