"""Tool-call parsers: generated text -> tool calls. Registrable through ``register_parsers``. This module holds
what the formats share: :class:`ParseResult`, call shapes, ``<think>`` splitting and the tag/JSON scanners; the
JSON repair is in ``repair.py``, each format in its own module.

A parser is an object with a ``name`` and ``parse(text, finish_reason="stop") -> ParseResult``. The built-ins
(registered by ``skyrl_core.default_plugins.parsers``):

- ``hermes`` (default): Hermes / Qwen ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` blocks; when a
  message has no ``<tool_call>`` tag it falls back to the tolerant JSON scan below.
- ``json``: bare ``{"name": ..., "arguments": ...}`` objects anywhere in the text (also in ```json fences, as a
  list, or in the ``{"function": {...}}`` / ``{"tool": ..., "parameters": ...}`` shapes small models produce).
- ``openai``: ``parse_message(message)`` reads a server's native ``tool_calls``; ``parse(text)`` is ``hermes``.

What real models get wrong, and how it is handled:

- calls drafted inside a ``<think>...</think>`` reasoning block are not executed; they are counted in
  ``ParseResult.drafted`` and the reasoning text is returned in ``ParseResult.reasoning`` (not in ``content``);
- JSON with raw newlines/tabs or unescaped quotes inside strings (code arguments), trailing commas, single quotes
  or Python literals (``True``/``None``) is repaired: strict JSON first, then ``ast.literal_eval``, then a
  backtracking lenient reader that tries each candidate closing quote until the whole value parses;
- a call cut off by the max-token limit (``finish_reason == "length"`` and an unclosed ``<tool_call>`` or
  unbalanced JSON) is never executed: ``truncated`` is set and ``errors`` says it was cut off;
- a malformed call yields one message in ``errors`` saying what was wrong ("missing 'name'", "arguments is not an
  object", "invalid JSON at line 1 column 20: ...") so the agent loop can show it to the model.

Each parsed call gets a stable id ``call_<n>`` (n counts the executable calls of one message from 0) and its
``raw`` source text.
"""

from __future__ import annotations

import functools
import json
import re
from typing import Any, Sequence

import attrs

from skyrl_core.tools import ToolCall, example_arguments

from .repair import (_ARG_KEYS, _NAME_KEYS, AMBIGUOUS_QUOTES, JSONRepairError, _brackets_outside_strings, _json_error,
                     _read_prefix, loads_tolerant, loads_tolerant_many)


@attrs.define
class ParseResult:
    """``calls``: calls to execute, in order; ``content``: the message text kept in the transcript (text
    outside the calls and outside any reasoning block); ``errors``: one message per call that could not be
    parsed (shown to the model); ``truncated``: a call was cut off by max tokens (never executed);
    ``drafted``: calls seen only inside a reasoning block (not executed); ``reasoning``: the text of the
    reasoning (``<think>``) blocks, joined by blank lines."""

    calls: list[ToolCall] = attrs.Factory(list)
    content: str = ""
    errors: list[str] = attrs.Factory(list)
    truncated: bool = False
    drafted: int = 0
    reasoning: str = ""


TOOL_CALL_OPEN = "<tool_call>"
TOOL_CALL_CLOSE = "</tool_call>"
THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"

_TOOL_NAME = re.compile(r"[\w.\-:/]{1,128}")
_TRUNCATED_MSG = ("the tool call was cut off by the max-token limit before it was complete, so it was not run; "
                  "write a shorter call")


def prompt_parts(format_call: Any, tool_schemas: Sequence[dict]) -> tuple[list[dict], str, str]:
    """What a parser's ``tools_prompt`` is built from: the function schemas of ``tool_schemas`` (OpenAI form or
    bare), one JSON line per tool, and an example call of the first tool written by ``format_call(name, args)``
    (empty when there are no tools)."""
    fns = [s.get("function", s) for s in tool_schemas]
    listing = "\n".join(json.dumps({"type": "function", "function": fn}, ensure_ascii=False) for fn in fns)
    example = format_call(fns[0].get("name", "tool"), example_arguments(fns[0].get("parameters") or {})) \
        if fns else ""
    return fns, listing, example


def format_tool_call(name: str, arguments: dict[str, Any]) -> str:
    """Render one call the way Hermes / Qwen chat templates do: ``<tool_call>\\n{json}\\n</tool_call>``."""
    body = json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False)
    return f"{TOOL_CALL_OPEN}\n{body}\n{TOOL_CALL_CLOSE}"


# ----------------------------------------------------------------------------------------------------------
# call shapes


class _CallError(ValueError):
    pass


def _is_call_shaped(obj: Any) -> bool:
    """Whether a bare JSON object found in free text is meant as a tool call (not just any JSON the model wrote)."""
    if not isinstance(obj, dict):
        return False
    if isinstance(obj.get("function"), dict):
        return True
    if isinstance(obj.get("name"), str) and any(k in obj for k in _ARG_KEYS):
        return True
    if isinstance(obj.get("tool"), str) or isinstance(obj.get("tool_name"), str):
        return True
    if isinstance(obj.get("function"), str) and any(k in obj for k in _ARG_KEYS):
        return True
    return isinstance(obj.get("tool_calls"), list) and any(_is_call_shaped(x) for x in obj["tool_calls"])


def _normalize_call(obj: Any) -> tuple[str, dict]:
    """(name, arguments) from one call object in any of the accepted shapes. Raises _CallError saying what is wrong."""
    if not isinstance(obj, dict):
        raise _CallError(f"a tool call must be a JSON object with 'name' and 'arguments', got {type(obj).__name__}")
    if isinstance(obj.get("function"), dict):  # OpenAI shape: {"type": "function", "function": {...}}
        inner = obj["function"]
        obj = {**{k: v for k, v in obj.items() if k != "function"}, **inner}
    name = None
    for key in _NAME_KEYS:
        if key in obj:
            name = obj[key]
            break
    if name is None:
        raise _CallError("missing 'name': a tool call needs {\"name\": ..., \"arguments\": {...}}")
    if not isinstance(name, str) or not _TOOL_NAME.fullmatch(name.strip()):
        raise _CallError(f"'name' must be a tool name (letters, digits, _ . - : /), got "
                         f"{json.dumps(name, default=str, ensure_ascii=False)[:60]}")
    args: Any = {}
    for key in _ARG_KEYS:
        if key in obj:
            args = obj[key]
            break
    if args is None:
        args = {}
    if isinstance(args, str):
        text = args.strip()
        if not text:
            args = {}
        else:
            try:
                args = loads_tolerant(text)
            except JSONRepairError as exc:
                raise _CallError(f"arguments of '{name}' is a string that is not valid JSON ({exc.message})") from None
    if not isinstance(args, dict):
        raise _CallError(f"arguments is not an object: '{name}' got {type(args).__name__}; "
                         f"arguments must be a JSON object of parameter names to values")
    return name.strip(), args


def _expand(value: Any) -> list[Any]:
    """One parsed value -> the call objects in it (a list of calls, or {"tool_calls": [...]})."""
    if isinstance(value, list):
        return list(value)
    if isinstance(value, dict) and isinstance(value.get("tool_calls"), list) and not (
            "name" in value or "function" in value):
        return list(value["tool_calls"])
    return [value]


# ----------------------------------------------------------------------------------------------------------
# reasoning blocks


_THINK = re.compile(re.escape(THINK_OPEN))


def split_reasoning(text: str, call_tags: Sequence[str] = ()) -> tuple[str, list[str]]:
    """Split ``<think>...</think>`` blocks out of ``text``: (text without them, [reasoning texts]).

    A block opens with a ``<think>`` before the first of ``call_tags`` outside a block (reasoning comes before
    the calls; a ``<think>`` after a call's opening tag is text of the call, e.g. of an argument). An unclosed
    ``<think>`` runs to the end; a ``</think>`` with no opening (templates that put ``<think>`` in the prompt)
    makes everything before it reasoning — when it comes before the first call tag (after one it is text of the
    call: an argument may hold ``</think>``).
    """
    reasoning: list[str] = []
    first_close = text.find(THINK_CLOSE)
    first = _THINK.search(text)
    first_tag = min((at for at in (text.find(tag) for tag in call_tags) if at != -1), default=len(text))
    if first_close != -1 and first_close < first_tag and (first is None or first_close < first.start()):
        reasoning.append(text[:first_close])
        text = text[first_close + len(THINK_CLOSE):]
    out: list[str] = []
    pos = 0
    while True:
        m = _THINK.search(text, pos)
        if m is not None and any(0 <= text.find(tag, pos) < m.start() for tag in call_tags):
            m = None
        if m is None:
            out.append(text[pos:])
            break
        out.append(text[pos:m.start()])
        body = m.end()
        end = text.find(THINK_CLOSE, body)
        if end == -1:
            reasoning.append(text[body:])
            break
        reasoning.append(text[body:end])
        pos = end + len(THINK_CLOSE)
    return "".join(out), [r.strip() for r in reasoning]


def _tidy(parts: list[str]) -> str:
    text = "\n".join(p.strip() for p in parts if p.strip())
    return re.sub(r"\n{3,}", "\n\n", text).strip()


# ----------------------------------------------------------------------------------------------------------
# extraction


@attrs.define
class _Extracted:
    calls: list[tuple] = attrs.Factory(list)  # (name, arguments, raw) or (name, arguments, raw, call id)
    content_parts: list[str] = attrs.Factory(list)
    errors: list[str] = attrs.Factory(list)
    truncated: bool = False

    def cut(self) -> None:
        """A call was cut off by the max-token limit: never run, and the model is told so."""
        self.truncated = True
        self.errors.append(_TRUNCATED_MSG)


def add_json_call(ex: _Extracted, name: str, body: str, raw: str, call_id: str | None = None) -> None:
    """Add the call ``name`` with JSON arguments ``body`` (read by :func:`loads_tolerant`; empty: ``{}``) to
    ``ex``, or the error saying what is wrong with it. Shared by the formats that name the tool outside the
    JSON (DeepSeek, Kimi-K2, Mistral, harmony)."""
    try:
        args = loads_tolerant(body) if body.strip() else {}
        name, args = _normalize_call({"name": name, "arguments": args})
    except JSONRepairError as exc:
        ex.errors.append(f"could not read the arguments of '{name}': {exc.message}")
    except _CallError as exc:
        ex.errors.append(str(exc))
    else:
        ex.calls.append((name, args, raw, call_id))


_CALL_START = re.compile(
    r"(?P<fence>```[A-Za-z0-9_-]*[ \t]*\n\s*)?"
    r"(?P<obj>\{\s*[\"'](?:name|function|tool|tool_name|type|id|tool_calls)[\"']\s*:"
    r"|\[\s*\{\s*[\"'](?:name|function|tool|tool_name|type|id)[\"']\s*:)")


# Markers some chat formats put before bare JSON calls (Llama 3.1 <|python_tag|>, Mistral [TOOL_CALLS]).
_CALL_MARKERS = re.compile(r"(?:<\|python_tag\|>|\[TOOL_CALLS\])\s*$")
_NAMED_START = re.compile(r"\[?\s*\{\s*[\"'](?:name|function|tool|tool_name)[\"']\s*:")


def _unbalanced_to_end(text: str, i: int) -> bool:
    """Whether the bracket structure opened at ``text[i]`` is still open at the end of the text."""
    brackets, in_str = _brackets_outside_strings(text, i)
    depth = 0
    for c in brackets:
        depth += 1 if c in "{[" else -1
        if depth <= 0:
            return False
    return depth > 0 or in_str


def _strict_prefix(text: str, i: int) -> tuple[Any, int] | None:
    try:
        return json.JSONDecoder(strict=False).raw_decode(text, i)
    except (ValueError, RecursionError):
        return None


def _scan_json(text: str, finish_reason: str) -> _Extracted:
    """Find bare call objects in free text (the ``json`` parser and ``hermes``'s fallback)."""
    ex = _Extracted()
    pos = 0
    last = 0
    while True:
        m = _CALL_START.search(text, pos)
        if m is None:
            break
        start = m.start()
        brace = m.start("obj")
        got = _read_prefix(text, brace)
        # Cut off by max tokens with its brackets still open: never executed, even when the lenient reader
        # could repair it into a complete object (a repair of a cut call is a guess, not the model's call).
        if got is not None and finish_reason == "length" and _unbalanced_to_end(text, brace):
            got = None
        if got is None:
            if finish_reason == "length" and (_unbalanced_to_end(text, brace) or _json_error(text[brace:])[1]):
                ex.cut()
                ex.content_parts.append(text[last:start])
                last = len(text)
                break
            if _NAMED_START.match(text, brace):  # only report what is clearly meant as a call
                message, _ = _json_error(text[brace:].split("\n\n", 1)[0])
                if _strict_prefix(text, brace) is not None:  # valid JSON, but only one of its readings
                    message = f"{message}; {AMBIGUOUS_QUOTES}"
                ex.errors.append(f"could not read the tool call: {message}")
            pos = m.end()
            continue
        value, end = got
        calls = _expand(value)
        if not any(_is_call_shaped(c) for c in calls):
            pos = end
            continue
        end_full = end
        if m.group("fence"):  # drop the closing fence with the call
            fence = re.match(r"\s*```", text[end:])
            if fence:
                end_full = end + fence.end()
        _add_calls(ex, calls, text[brace:end])
        ex.content_parts.append(_CALL_MARKERS.sub("", text[last:start]))
        last = pos = end_full
    ex.content_parts.append(text[last:])
    return ex


def _parse_tag_body(body: str, raw: str, ex: _Extracted, values: list[Any] | None = None) -> None:
    """Add the calls of one tag block's ``body`` to ``ex`` (``values``: the body already read)."""
    if values is None:
        try:
            values = loads_tolerant_many(body)
        except JSONRepairError as exc:
            ex.errors.append(f"could not read the tool call: {exc.message}")
            return
    _add_calls(ex, [c for v in values for c in _expand(v)], raw)


def _add_calls(ex: _Extracted, calls: list[Any], raw: str) -> None:
    """Normalise each call object and add it to ``ex`` with its source text ``raw``; a malformed one becomes an
    error message instead."""
    for obj in calls:
        try:
            name, args = _normalize_call(obj)
        except _CallError as exc:
            ex.errors.append(str(exc))
            continue
        ex.calls.append((name, args, raw))


_INSIDE = re.compile(r'["\\]')


@functools.lru_cache(maxsize=64)
def _outside(first_chars: str) -> re.Pattern:
    """What the string-aware scan stops at outside strings: a quote or the first character of a tag."""
    return re.compile("[" + "".join(re.escape(c) for c in sorted(set('"' + first_chars))) + "]")


def find_tag_outside_strings(text: str, start: int, tags: Sequence[str]) -> tuple[int, str | None]:
    """The first of ``tags`` at or after ``text[start]`` that lies outside JSON (double-quoted) strings:
    ``(index, tag)``, or ``(-1, None)``. A closing tag written inside an argument string
    (``{"command": "echo '</tool_call>'"}``) is skipped; this is the string-aware scan every tag-delimited
    JSON format shares."""
    i, n = start, len(text)
    in_str = False
    outside = _outside("".join(t[:1] for t in tags))
    while i < n:
        m = (_INSIDE if in_str else outside).search(text, i)
        if m is None:
            break
        j = m.start()
        c = text[j]
        if c == '"':
            in_str = not in_str
            i = j + 1
        elif c == "\\":
            i = j + 2
        else:
            for tag in tags:
                if text.startswith(tag, j):
                    return j, tag
            i = j + 1
    return -1, None


def _tag_body_end(text: str, body_start: int, open_tag: str, close_tag: str
                  ) -> tuple[int, bool, list[Any] | None]:
    """Where the body of a tag block opened before ``body_start`` ends: ``(index, closed, values)``. ``closed``
    is False when the block has no closing tag (the index is then the next opening tag, or the end of the
    text); ``values`` is the body read as JSON values when that reading chose the end, else None.

    The string-aware scan decides first. When quotes inside a string are not escaped, string-awareness can be
    wrong either way, so each later literal closing tag is tried too (at most 8), and the first whose body
    reads as JSON wins; if none does, the string-aware answer stands."""
    at, tag = find_tag_outside_strings(text, body_start, (close_tag, open_tag))
    if tag == close_tag:
        first = at
    else:
        first = text.find(close_tag, body_start)
        if first == -1 or (tag == open_tag and at < first):
            return (at if tag == open_tag else len(text)), False, None
    candidate = first
    for _ in range(8):
        try:  # brackets left open mean the body goes on past this tag
            return candidate, True, loads_tolerant_many(text[body_start:candidate], close_brackets=False)
        except JSONRepairError:
            candidate = text.find(close_tag, candidate + len(close_tag))
            if candidate == -1:
                break
    return first, True, None


def _scan_tags(text: str, finish_reason: str) -> _Extracted:
    """Find ``<tool_call>`` blocks; an unclosed block at the end is truncated under ``finish_reason='length'``."""
    ex = _Extracted()
    pos = 0
    while True:
        start = text.find(TOOL_CALL_OPEN, pos)
        if start == -1:
            ex.content_parts.append(text[pos:])
            break
        ex.content_parts.append(text[pos:start])
        body_start = start + len(TOOL_CALL_OPEN)
        end, closed, values = _tag_body_end(text, body_start, TOOL_CALL_OPEN, TOOL_CALL_CLOSE)
        if closed:
            stop = end + len(TOOL_CALL_CLOSE)
            _parse_tag_body(text[body_start:end], text[start:stop], ex, values)
            pos = stop
            continue
        if end < len(text):  # a block with no closing tag before the next block
            _parse_tag_body(text[body_start:end], text[start:end], ex)
            pos = end
            continue
        # Unclosed block at the end of the message.
        if finish_reason == "length":
            ex.cut()
        elif text[body_start:].strip():
            # Servers that use </tool_call> as a stop string drop the closing tag: the body may be complete.
            _parse_tag_body(text[body_start:], text[start:], ex)
        else:
            ex.errors.append("empty <tool_call> block: expected a JSON object with 'name' and 'arguments'")
        break
    ex.content_parts = [p.replace(TOOL_CALL_CLOSE, "") for p in ex.content_parts]
    return ex


def extract_token_calls(text: str, finish_reason: str, begin: str, sep: str, end_token: str,
                        read_call: Any, tokens: Sequence[str]) -> _Extracted:
    """The calls of a token-delimited format ``BEGIN head SEP {json} END`` (DeepSeek-V3.1, Kimi-K2):
    ``read_call(head_and_body, raw, ex)`` adds one call (or an error) to ``ex``; the end token is looked for
    outside JSON strings. Under ``finish_reason == "length"`` a call whose end never came is cut off (never
    run). ``tokens`` are removed from the content text."""
    ex = _Extracted()
    pos = last = 0
    while True:
        start = text.find(begin, pos)
        if start == -1:
            break
        ex.content_parts.append(text[last:start])
        head_start = start + len(begin)
        at_sep = text.find(sep, head_start)
        next_begin = text.find(begin, head_start)
        if at_sep == -1 or (next_begin != -1 and next_begin < at_sep):
            if finish_reason == "length" and at_sep == -1 and next_begin == -1:
                ex.cut()
                last = pos = len(text)
                break
            stop = next_begin if next_begin != -1 else len(text)
            read_call(text[head_start:stop], text[start:stop], ex)
            last = pos = stop
            continue
        body_start = at_sep + len(sep)
        end, closed, _ = _tag_body_end(text, body_start, begin, end_token)
        if not closed and end >= len(text) and finish_reason == "length":
            ex.cut()
            last = pos = len(text)
            break
        stop = end + len(end_token) if closed else end
        read_call(text[head_start:end], text[start:stop], ex)
        last = pos = stop
    ex.content_parts.append(text[last:])
    parts = []
    for p in ex.content_parts:
        for token in tokens:
            p = p.replace(token, "")
        parts.append(p)
    ex.content_parts = parts
    return ex


def _ends_with_partial_tag(text: str, tags: Sequence[str] = (TOOL_CALL_OPEN,)) -> bool:
    tail = text.rstrip()
    return any(tail.endswith(tag[:k]) for tag in tags for k in range(2, len(tag)))


def _build(visible: str, reasoning: list[str], ex: _Extracted, drafted: int, finish_reason: str,
           open_tags: Sequence[str] = (TOOL_CALL_OPEN,)) -> ParseResult:
    calls = [ToolCall(name=c[0], arguments=c[1], id=(c[3] if len(c) > 3 and c[3] else f"call_{i}"), raw=c[2])
             for i, c in enumerate(ex.calls)]
    truncated = ex.truncated
    errors = list(ex.errors)
    content = _tidy(ex.content_parts)
    if finish_reason == "length" and not truncated and _ends_with_partial_tag(visible, open_tags):
        truncated = True
        errors.append(_TRUNCATED_MSG)
        tail = visible.rstrip()
        cut = max(k for tag in open_tags for k in range(2, len(tag)) if tail.endswith(tag[:k]))
        content = content[:-cut].rstrip() if content.endswith(tail[-cut:]) else content
    return ParseResult(calls=calls, content=content, errors=errors, truncated=truncated, drafted=drafted,
                       reasoning="\n\n".join(r for r in reasoning if r))


def parse_with(extract: Any, text: str, finish_reason: str, open_tags: Sequence[str] = (TOOL_CALL_OPEN,)
               ) -> ParseResult:
    """The shared frame of the tag parsers: split off ``<think>`` blocks, count the calls drafted in them,
    run ``extract(text, finish_reason) -> _Extracted`` on the rest, and apply the cut-off rule for an opening
    tag (one of ``open_tags``) left partial at the end under ``finish_reason == "length"``."""
    text = text or ""
    visible, reasoning = split_reasoning(text, open_tags)
    drafted = sum(len(extract(r, "stop").calls) for r in reasoning)
    return _build(visible, reasoning, extract(visible, finish_reason), drafted, finish_reason, open_tags)
