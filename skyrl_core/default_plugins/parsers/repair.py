"""Tolerant JSON for tool-call arguments: strict JSON first, then ``ast.literal_eval``, then a backtracking
lenient reader (raw newlines and quotes inside strings, trailing commas, single quotes, Python literals). Shared by
every parser of this package; :func:`loads_tolerant` is the entry point.

Why not ``json5`` (0.17.3) for the lenient part: ``json`` and ``ast.literal_eval`` (standard library) already do
the unambiguous readings, and json5 gets tool-call arguments wrong where they differ. JSON5 reads an unknown escape
as the bare character, so a regex argument ``{"re": "\\d+"}`` (backslash, d) becomes ``d+`` where we keep the
backslash (``test_loads_tolerant``); it rejects what the backtracking reader is for (Python literals, raw newlines
and unescaped quotes inside strings); and it is slow on the hot path. ``python tests/benchmarks/bench_json5.py``,
2026-12-02, 1-core dev machine at load 8.7, single-quoted dicts with a trailing comma, best of 3: 361 chars json5
10.5 ms vs ``ast.literal_eval`` 0.1 ms; 3,981 chars 139.9 ms vs 1.3 ms; 89,781 chars 2,305 ms vs 68 ms.
"""

from __future__ import annotations

import ast
import io
import json
import re
import tokenize
import warnings
from typing import Any, Iterator

# Keys small models use for the arguments object, in order of preference.
_ARG_KEYS = ("arguments", "parameters", "args", "input", "params")
_NAME_KEYS = ("name", "tool", "tool_name", "function")


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
        raise JSONRepairError(f"{message}; {AMBIGUOUS_QUOTES}")
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


AMBIGUOUS_QUOTES = ("the text has a quote inside a string that is not escaped and reads more than one way, so it "
                    "was not run: write every quote inside a string as \\\"")
# After a strictly valid prefix, text that may continue the value: an unescaped quote inside a string can end
# the string early and still leave valid JSON ({"command": "grep -n "}}" base.html"} reads as "grep -n ").
PREFIX_WINDOW = 1000
_CONTINUES = re.compile(r"\s*[^\s.!?;)]")


def strict_prefix_is_a_guess(text: str, i: int, value: Any, end: int) -> bool:
    """Whether the strict reading ``(value, end)`` of the value at ``text[i]`` is one of several: the text goes
    on like the rest of a value and the lenient reader finds a longer, different reading within the same
    paragraph (at most :data:`PREFIX_WINDOW` characters on: the search is bounded for long prose after a call)."""
    if not _CONTINUES.match(text, end):
        return False
    stop = text.find("\n\n", end)
    reader = _Lenient(text[:min(stop if stop != -1 else len(text), end + PREFIX_WINDOW)])
    try:
        return any(e > end and val != value for val, e in reader.value(i))
    except (_GiveUp, RecursionError):
        return True


def _read_prefix(text: str, i: int) -> tuple[Any, int] | None:
    """Read one JSON-like value starting at ``text[i]``; return (value, end) or None. A reading is returned only
    when it is the only one (an unescaped quote that could end a string two ways is no reading), also when the
    strict reader accepts a prefix of the text (:func:`strict_prefix_is_a_guess`)."""
    try:
        value, end = json.JSONDecoder(strict=False).raw_decode(text, i)
    except (ValueError, RecursionError):
        pass
    else:
        return None if strict_prefix_is_a_guess(text, i, value, end) else (value, end)
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
