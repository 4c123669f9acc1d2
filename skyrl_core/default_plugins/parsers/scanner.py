"""Tool-call parsers: generated text -> tool calls. Registrable through ``register_parsers``.

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

import ast
import io
import json
import re
import tokenize
import warnings
from typing import Any, Iterator, Sequence

import attrs

from .tools import ToolCall, example_arguments


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

# Keys small models use for the arguments object, in order of preference.
_ARG_KEYS = ("arguments", "parameters", "args", "input", "params")
_NAME_KEYS = ("name", "tool", "tool_name", "function")
_TOOL_NAME = re.compile(r"[\w.\-:/]{1,128}")
_TRUNCATED_MSG = ("the tool call was cut off by the max-token limit before it was complete, so it was not run; "
                  "write a shorter call")


def format_tool_call(name: str, arguments: dict[str, Any]) -> str:
    """Render one call the way Hermes / Qwen chat templates do: ``<tool_call>\\n{json}\\n</tool_call>``."""
    body = json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False)
    return f"{TOOL_CALL_OPEN}\n{body}\n{TOOL_CALL_CLOSE}"


# ----------------------------------------------------------------------------------------------------------
# tolerant JSON


class JSONRepairError(ValueError):
    """Text that no repair strategy turns into a value. ``message`` is the strict parser's complaint (with line
    and column); ``at_end`` is True when the text ended before the value was complete (cut off)."""

    def __init__(self, message: str, at_end: bool = False) -> None:
        super().__init__(message)
        self.message = message
        self.at_end = at_end


class _GiveUp(Exception):
    """The lenient reader exceeded its step budget or nesting limit."""


_NUMBER = re.compile(r"-?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
_LITERALS = {"true": True, "false": False, "null": None, "True": True, "False": False, "None": None}
_LITERAL = re.compile(r"(?:true|false|null|True|False|None)\b")
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f", "/": "/", "\\": "\\", '"': '"', "'": "'"}
_WS = " \t\r\n"
_SPECIAL_DQ = re.compile(r'["\\]')
_SPECIAL_SQ = re.compile(r"['\\]")
_HEX4 = re.compile(r"[0-9a-fA-F]{4}")


class _Lenient:
    """A backtracking reader for almost-JSON, used after ``json.loads`` and ``ast.literal_eval`` fail.

    It accepts raw control characters and unescaped quotes inside strings, single-quoted strings, trailing
    commas, and Python or JSON literals. Strings are ambiguous (an inner ``"`` may or may not close the string),
    so :meth:`value` yields every reading, shortest string first; callers take the first reading whose
    continuation also parses. A step budget bounds the search (pathological inputs give up, never hang).
    """

    MAX_STEPS = 20_000
    MAX_DEPTH = 100

    def __init__(self, text: str) -> None:
        self.s = text
        self.n = len(text)
        self.steps = 0
        self.hit_end = False
        self.gave_up = False

    def _tick(self) -> None:
        self.steps += 1
        if self.steps > self.MAX_STEPS:
            raise _GiveUp()

    def ws(self, i: int) -> int:
        s, n = self.s, self.n
        while i < n and s[i] in _WS:
            i += 1
        if i >= n:
            self.hit_end = True
        return i

    def value(self, i: int, depth: int = 0) -> Iterator[tuple[Any, int]]:
        self._tick()
        if depth > self.MAX_DEPTH:
            raise _GiveUp()
        i = self.ws(i)
        if i >= self.n:
            return
        c = self.s[i]
        if c == "{":
            yield from self._members(i + 1, {}, depth + 1)
        elif c == "[":
            yield from self._items(i + 1, [], depth + 1)
        elif c in "\"'":
            yield from self.string(i)
        else:
            m = _LITERAL.match(self.s, i)
            if m:
                yield _LITERALS[m.group(0)], m.end()
                return
            m = _NUMBER.match(self.s, i)
            if m:
                text = m.group(0)
                try:
                    yield (float(text) if any(ch in text for ch in ".eE") else int(text)), m.end()
                except ValueError:
                    return

    def string(self, i: int, first_only: bool = False) -> Iterator[tuple[str, int]]:
        """Readings of the string starting at ``s[i]``; keys (``first_only``) never contain a bare quote."""
        s, n = self.s, self.n
        quote = s[i]
        special = _SPECIAL_DQ if quote == '"' else _SPECIAL_SQ
        out: list[str] = []
        surrogates = False
        j = i + 1
        while j < n:
            m = special.search(s, j)
            if m is None:
                self.steps += (n - j) // 256
                break
            k = m.start()
            out.append(s[j:k])
            self.steps += (k - j) // 256
            j = k
            if s[j] == "\\":
                if j + 1 >= n:
                    break
                e = s[j + 1]
                if e == "u" and j + 6 <= n and _HEX4.fullmatch(s, j + 2, j + 6):
                    code = int(s[j + 2:j + 6], 16)
                    surrogates = surrogates or 0xD800 <= code <= 0xDFFF
                    out.append(chr(code))
                    j += 6
                    continue
                # An unknown escape (a regex's \d in code) keeps its backslash.
                out.append(_ESCAPES.get(e, "\\" + e))
                j += 2
                continue
            self._tick()
            text = "".join(out)
            if surrogates:  # join UTF-16 surrogate pairs written as two \u escapes
                try:
                    text = text.encode("utf-16", "surrogatepass").decode("utf-16")
                except UnicodeError:
                    pass
            yield text, j + 1
            if first_only:
                return
            out.append(quote)
            j += 1
        self.hit_end = True

    def _members(self, i: int, acc: dict, depth: int) -> Iterator[tuple[dict, int]]:
        s = self.s
        i = self.ws(i)
        if i >= self.n:
            return
        if s[i] == "}":
            yield dict(acc), i + 1
            return
        if s[i] not in "\"'":
            return
        for key, j in self.string(i, first_only=True):
            j = self.ws(j)
            if j >= self.n or s[j] != ":":
                continue
            j1 = self.ws(j + 1)
            if key in _NAME_KEYS and j1 < self.n and s[j1] in "\"'":
                readings = self.string(j1, first_only=True)  # a tool name never contains a quote
            else:
                readings = self.value(j1, depth)
            for val, k in readings:
                k = self.ws(k)
                if k >= self.n:
                    continue
                item = {**acc, key: val}
                if s[k] == "}":
                    yield item, k + 1
                elif s[k] == ",":
                    k2 = self.ws(k + 1)
                    if k2 < self.n and s[k2] == "}":  # trailing comma
                        yield item, k2 + 1
                    else:
                        yield from self._members(k + 1, item, depth)

    def _items(self, i: int, acc: list, depth: int) -> Iterator[tuple[list, int]]:
        s = self.s
        i = self.ws(i)
        if i >= self.n:
            return
        if s[i] == "]":
            yield list(acc), i + 1
            return
        for val, k in self.value(i, depth):
            k = self.ws(k)
            if k >= self.n:
                continue
            if s[k] == "]":
                yield [*acc, val], k + 1
            elif s[k] == ",":
                k2 = self.ws(k + 1)
                if k2 < self.n and s[k2] == "]":
                    yield [*acc, val], k2 + 1
                else:
                    yield from self._items(k + 1, [*acc, val], depth)


def _strip_fence(text: str) -> str:
    m = re.fullmatch(r"\s*```[A-Za-z0-9_-]*[ \t]*\n?(.*?)\n?[ \t]*```\s*", text, re.S)
    return m.group(1) if m else text


def _json_error(text: str) -> tuple[str, bool]:
    """The strict parser's complaint about ``text`` and whether it stopped at the end of the text."""
    try:
        json.loads(text, strict=False)
    except json.JSONDecodeError as exc:
        at_end = exc.pos >= len(text.rstrip())
        near = text[max(0, exc.pos - 30):exc.pos + 30]
        return (f"invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg} (near "
                f"{json.dumps(near, ensure_ascii=False)})"), at_end
    except (RecursionError, ValueError) as exc:
        return f"invalid JSON: {exc}", False
    return "invalid JSON", False


def loads_tolerant(text: str) -> Any:
    """Parse one JSON-like value, repairing what models get wrong.

    Tries, in order: strict JSON (control characters allowed in strings), ``ast.literal_eval`` (Python dicts:
    single quotes, ``True``/``False``/``None``, trailing commas), then the backtracking lenient reader (raw
    newlines and unescaped quotes inside strings, mixed literals). Raises :class:`JSONRepairError` with the
    strict parser's message ("invalid JSON at line L column C: ...") when all fail.
    """
    values = loads_tolerant_many(text)
    if len(values) != 1:
        raise JSONRepairError(f"expected one JSON value, found {len(values)}")
    return values[0]


def loads_tolerant_many(text: str, close_brackets: bool = True) -> list[Any]:
    """Parse one or more JSON-like values written one after another (optionally comma-separated), as
    :func:`loads_tolerant` does for one. Raises :class:`JSONRepairError`, also when the text reads more than
    one way (an unescaped quote that may or may not end a string): such a guess is never returned.
    ``close_brackets=False`` turns off the closing of brackets left open at the end."""
    body = _strip_fence(text).strip()
    if not body:
        raise JSONRepairError("empty: expected a JSON object")
    try:
        return [json.loads(body, strict=False)]
    except (ValueError, RecursionError):
        pass
    if body[0] in "{[" and len(body) < 100_000:
        try:
            with warnings.catch_warnings():  # "\d" in code is an invalid escape to Python, not an error here
                warnings.simplefilter("ignore")
                value = ast.literal_eval(body)
            # Python joins "a" "b" into "ab" and reads """, "k": """ as one string: guesses, not the model's value
            if not _python_only_strings(body):
                return [value]
        except Exception:  # literal_eval raises ValueError, SyntaxError, TypeError, MemoryError, RecursionError
            pass
    readings, reader = _lenient_sequences(body)
    if not readings and close_brackets:
        # Small models often drop the last closing brace(s) of a call they did finish (finish_reason "stop"):
        # closing them is unambiguous when the text ends outside a string.
        closed = _close_brackets(body)
        if closed is not None:
            try:
                return [json.loads(closed, strict=False)]
            except (ValueError, RecursionError):
                readings, _ = _lenient_sequences(closed)
    if len(readings) == 1 and not reader.gave_up:
        return readings[0]
    message, at_end = _json_error(body)
    if len(readings) > 1 or (readings and reader.gave_up):
        raise JSONRepairError(f"{message}; the text has a quote inside a string that is not escaped and reads "
                              f"more than one way, so it was not run: write every quote inside a string as \\\"")
    raise JSONRepairError(message, at_end=at_end or reader.hit_end)


def _python_only_strings(text: str) -> bool:
    """Whether Python source ``text`` holds string syntax JSON does not have, which would make the Python reading a
    guess: two string literals in a row (joined), a triple-quoted or prefixed (``b``, ``r``, ``f``) literal — or
    it does not tokenize."""
    skip = {tokenize.NL, tokenize.NEWLINE, tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT}
    previous = None
    try:
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type in skip:
                continue
            if tok.type == tokenize.STRING and (previous == tokenize.STRING or tok.string[:1] not in "\"'"
                                                or tok.string[:3] in ('"""', "\'\'\'")):
                return True
            previous = tok.type
    except (tokenize.TokenError, SyntaxError):
        return True
    return False


def _lenient_sequences(text: str, limit: int = 2) -> tuple[list[list[Any]], _Lenient]:
    """Up to ``limit`` distinct complete readings of ``text`` by the lenient reader (``reader.gave_up`` when its
    step budget ran out before the search was done)."""
    reader = _Lenient(text)
    found: list[list[Any]] = []
    try:
        for values in _read_sequences(reader, 0):
            if values not in found:
                found.append(values)
                if len(found) >= limit:
                    break
    except (_GiveUp, RecursionError):
        reader.gave_up = True
    return found, reader


def _brackets_outside_strings(text: str, start: int = 0) -> tuple[str, bool]:
    """The ``{[]}`` characters of ``text[start:]`` that lie outside JSON strings, in order, and whether the text
    ends inside a string. The one string-aware scan both bracket checks below share."""
    found: list[str] = []
    in_str = False
    i = start
    n = len(text)
    while i < n:
        c = text[i]
        if in_str:
            if c == "\\":
                i += 1
            elif c == '"':
                in_str = False
        elif c == '"':
            in_str = True
        elif c in "{[]}":
            found.append(c)
        i += 1
    return "".join(found), in_str


def _close_brackets(text: str) -> str | None:
    """``text`` with its unclosed ``{``/``[`` closed, or None when nothing is open or it ends inside a string."""
    brackets, in_str = _brackets_outside_strings(text)
    stack: list[str] = []
    for c in brackets:
        if c in "{[":
            stack.append("}" if c == "{" else "]")
        elif not stack or stack[-1] != c:
            return None
        else:
            stack.pop()
    if in_str or not stack:
        return None
    return text + "".join(reversed(stack))


_EXTRA_CLOSERS = re.compile(r"[\s}\]]*")


def _read_sequences(reader: _Lenient, i: int) -> Iterator[list[Any]]:
    """Every reading of the values from ``i`` to the end of the text. Stray closing brackets after the last
    value (a common slip of small models) are ignored."""
    for val, j in reader.value(i):
        j = reader.ws(j)
        if j >= reader.n or _EXTRA_CLOSERS.fullmatch(reader.s, j):
            yield [val]
            continue
        if reader.s[j] == ",":
            j += 1
        for rest in _read_sequences(reader, j):
            yield [val, *rest]


def _read_prefix(text: str, i: int) -> tuple[Any, int] | None:
    """Read one JSON-like value starting at ``text[i]``; return (value, end) or None. A lenient reading is
    returned only when it is the only one (an unescaped quote that could end a string two ways is no reading)."""
    try:
        return json.JSONDecoder(strict=False).raw_decode(text, i)
    except (ValueError, RecursionError):
        pass
    reader = _Lenient(text)
    found: list[tuple[Any, int]] = []
    try:
        for val, end in reader.value(i):
            if all(val != v for v, _ in found):
                found.append((val, end))
            if len(found) > 1:
                return None
    except (_GiveUp, RecursionError):
        return None
    return found[0] if found else None


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
    makes everything before it reasoning.
    """
    reasoning: list[str] = []
    first_close = text.find(THINK_CLOSE)
    first = _THINK.search(text)
    if first_close != -1 and (first is None or first_close < first.start()):
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
    calls: list[tuple[str, dict, str]] = attrs.Factory(list)  # (name, arguments, raw)
    content_parts: list[str] = attrs.Factory(list)
    errors: list[str] = attrs.Factory(list)
    truncated: bool = False


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
                ex.truncated = True
                ex.errors.append(_TRUNCATED_MSG)
                ex.content_parts.append(text[last:start])
                last = len(text)
                break
            if _NAMED_START.match(text, brace):  # only report what is clearly meant as a call
                message, _ = _json_error(text[brace:].split("\n\n", 1)[0])
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
        raw = text[brace:end]
        for obj in calls:
            try:
                name, args = _normalize_call(obj)
            except _CallError as exc:
                ex.errors.append(str(exc))
                continue
            ex.calls.append((name, args, raw))
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
    calls = [c for v in values for c in _expand(v)]
    for obj in calls:
        try:
            name, args = _normalize_call(obj)
        except _CallError as exc:
            ex.errors.append(str(exc))
            continue
        ex.calls.append((name, args, raw))


_OUTSIDE = re.compile(r'["<]')
_INSIDE = re.compile(r'["\\]')


def find_tag_outside_strings(text: str, start: int, tags: Sequence[str]) -> tuple[int, str | None]:
    """The first of ``tags`` at or after ``text[start]`` that lies outside JSON (double-quoted) strings:
    ``(index, tag)``, or ``(-1, None)``. A closing tag written inside an argument string
    (``{"command": "echo '</tool_call>'"}``) is skipped; this is the string-aware scan every tag-delimited
    JSON format shares."""
    i, n = start, len(text)
    in_str = False
    while i < n:
        m = (_INSIDE if in_str else _OUTSIDE).search(text, i)
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
            ex.truncated = True
            ex.errors.append(_TRUNCATED_MSG)
        elif text[body_start:].strip():
            # Servers that use </tool_call> as a stop string drop the closing tag: the body may be complete.
            _parse_tag_body(text[body_start:], text[start:], ex)
        else:
            ex.errors.append("empty <tool_call> block: expected a JSON object with 'name' and 'arguments'")
        break
    ex.content_parts = [p.replace(TOOL_CALL_CLOSE, "") for p in ex.content_parts]
    return ex


def _ends_with_partial_tag(text: str, tags: Sequence[str] = (TOOL_CALL_OPEN,)) -> bool:
    tail = text.rstrip()
    return any(tail.endswith(tag[:k]) for tag in tags for k in range(2, len(tag)))


def _build(visible: str, reasoning: list[str], ex: _Extracted, drafted: int, finish_reason: str,
           open_tags: Sequence[str] = (TOOL_CALL_OPEN,)) -> ParseResult:
    calls = [ToolCall(name=name, arguments=args, id=f"call_{i}", raw=raw) for i, (name, args, raw) in
             enumerate(ex.calls)]
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


class HermesParser:
    """``<tool_call>{json}</tool_call>`` blocks (Hermes, Qwen2.5/3, many fine-tunes); the tolerant JSON scan of
    :class:`JsonParser` when a message has no ``<tool_call>`` tag. Never raises."""

    name = "hermes"

    def parse(self, text: str, finish_reason: str = "stop") -> ParseResult:
        return parse_with(self._extract, text, finish_reason)

    @staticmethod
    def _extract(text: str, finish_reason: str) -> _Extracted:
        if TOOL_CALL_OPEN in text:
            return _scan_tags(text, finish_reason)
        ex = _scan_json(text, finish_reason)
        ex.content_parts = [p.replace(TOOL_CALL_CLOSE, "") for p in ex.content_parts]
        return ex


class JsonParser:
    """Bare JSON tool calls anywhere in the text: ``{"name": ..., "arguments": ...}`` objects, ```json fences,
    lists of calls, and the ``{"function": {...}}`` / ``{"tool": ..., "parameters": ...}`` shapes. Never raises."""

    name = "json"

    def parse(self, text: str, finish_reason: str = "stop") -> ParseResult:
        text = text or ""
        visible, reasoning = split_reasoning(text)
        drafted = sum(len(_scan_json(r, "stop").calls) for r in reasoning)
        ex = _scan_json(visible, finish_reason)
        ex.content_parts = [p.replace(TOOL_CALL_OPEN, "").replace(TOOL_CALL_CLOSE, "") for p in ex.content_parts]
        return _build(visible, reasoning, ex, drafted, finish_reason)


class OpenAIParser:
    """A server's native tool calls (OpenAI chat-completions ``message.tool_calls``, arguments as JSON strings)
    via :meth:`parse_message`; plain text goes through :class:`HermesParser`. Never raises."""

    name = "openai"

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


_FENCE_OPEN = re.compile(r"```[ \t]*([A-Za-z0-9_+\-]*)[ \t]*(\n|(?=\S))")
DEFAULT_FENCE_TOOLS: dict[str, tuple[str, str]] = {
    "python": ("python", "code"), "py": ("python", "code"), "python3": ("python", "code"),
    "bash": ("bash", "command"), "sh": ("bash", "command"), "shell": ("bash", "command"),
}


class CodeBlockParser:
    """Fenced code blocks as tool calls (CodeAct-style actions): a ```python block is the call
    ``python(code=<block>)``, a ```bash block ``bash(command=<block>)``; ``<tool_call>`` tags in the same
    message are read as :class:`HermesParser` reads them (e.g. ``finish``). Never raises.

    Small instruction-tuned models (SmolLM2, Qwen2.5-0.5B) write Markdown code far more readily than JSON
    calls: with this parser a base model already calls its python tool, which gives RL a signal to reinforce.
    The action is still one function call of a registered tool, recorded like any other.

    ``fence_tools`` maps a fence language (lower case) to ``(tool name, argument name)``; fences in other
    languages (or none) are text. Every complete block of a mapped language is a call, in order. A block cut
    off by the max-token limit (``finish_reason == "length"``, no closing fence) is never run (``truncated``);
    one left open when the model ended its turn (``finish_reason == "stop"``) is run. ``stop`` holds
    ``"```\n"``: a closing fence ends the turn, so the model reads the output before going on (an opening
    fence always carries a language or code after it, so it does not match).
    """

    name = "codeblock"
    stop: tuple[str, ...] = ("```\n",)

    def __init__(self, fence_tools: dict[str, tuple[str, str]] | None = None) -> None:
        self.fence_tools = {k.lower(): tuple(v) for k, v in (fence_tools or DEFAULT_FENCE_TOOLS).items()}
        self._tags = HermesParser()

    def _language_of(self, tool_name: str) -> str | None:
        return next((lang for lang, (tool, _) in self.fence_tools.items() if tool == tool_name), None)

    def format_call(self, name: str, arguments: dict[str, Any]) -> str:
        """A call written the way this parser reads it: a fenced block for mapped tools, else a tag."""
        lang = self._language_of(name)
        if lang is not None:
            arg = self.fence_tools[lang][1]
            return f"```{lang}\n{arguments.get(arg, '')}\n```"
        return f"{TOOL_CALL_OPEN}\n{json.dumps({'name': name, 'arguments': arguments}, ensure_ascii=False)}" \
               f"\n{TOOL_CALL_CLOSE}"

    def tools_prompt(self, tool_schemas: list[dict]) -> str:
        """System-prompt text saying how to call ``tool_schemas`` (OpenAI function schemas) in this format."""
        lines, tagged = [], []
        for schema in tool_schemas:
            fn = schema.get("function", schema)
            name, desc = fn.get("name", ""), fn.get("description", "")
            lang = self._language_of(name)
            if lang is not None:
                lines.append(f"- {name}: {desc} To call it, write a ```{lang} code block; it runs when the "
                             f"block closes and its output comes back to you.")
            else:
                tagged.append(fn)
        text = "# Tools\n\n" + "\n".join(lines)
        if tagged:
            text += ("\n\nThe other tools take a JSON object inside <tool_call></tool_call> tags. Their "
                     "signatures, as JSON Schema:\n<tools>\n"
                     + "\n".join(json.dumps({"type": "function", "function": fn}, ensure_ascii=False)
                                 for fn in tagged) + "\n</tools>\nFor example:\n"
                     + self.format_call(tagged[0].get("name", ""), example_arguments(tagged[0].get("parameters") or {})))
        return text.strip()

    def parse(self, text: str, finish_reason: str = "stop") -> ParseResult:
        text = text or ""
        visible, reasoning = split_reasoning(text)
        drafted = sum(len(self._blocks(r, "stop")[0]) for r in reasoning)
        calls, content, truncated = self._blocks(visible, finish_reason)
        errors = [_TRUNCATED_MSG] if truncated else []
        # Tags only when present: the tolerant bare-JSON scan would read code or prose as calls.
        result = self._tags.parse(content, finish_reason) if TOOL_CALL_OPEN in content else \
            ParseResult(content=content)
        for call in result.calls:
            calls.append((call.name, call.arguments, call.raw))
        ordered = [ToolCall(name=n, arguments=a, id=f"call_{i}", raw=r) for i, (n, a, r) in enumerate(calls)]
        return ParseResult(calls=ordered, content=result.content, errors=errors + result.errors,
                           truncated=truncated or result.truncated, drafted=drafted,
                           reasoning="\n\n".join(r for r in reasoning if r))

    def _blocks(self, text: str, finish_reason: str) -> tuple[list[tuple[str, dict, str]], str, bool]:
        """(calls as (tool, arguments, raw), the text outside the mapped blocks, a block was cut off)."""
        calls: list[tuple[str, dict, str]] = []
        kept: list[str] = []
        i, truncated = 0, False
        while True:
            m = _FENCE_OPEN.search(text, i)
            if m is None:
                kept.append(text[i:])
                break
            lang = m.group(1).lower()
            body_start = m.end()
            close = text.find("```", body_start)
            mapped = self.fence_tools.get(lang)
            if close < 0:
                if mapped is not None and finish_reason == "length":
                    truncated = True
                    kept.append(text[i:m.start()])
                elif mapped is not None and text[body_start:].strip():
                    kept.append(text[i:m.start()])
                    calls.append((mapped[0], {mapped[1]: text[body_start:].strip("\n")}, text[m.start():]))
                else:
                    kept.append(text[i:])
                break
            if mapped is None:
                kept.append(text[i:close + 3])
            else:
                kept.append(text[i:m.start()])
                body = text[body_start:close].strip("\n")
                if body.strip():
                    calls.append((mapped[0], {mapped[1]: body}, text[m.start():close + 3]))
            i = close + 3
        return calls, _tidy(kept), truncated


BUILTIN_PARSERS = (HermesParser, JsonParser, OpenAIParser, CodeBlockParser)
