"""Parser ``hermes`` (the default): ``<tool_call>{json}</tool_call>`` blocks."""

from __future__ import annotations

from .scanner import TOOL_CALL_CLOSE, TOOL_CALL_OPEN, ParseResult, _Extracted, _scan_json, _scan_tags, parse_with


class HermesParser:
    """``<tool_call>{json}</tool_call>`` blocks (Hermes, Qwen2.5/3, many fine-tunes); the tolerant JSON scan of
    :class:`JsonParser` when a message has no ``<tool_call>`` tag. Never raises."""

    name = "hermes"
    reads_formats = ("hermes", "json")  # the call formats (parsers.detect.FORMAT_MARKERS) it reads

    def parse(self, text: str, finish_reason: str = "stop") -> ParseResult:
        return parse_with(self._extract, text, finish_reason)

    @staticmethod
    def _extract(text: str, finish_reason: str) -> _Extracted:
        if TOOL_CALL_OPEN in text:
            return _scan_tags(text, finish_reason)
        ex = _scan_json(text, finish_reason)
        ex.content_parts = [p.replace(TOOL_CALL_CLOSE, "") for p in ex.content_parts]
        return ex
