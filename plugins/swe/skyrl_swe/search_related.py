"""What a ``search`` answer adds around its matches: where a file ranks (library, auxiliary, tests), module-level
assignments of a name, and the definitions a match calls and is used by (#24).

Every scan reads the host-side index's bytes (agent-written files: nothing runs), is pre-filtered by each file's
identifier set (:func:`skyrl_swe.search_prose.file_words`, cached by SHA-1) and uses anchored, bounded patterns so
a hostile 2 MB file costs a linear pass.
"""

from __future__ import annotations

import re
from typing import Callable, Iterator

from .index import CodeIndex, Symbol
from .search_prose import file_words, is_test_path

_AUX_DIRS = frozenset({"examples", "example", "docs", "doc", "benchmarks", "asv_bench", "scripts"})


def is_aux_path(path: str) -> bool:
    """A file outside the library proper: under examples/docs/benchmarks/scripts, or setup.py/conf.py."""
    parts = path.split("/")
    return parts[-1] in ("setup.py", "conf.py", "noxfile.py") or any(p in _AUX_DIRS for p in parts[:-1])


def place(path: str) -> int:
    """Where a file ranks among equals: 0 library source, 1 examples/docs/benchmarks/scripts/setup files
    (:func:`is_aux_path`), 2 tests and fixtures (:func:`skyrl_swe.search_prose.is_test_path`)."""
    return 2 if is_test_path(path) else 1 if is_aux_path(path) else 0


def assignment_sites(index: CodeIndex, name: str, in_scope: Callable[[str], bool]) -> list[tuple[str, int, str]]:
    """Module-level (unindented) assignments binding ``name`` — ``name = ...``, ``name: T = ...``, chains
    ``a = name = ...`` — as (path, 1-based line, the line's text), library files first, shallow paths first."""
    pattern = re.compile(rb"^(?:[A-Za-z_]\w{0,200}[ \t]*=[ \t]*){0,8}" + re.escape(name.encode()) +
                         rb"[ \t]*(?::[^=\n]{0,200})?=(?!=)[^\n]{0,300}", re.MULTILINE)
    sites: list[tuple[str, int, str]] = []
    for path, entry in index.files.items():
        if not in_scope(path) or name not in file_words(entry):
            continue
        for m in pattern.finditer(entry.data):
            sites.append((path, entry.data.count(b"\n", 0, m.start()) + 1,
                          m.group(0).decode("utf-8", "replace").strip()))
    sites.sort(key=lambda site: (place(site[0]), site[0].count("/"), site[0], site[1]))
    return sites


def word_lines(index: CodeIndex, word: str, keep: Callable[[str], bool]) -> Iterator[tuple[str, object, int]]:
    """Every occurrence of ``word`` as a whole identifier (not inside a longer name) in the files ``keep``
    accepts, as (path, index entry, 1-based line); files without the word are skipped by their identifier set."""
    key = word.encode()
    for path, entry in index.files.items():
        if not keep(path) or word not in file_words(entry):
            continue
        data, start = entry.data, 0
        while (pos := data.find(key, start)) >= 0:
            start = pos + len(key)
            before = data[pos - 1: pos] if pos else b" "
            after = data[start: start + 1] or b" "
            if before.isalnum() or before == b"_" or after.isalnum() or after == b"_":
                continue
            yield path, entry, data.count(b"\n", 0, pos) + 1


def _module_stem(path: str) -> str:
    """The name a module is imported by: ``a/b/c.py`` -> ``c``, ``a/b/__init__.py`` -> ``b``."""
    parts = path[:-3].split("/") if path.endswith(".py") else path.split("/")
    return parts[-2] if parts[-1] == "__init__" and len(parts) > 1 else parts[-1]


def _reference_patterns(name: str, stem: str) -> tuple[re.Pattern, re.Pattern]:
    """Patterns telling whether a file's text imports ``name`` from a module called ``stem`` (``from x.stem
    import a, name``, ``from .stem import name``) or names it through that module (``stem.name``) — a word match
    alone would count every namesake (``Library.filter`` is no user of ``QuerySet.filter``). Bounded repetitions:
    the text is agent-written."""
    n, st = re.escape(name.encode()), re.escape(stem.encode())
    imported = re.compile(rb"^[ \t]*from[ \t]+[\w.]{0,300}?\b" + st + rb"[ \t]+import[ \t]+[^\n#]{0,2000}?\b" + n +
                          rb"\b(?![ \t]+as\b)", re.MULTILINE)
    return imported, re.compile(rb"\b" + st + rb"\." + n + rb"\b")


def users(index: CodeIndex, sym: Symbol, in_scope: Callable[[str], bool],
          limit: int = 8) -> list[tuple[Symbol, bool]]:
    """The library definitions (tests and auxiliary files left out) whose code names ``sym`` as a whole word,
    most uses first, each with whether the use is *linked* to ``sym``: in ``sym``'s own file, or in a file that
    imports it (for a method: its class) from ``sym``'s module or names it through that module
    (:func:`_reference_patterns`). An unlinked one only shares the name (``Library.filter`` and ``QuerySet.filter``) and
    is shown as such. ``sym`` and its own members are not their own users."""
    owner = sym.qualname.split(".")[0]  # a method is reached through its class: files that import the class
    patterns = _reference_patterns(owner if sym.kind == "method" else sym.name, _module_stem(sym.path))
    linked: dict[str, bool] = {}
    hits: dict[Symbol, int] = {}
    for path, entry, line in word_lines(index, sym.name, lambda p: place(p) == 0 and in_scope(p)):
        if path not in linked:
            linked[path] = path == sym.path or (
                (sym.kind != "method" or owner in file_words(entry))
                and any(p.search(entry.data) is not None for p in patterns))
        user = entry.enclosing(line)
        if user is None or (user.path == sym.path and sym.start <= user.start <= sym.end):
            continue
        hits[user] = hits.get(user, 0) + 1
    ranked = sorted(hits, key=lambda u: (-hits[u], u.path, u.start))[:limit]
    return [(u, linked[u.path]) for u in ranked]


def callees(index: CodeIndex, sym: Symbol, in_scope: Callable[[str], bool], limit: int = 8) -> list[Symbol]:
    """The library definitions ``sym``'s body calls, in call order: only names defined at most 3 times outside
    tests (a name defined everywhere says nothing), never ``sym`` itself; [] for a class."""
    if sym.kind not in ("function", "method"):
        return []
    entry = index.files.get(sym.path)
    if entry is None:
        return []
    table = index.by_name()
    lines = entry.data.split(b"\n")
    out: list[Symbol] = []
    for called, line in entry.calls:
        if not (sym.start <= line <= sym.end) or called == sym.name:
            continue
        short = called.rsplit(".", 1)[-1]
        defs = [d for d in table.get(short, []) if place(d.path) == 0 and in_scope(d.path)]
        text = lines[line - 1] if line <= len(lines) else b""
        receiver = re.search(rb"(\w+)\s*\.\s*" + re.escape(short.encode()) + rb"\s*\(", text)
        if receiver is None:
            # a bare call reaches a function or class, the one in this file when there is one
            defs = [d for d in defs if d.kind != "method"]
            local = [d for d in defs if d.path == sym.path]
            defs = local or defs
        else:
            # the receiver's name often names its class: self -> this class, collector -> Collector,
            # self.query -> Query; a match settles it however many namesakes there are
            recv = receiver.group(1).decode("ascii", "replace").lower().replace("_", "")
            own = sym.qualname.split(".")[0].lower() if sym.kind == "method" else ""
            typed = [d for d in defs if d.kind == "method" and d.qualname.split(".")[0].lower().replace("_", "")
                     in ((own,) if recv in ("self", "cls") else (recv,))]
            if typed:
                defs = typed[:3]
        if 0 < len(defs) <= 3:
            defs.sort(key=lambda d: (d.path != sym.path, d.path.count("/"), d.path, d.start))
            out += [d for d in defs if d not in out and d != sym]
        if len(out) >= limit:
            break
    return out[:limit]
