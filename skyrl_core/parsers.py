"""Tool-call parsers: generated text -> tool calls. Registrable through ``register_parsers``.

A parser is an object with a ``name`` and ``parse(text, finish_reason) -> ParseResult``.
"""

from __future__ import annotations

import attrs

from .tools import ToolCall


@attrs.define
class ParseResult:
    """``calls``: calls to execute, in order; ``content``: the message text kept in the transcript (text
    outside the calls); ``errors``: one message per call that could not be parsed (shown to the model);
    ``truncated``: a call was cut off by max tokens (never executed); ``drafted``: calls seen only inside a
    reasoning block (not executed)."""

    calls: list[ToolCall] = attrs.Factory(list)
    content: str = ""
    errors: list[str] = attrs.Factory(list)
    truncated: bool = False
    drafted: int = 0
