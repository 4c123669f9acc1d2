"""The code index behind the ``search`` tool: tree-sitter symbols (classes, functions, methods with line ranges),
call sites, and file contents for substring and BM25 search.

Parsing is content-addressed: a file's symbols are cached by the SHA-1 of its bytes in a process-wide cache, so
N trajectories working on copies of one repository parse it once, and :meth:`CodeIndex.refresh` after an edit
re-reads only files whose size or mtime changed and re-parses only those whose bytes changed. tree-sitter parses
files with syntax errors partially (ERROR nodes); the symbols it still finds are indexed.

More languages: :data:`LANGUAGES` maps a file suffix to a grammar loader and the node types that make symbols;
grammars from the package index (``tree-sitter-javascript`` ...) can be added there.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import threading
import time
from collections import OrderedDict
from concurrent.futures import ProcessPoolExecutor
from itertools import chain
from pathlib import Path
from typing import Any, Iterable

import attrs

log = logging.getLogger(__name__)

SKIP_DIRS = frozenset({".git", ".hg", ".svn", "__pycache__", "node_modules", ".venv", "venv", ".tox", ".nox",
                       ".mypy_cache", ".pytest_cache", ".eggs", "site-packages"})
MAX_FILE_BYTES = 2_000_000  # generated or vendored blobs are not code worth indexing
# Agent-written files are parsed on the host: tree-sitter's error recovery and its query cursor are superlinear on
# some inputs (2 MB of "(" ran over 10 minutes; "def f(:" repeated, 2 s per 1.6 MB). A file is parsed for symbols
# only below MAX_PARSE_BYTES, within a parse-step budget that grows with its size (tree-sitter calls the progress
# callback once per fixed number of parse operations, so the count measures the input, not the machine: sympy 1.14's
# files need at most 0.029 steps per byte, 6262 for its largest), and when its tree has a shape the query cursor
# handles in bounded time (see _too_costly); otherwise the file is indexed without symbols and says why, its text
# still searched. PARSE_BACKSTOP_S of CPU time (parse and extraction; Django 4.2.11's slowest file takes 0.09 s,
# sympy's 0.14 s) only stops what the input bounds missed: a file it stops is parsed once more at once, and if it
# stops it again the file is left without symbols for this refresh only (never cached: the next refresh retries),
# because a busy machine, not the file, may have spent that time.
MAX_PARSE_BYTES = 1_000_000
PARSE_STEPS_BASE = 5_000
PARSE_STEPS_PER_BYTE = 0.1  # over 3x what sympy's densest file needs
PARSE_BACKSTOP_S = 10.0
MAX_TREE_DEPTH = 400  # levels of large subtrees; Django's deepest is 15 (CPython refuses 200 nested brackets)
MAX_ERROR_CHILDREN = 256  # tokens directly under one syntax-error node; broken statements in one block


@attrs.frozen
class Symbol:
    """A definition: ``kind`` is ``class`` | ``function`` | ``method``; ``qualname`` is dotted within its file
    (``Class.method``); ``start``/``end`` are 1-based inclusive line numbers; ``header_end`` is the line where
    the signature ends; ``bases`` are a class's base expressions as written."""

    path: str
    kind: str
    name: str
    qualname: str
    start: int
    end: int
    header_end: int
    bases: tuple[str, ...] = ()

    @property
    def ref(self) -> str:
        return f"{self.path}:{self.qualname}"

    @property
    def n_lines(self) -> int:
        return self.end - self.start + 1


@attrs.frozen
class FileSymbols:
    """What one parse yields for one file (paths are filled in by the index; symbols here have ``path=""``)."""

    symbols: tuple[Symbol, ...]
    calls: tuple[tuple[str, int], ...]  # (called identifier or attribute, 1-based line)
    has_error: bool
    n_lines: int
    skipped: str = ""  # why the file has no symbols although it may define some (over a byte or step budget)
    # the CPU-time backstop stopped it: the machine may be to blame, so the result is never cached
    transient: bool = False


# -- parsing -------------------------------------------------------------------------------------------------------
_PY_QUERY = """
(class_definition name: (identifier) @class.name) @class
(function_definition name: (identifier) @function.name) @function
(call function: [(identifier) @call (attribute attribute: (identifier) @call)])
"""

_local = threading.local()


def _python_parser():
    parser = getattr(_local, "py", None)
    if parser is None:
        import tree_sitter
        import tree_sitter_python

        lang = tree_sitter.Language(tree_sitter_python.language())
        parser = (tree_sitter.Parser(lang), tree_sitter.Query(lang, _PY_QUERY))
        _local.py = parser
    return parser


def _enclosing(node) -> list:
    """Class/function definition ancestors of ``node``, innermost first (decorated defs included)."""
    out = []
    parent = node.parent
    while parent is not None:
        if parent.type in ("class_definition", "function_definition"):
            out.append(parent)
        parent = parent.parent
    return out


def _text(source: bytes, node) -> str:
    # from the source, not ``node.text``: a tree parsed from a read callback holds no text (``.text`` crashes)
    return source[node.start_byte:node.end_byte].decode("utf-8", "replace")


def _name_of(defn, source: bytes) -> str:
    name = defn.child_by_field_name("name")
    return _text(source, name) if name is not None else "?"


def _too_costly(root) -> str:
    """Why tree-sitter's query cursor would take too long on this tree, or "". Its cost grows with the square of
    an ERROR node's children (16k unmatched "(" take 0.36 s, 64k over 5 s) and with depth; it cannot be
    interrupted (a progress callback crashes py-tree-sitter 0.26.1's ``matches``), so the shape is checked first:
    level by level through subtrees of more than 256 nodes only (``descendant_count`` is O(1)), so the check
    costs little (0.07 s for all of Django) and misses only error nodes of at most 256 children."""
    frontier, depth = [root], 0
    while frontier:
        depth += 1
        if depth > MAX_TREE_DEPTH:
            return f"its syntax tree nests over {MAX_TREE_DEPTH} levels"
        for node in frontier:
            if node.is_error and node.child_count > MAX_ERROR_CHILDREN:
                return (f"a syntax error spans {node.child_count} tokens at line {node.start_point[0] + 1} "
                        f"(over {MAX_ERROR_CHILDREN})")
            # many broken statements side by side ("def f(:" x 120k): each is small, together they cost the
            # symbol extraction seconds; honest code has none (has_error is O(1), so clean trees pay nothing)
            if node.has_error:
                broken = sum(1 for c in node.children if c.has_error)
                if broken > MAX_ERROR_CHILDREN:
                    return (f"syntax errors in {broken} statements of one block at line {node.start_point[0] + 1} "
                            f"(over {MAX_ERROR_CHILDREN})")
        frontier = [c for node in frontier for c in node.children if c.descendant_count > 256]
    return ""


class _Budget:
    """The bounds of one parse: ``max_steps`` progress callbacks (tree-sitter calls it once per fixed number of
    parse operations: a measure of the input) and a CPU-time backstop (``time.thread_time``, the parsing thread's
    own seconds). Called by tree-sitter's progress callbacks, True = stop; ``exceeded`` is "steps" or "cpu"."""

    def __init__(self, seconds: float, max_steps: int) -> None:
        self.deadline = time.thread_time() + seconds
        self.max_steps = max_steps
        self.steps = 0
        self.exceeded = ""

    def __call__(self, *_progress) -> bool:
        self.steps += 1
        if not self.exceeded and self.steps > self.max_steps:
            self.exceeded = "steps"
        return self.expired()

    def expired(self) -> bool:
        if not self.exceeded and time.thread_time() > self.deadline:
            self.exceeded = "cpu"
        return bool(self.exceeded)


def parse_python(source: bytes, budget_s: float | None = None) -> FileSymbols:
    """Parse Python ``source`` with tree-sitter into symbols and call sites. Never raises on bad syntax.

    Bounded for hostile input by what the input is: over :data:`MAX_PARSE_BYTES` bytes, over
    ``PARSE_STEPS_BASE + PARSE_STEPS_PER_BYTE * len(source)`` parse steps, or with a tree the query cursor would be
    slow on (:func:`_too_costly`), the result has no symbols or calls and ``skipped`` says why. Past ``budget_s``
    CPU seconds (default :data:`PARSE_BACKSTOP_S`) the same, with ``transient=True``: the caller retries rather
    than caching it (:class:`CodeIndex` does)."""
    import tree_sitter

    n_lines = source.count(b"\n") + 1
    if len(source) > MAX_PARSE_BYTES:
        return FileSymbols(symbols=(), calls=(), has_error=False, n_lines=n_lines,
                           skipped=f"{len(source)} bytes, over the {MAX_PARSE_BYTES}-byte parse limit")
    seconds = PARSE_BACKSTOP_S if budget_s is None else budget_s
    max_steps = int(PARSE_STEPS_BASE + PARSE_STEPS_PER_BYTE * len(source))
    budget = _Budget(seconds, max_steps)

    def over() -> FileSymbols:
        if budget.exceeded == "steps":
            why = f"parsing took over {max_steps} steps for {len(source)} bytes (parse budget)"
        else:
            why = f"parsing took over {seconds:g} s of CPU time (parse backstop; retried on the next refresh)"
        return FileSymbols(symbols=(), calls=(), has_error=True, n_lines=n_lines, skipped=why,
                           transient=budget.exceeded == "cpu")

    parser, query = _python_parser()
    view = memoryview(source)
    try:
        tree = parser.parse(lambda offset, _point: view[offset:offset + 65536], progress_callback=budget)
    except ValueError:  # tree-sitter's "Parsing failed": the budget stopped it
        parser.reset()  # else the next parse would resume this one
        return over()
    symbols: list[Symbol] = []
    calls: list[tuple[str, int]] = []
    costly = _too_costly(tree.root_node)  # a deep tree needs no syntax error (a 25k-long attribute chain)
    if costly:
        return FileSymbols(symbols=(), calls=(), has_error=True, n_lines=n_lines, skipped=costly)
    if budget.expired():
        return over()
    # no progress callback here: QueryCursor.matches/captures crash with one in py-tree-sitter 0.26.1
    matches = tree_sitter.QueryCursor(query).matches(tree.root_node)
    for _pattern, match in matches:
        if budget.expired():
            break
        if "call" in match:
            node = match["call"][0]
            calls.append((_text(source, node), node.start_point[0] + 1))
            continue
        kind = "class" if "class" in match else "function"
        defn = match[kind][0]
        parents = _enclosing(defn)
        qual = ".".join([_name_of(p, source) for p in reversed(parents)] + [_name_of(defn, source)])
        if kind == "function" and parents and parents[0].type == "class_definition":
            kind = "method"
        body = defn.child_by_field_name("body")
        def_row = defn.start_point[0]
        body_row = body.start_point[0] if body is not None else def_row
        header_end = body_row if body_row > def_row else def_row + 1  # 1-based last line of the signature
        outer = defn.parent if defn.parent is not None and defn.parent.type == "decorated_definition" else defn
        bases: tuple[str, ...] = ()
        if kind == "class":
            sup = defn.child_by_field_name("superclasses")
            if sup is not None:
                bases = tuple(_text(source, c) for c in sup.named_children
                              if c.type not in ("keyword_argument", "comment"))
        symbols.append(Symbol(path="", kind=kind, name=_name_of(defn, source), qualname=qual,
                              start=outer.start_point[0] + 1, end=defn.end_point[0] + 1, header_end=header_end,
                              bases=bases))
    if budget.exceeded:
        return over()
    symbols.sort(key=lambda s: (s.start, -s.end))
    return FileSymbols(symbols=tuple(symbols), calls=tuple(calls), has_error=tree.root_node.has_error,
                       n_lines=n_lines)


# suffix -> parse function; add grammars here (each returns FileSymbols)
LANGUAGES: dict[str, Any] = {".py": parse_python, ".pyi": parse_python}


def _parse_job(item: tuple[str, bytes]) -> tuple[str, FileSymbols]:
    suffix, data = item
    return suffix, LANGUAGES[suffix](data)


class _ContentCache:
    """SHA-1 of file bytes -> FileSymbols, shared by every index in the process (bounded, LRU)."""

    def __init__(self, capacity: int = 200_000) -> None:
        self.capacity = capacity
        self.data: OrderedDict[str, FileSymbols] = OrderedDict()
        self.lock = threading.Lock()

    def get(self, key: str) -> FileSymbols | None:
        with self.lock:
            value = self.data.get(key)
            if value is not None:
                self.data.move_to_end(key)
            return value

    def put(self, key: str, value: FileSymbols) -> None:
        with self.lock:
            self.data[key] = value
            self.data.move_to_end(key)
            while len(self.data) > self.capacity:
                self.data.popitem(last=False)


CONTENT_CACHE = _ContentCache()


@attrs.define
class FileEntry:
    """One indexed file: its stat signature, bytes, content hash and parse result (symbols carry the path)."""

    mtime_ns: int
    size: int
    sha1: str
    data: bytes
    symbols: tuple[Symbol, ...]
    calls: tuple[tuple[str, int], ...]
    has_error: bool
    n_lines: int
    skipped: str = ""  # FileSymbols.skipped: why a file has no symbols (its text is still searched)
    transient: bool = False  # FileSymbols.transient: parsed again on the next refresh

    def enclosing(self, line: int) -> Symbol | None:
        """The innermost definition containing 1-based ``line``."""
        inner = [s for s in self.symbols if s.start <= line <= s.end]
        return min(inner, key=lambda s: s.n_lines) if inner else None


def _with_path(parsed: FileSymbols, path: str) -> tuple[tuple[Symbol, ...], tuple[tuple[str, int], ...]]:
    return tuple(attrs.evolve(s, path=path) for s in parsed.symbols), parsed.calls


class CodeIndex:
    """An index of the source files under ``root``.

    Build or update with :meth:`refresh` (cheap when nothing changed: one ``stat`` per file). ``workers`` > 1
    parses cache misses of a large first build in a process pool. Attributes after refresh: ``files``
    (relpath -> FileEntry), ``version`` (bumped whenever any file changed), ``stats`` of the last refresh.
    """

    def __init__(self, root: str | os.PathLike, workers: int | None = None) -> None:
        self.root = Path(root).resolve()
        self.files: dict[str, FileEntry] = {}
        self.version = 0
        self.workers = workers if workers is not None else min(2, os.cpu_count() or 1)
        self.stats: dict[str, Any] = {}
        self._dirs: dict[str, tuple[int, list[str], list[str]]] = {}
        self._last_refresh_ns = 0
        self._derived: dict[str, Any] = {}
        self._derived_version = -1
        self.lock = threading.Lock()

    # -- building ----------------------------------------------------------------------------------------------
    def _walk(self) -> Iterable[tuple[str, os.stat_result]]:
        """Every indexable file with its stat. A directory whose mtime is unchanged is not listed again (its
        entries are remembered), so a no-change refresh costs one stat per directory and per source file."""
        root = str(self.root)
        stack = [root]
        dirs: dict[str, tuple[int, list[str], list[str]]] = {}
        while stack:
            current = stack.pop()
            try:
                dir_mtime = os.stat(current).st_mtime_ns
            except OSError:
                continue
            cached = self._dirs.get(current)
            if cached is not None and cached[0] == dir_mtime:
                subdirs, names = cached[1], cached[2]
            else:
                subdirs, names = [], []
                try:
                    entries = list(os.scandir(current))
                except OSError:
                    continue
                for entry in entries:
                    try:
                        if entry.is_dir(follow_symlinks=False):
                            if entry.name not in SKIP_DIRS and not entry.name.endswith(".egg-info"):
                                subdirs.append(entry.path)
                        elif entry.is_file(follow_symlinks=False) and os.path.splitext(entry.name)[1] in LANGUAGES:
                            names.append(entry.path)
                    except OSError:
                        continue
            dirs[current] = (dir_mtime, subdirs, names)
            stack.extend(subdirs)
            for path in names:
                try:
                    st = os.stat(path, follow_symlinks=False)
                except OSError:
                    continue
                if st.st_size <= MAX_FILE_BYTES:
                    yield path[len(root) + 1:].replace(os.sep, "/"), st
        self._dirs = dirs

    def refresh(self) -> dict[str, Any]:
        """Bring the index up to date with the files on disk; return counts (files, changed, parsed, removed)
        and, when there are any, ``skipped``: relpath -> reason for each indexed file parsed without symbols (see
        :func:`parse_python`; the search tool's metadata carries these stats)."""
        with self.lock:
            return self._refresh()

    def _refresh(self) -> dict[str, Any]:
        started_ns = time.time_ns()
        seen: set[str] = set()
        changed: list[tuple[str, os.stat_result, bytes, str]] = []
        for rel, st in self._walk():
            seen.add(rel)
            old = self.files.get(rel)
            # "racy" files (modified around the last refresh) are re-hashed: a same-size edit within one
            # timestamp tick would otherwise go unseen (git's racy-git rule)
            if old is not None and old.mtime_ns == st.st_mtime_ns and old.size == st.st_size \
                    and st.st_mtime_ns < self._last_refresh_ns - 2_000_000_000 and not old.transient:
                continue
            try:
                data = (self.root / rel).read_bytes()
            except OSError:
                continue
            sha1 = hashlib.sha1(data).hexdigest()
            if old is not None and old.sha1 == sha1 and not old.transient:
                old.mtime_ns, old.size = st.st_mtime_ns, st.st_size
                continue
            changed.append((rel, st, data, sha1))
        removed = [rel for rel in self.files if rel not in seen]
        for rel in removed:
            del self.files[rel]
        misses = [(rel, data) for rel, _st, data, sha1 in changed if CONTENT_CACHE.get(sha1) is None]
        parsed: dict[str, FileSymbols] = {}
        if self.workers > 1 and len(misses) > 200:
            with ProcessPoolExecutor(self.workers) as pool:
                jobs = [(os.path.splitext(rel)[1], data) for rel, data in misses]
                for (rel, _), (_suffix, result) in zip(misses, pool.map(_parse_job, jobs, chunksize=32)):
                    parsed[rel] = result
        else:
            for rel, data in misses:
                parsed[rel] = LANGUAGES[os.path.splitext(rel)[1]](data)
        for rel, st, data, sha1 in changed:
            result = parsed.get(rel)
            if result is None:
                result = CONTENT_CACHE.get(sha1) or LANGUAGES[os.path.splitext(rel)[1]](data)
            if result.transient:  # the CPU backstop stopped it: maybe the machine, not the file; once more
                result = LANGUAGES[os.path.splitext(rel)[1]](data)
            if rel in parsed and not result.transient:
                CONTENT_CACHE.put(sha1, result)
            symbols, calls = _with_path(result, rel)
            self.files[rel] = FileEntry(mtime_ns=st.st_mtime_ns, size=st.st_size, sha1=sha1, data=data,
                                        symbols=symbols, calls=calls, has_error=result.has_error,
                                        n_lines=result.n_lines, skipped=result.skipped,
                                        transient=result.transient)
        self._last_refresh_ns = started_ns
        if changed or removed:
            self.version += 1
        for rel, _st, _data, _sha1 in changed:
            if self.files[rel].skipped:
                log.warning("index %s: %s indexed without symbols: %s", self.root, rel, self.files[rel].skipped)
        self.stats = {"files": len(self.files), "changed": len(changed), "parsed": len(parsed),
                      "removed": len(removed)}
        skipped = self.skipped()
        if skipped:
            self.stats["skipped"] = skipped
        return self.stats

    def skipped(self) -> dict[str, str]:
        """relpath -> why that indexed file has no symbols (over the parse byte limit or CPU budget)."""
        return {rel: entry.skipped for rel, entry in self.files.items() if entry.skipped}

    # -- derived tables (rebuilt lazily when the version changes) ------------------------------------------------
    def derived(self, key: str, build) -> Any:
        if self._derived_version != self.version:
            self._derived = {}
            self._derived_version = self.version
        if key not in self._derived:
            self._derived[key] = build()
        return self._derived[key]

    def symbols(self) -> list[Symbol]:
        return self.derived("symbols", lambda: [s for f in self.files.values() for s in f.symbols])

    def by_name(self) -> dict[str, list[Symbol]]:
        def build():
            table: dict[str, list[Symbol]] = {}
            for s in self.symbols():
                table.setdefault(s.name, []).append(s)
            return table

        return self.derived("by_name", build)

    def text(self, path: str) -> str:
        return self.files[path].data.decode("utf-8", "replace")

    def lines(self, path: str) -> list[str]:
        return self.text(path).splitlines()


IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|\d+")
_CAMEL = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+")
TOKEN_MEMO_CAPACITY = 500_000


def ident_tokens(ident: str) -> tuple[str, ...]:
    """The code tokens of one identifier: lower-cased whole, then its snake_case and camelCase parts
    (``getHTTPResponse_code`` -> ``gethttpresponse_code``, ``get``, ``http``, ``response``, ``code``)."""
    low = ident.lower()
    if "_" not in ident and ident[1:].islower():  # the common case: nothing to split
        return (low,)
    out = [low]
    if "_" in ident or any(c.isupper() for c in ident[1:]):
        for part in ident.split("_"):
            for piece in _CAMEL.findall(part):
                piece = piece.lower()
                if piece and piece != low:
                    out.append(piece)
    return tuple(out)


class _TokenMemo(dict):
    """identifier -> :func:`ident_tokens`, filled on first sight (``__missing__`` keeps the hit path in C)."""

    def __missing__(self, ident: str) -> tuple[str, ...]:
        toks = self[ident] = ident_tokens(ident)
        return toks


_TOKEN_MEMO = _TokenMemo()


def code_tokens(text: str) -> list[str]:
    """Tokens for BM25 over code and prose: each identifier lower-cased, plus its snake_case and camelCase parts."""
    if len(_TOKEN_MEMO) > TOKEN_MEMO_CAPACITY:
        _TOKEN_MEMO.clear()
    return list(chain.from_iterable(map(_TOKEN_MEMO.__getitem__, IDENT.findall(text))))
