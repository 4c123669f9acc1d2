"""Parser ``openai``: a server's native ``tool_calls``; plain text is read as ``hermes`` reads it."""

from __future__ import annotations

import json
import re

from skyrl_core.tools import ToolCall

from .hermes import HermesParser
from .scanner import _TRUNCATED_MSG, ParseResult, _CallError, _normalize_call, split_reasoning


class OpenAIParser:
    """A server's native tool calls (OpenAI chat-completions ``message.tool_calls``, arguments as JSON strings)
    via :meth:`parse_message`; plain text goes through :class:`HermesParser`. Never raises."""

    name = "openai"
    reads_formats = ("hermes", "json")  # the call formats (parsers.detect.FORMAT_MARKERS) it reads

    def __init__(self) -> None:
        self._text = HermesParser()

    def parse(self, text: str, finish_reason: str = "stop") -> ParseResult:
        return self._text.parse(text, finish_reason)

    def parse_message(self, message: dict, finish_reason: str = "stop") -> ParseResult:
        """Parse an assistant ``message`` dict (``content``, ``tool_calls``, optional ``reasoning_content``).

        Server-given call ids are kept; missing ones become ``call_<n>``. When the message has no
        ``tool_calls``, its content is parsed as text (models served without a tool parser emit tags).
        """
        message = message or {}
        native = message.get("tool_calls") or []
        content = message.get("content") or ""
        if isinstance(content, list):  # content parts
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        if not native:
            result = self.parse(content, finish_reason)
        else:
            visible, reasoning = split_reasoning(content)
            result = ParseResult(content=visible.strip(), reasoning="\n\n".join(r for r in reasoning if r))
            for i, item in enumerate(native):
                raw = json.dumps(item, ensure_ascii=False, default=str)
                try:
                    name, args = _normalize_call(item)
                except _CallError as exc:
                    if finish_reason == "length" and i == len(native) - 1:
                        result.truncated = True
                        result.errors.append(_TRUNCATED_MSG)
                    else:
                        result.errors.append(str(exc))
                    continue
                call_id = item.get("id") if isinstance(item, dict) else None
                result.calls.append(ToolCall(name=name, arguments=args, id=call_id or f"call_{i}", raw=raw))
        extra = message.get("reasoning_content") or message.get("reasoning")
        if isinstance(extra, str) and extra.strip():
            result.drafted += len(HermesParser._extract(extra, "stop").calls)
            result.reasoning = "\n\n".join(r for r in (extra.strip(), result.reasoning) if r)
        return result
