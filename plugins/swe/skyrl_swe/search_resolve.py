"""Dotted-name resolution for the ``search`` tool: ``pkg.sub.module.Class.attr`` to the definition it names.

Every split of the dotted name into a module part and an attribute part is tried, longest module first
(``pkg/sub/module.py`` or ``pkg/sub/module/__init__.py``, also under a ``src/``-style prefix). In the module, the
attribute part is looked up as a qualified name; when the module does not define its first component, the
module's imports are followed — ``from .x import y``, ``from pkg.x import y as z``, ``from .x import *`` (with
the target's ``__all__`` when it has one) and ``import pkg.x as y`` — up to :data:`MAX_HOPS` re-exports. Imports
are read with a regular expression over the file's text, never by running or compiling it (the files are agent
written). A name that resolves nowhere is the caller's to fall back on; :func:`resolve` says why it failed.
"""

from __future__ import annotations

import re

import attrs

from .index import CodeIndex, Symbol
from .search_prose import is_test_path

MAX_HOPS = 6
# every repetition is bounded: an unclosed "(" or "[" repeated through a hostile 2 MB file must not make the
# scan quadratic
_FROM_IMPORT = re.compile(r"^[ \t]*from[ \t]+(?P<mod>\.{0,10}[\w.]{0,300})[ \t]+import[ \t]+"
                          r"(?P<names>\([\w\s,\\#.:-]{0,5000}\)|[^\n#;]{1,2000})", re.MULTILINE)
_IMPORT_AS = re.compile(r"^[ \t]*import[ \t]+(?P<mod>[\w.]{1,300})[ \t]+as[ \t]+(?P<alias>\w{1,200})", re.MULTILINE)
_ALL = re.compile(r"^__all__[ \t]*(?:\+?=|:[^=\n]{0,200}=)[ \t]*[\[(]", re.MULTILINE)
_NAME_AS = re.compile(r"(?P<name>\w+)(?:\s+as\s+(?P<alias>\w+))?")


@attrs.frozen
class Resolution:
    """What a dotted name resolved to: ``symbols`` (definitions, best first), ``module`` (a file, when the name
    is a module), ``how`` (the chain followed, for the answer's header), ``reason`` (why nothing resolved)."""

    symbols: tuple[Symbol, ...] = ()
    module: str | None = None
    how: str = ""
    reason: str = ""


def module_table(index: CodeIndex) -> dict[str, str]:
    """Dotted module name -> file, for every indexed file, under each possible package root (``src/a/b.py`` is
    ``src.a.b`` and ``a.b``); a library file wins a clash over a test or fixture file, then the shortest path."""

    def build() -> dict[str, str]:
        table: dict[str, str] = {}
        # library modules before test and fixture trees (tests/migrations must not shadow django/db/migrations),
        # then the shortest path
        for path in sorted(index.files, key=lambda p: (is_test_path(p), p.count("/"), p)):
            if not path.endswith(".py"):
                continue
            parts = path[:-3].split("/")
            if parts[-1] == "__init__":
                parts = parts[:-1]
            for cut in range(len(parts)):
                name = ".".join(parts[cut:])
                if name:
                    table.setdefault(name, path)
        return table

    return index.derived("modules", build)


def _module_name(path: str) -> str:
    parts = path[:-3].split("/") if path.endswith(".py") else path.split("/")
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _absolute(path: str, module: str) -> str:
    """``from .x import`` inside ``path`` -> the absolute dotted module."""
    dots = len(module) - len(module.lstrip("."))
    if not dots:
        return module
    package = _module_name(path).split(".")
    if not path.endswith("__init__.py"):
        package = package[:-1]
    base = package[: len(package) - (dots - 1)] if dots > 1 else package
    rest = module[dots:]
    return ".".join(base + ([rest] if rest else []))


def imports(index: CodeIndex, path: str) -> dict[str, str]:
    """Names bound by imports in ``path``: local name -> ``module:name`` (``module:`` alone for a module alias,
    ``module:*`` for a star import keyed ``*<n>``)."""

    def build() -> dict[str, str]:
        text = index.text(path)
        out: dict[str, str] = {}
        for n, m in enumerate(_FROM_IMPORT.finditer(text)):
            mod = _absolute(path, m.group("mod"))
            names = m.group("names").strip("() \t\\\n")
            if names == "*":
                out[f"*{n}"] = f"{mod}:*"
                continue
            for part in names.replace("\\\n", " ").split(","):
                nm = _NAME_AS.match(part.strip())
                if nm:
                    out[nm.group("alias") or nm.group("name")] = f"{mod}:{nm.group('name')}"
        for m in _IMPORT_AS.finditer(text):
            out[m.group("alias")] = f"{m.group('mod')}:"
        return out

    return index.derived(f"imports:{path}", build)


def exported(index: CodeIndex, path: str) -> list[str] | None:
    """The names in ``path``'s ``__all__`` (a literal list or tuple), or None when it has none."""
    text = index.text(path)
    m = _ALL.search(text)
    if m is None:
        return None
    end = min(i for i in (text.find("]", m.end()), text.find(")", m.end()), m.end() + 20_000, len(text)) if i >= 0)
    return re.findall(r"['\"](\w+)['\"]", text[m.end(): end])


def _in_module(index: CodeIndex, path: str, attr: list[str], hops: int, chain: list[str]) -> Resolution | None:
    entry = index.files.get(path)
    if entry is None or not attr:
        return None
    qual = ".".join(attr)
    syms = [s for s in entry.symbols if s.qualname == qual]
    if syms:
        return Resolution(symbols=tuple(syms), how=" -> ".join(chain + [f"{path}:{qual}"]))
    if hops >= MAX_HOPS:
        return None
    bound = imports(index, path)
    modules = module_table(index)
    target = bound.get(attr[0])
    if target is not None:
        mod, _, name = target.partition(":")
        where = modules.get(f"{mod}.{name}") if name else None  # `from pkg import submodule`
        if where is not None:
            if len(attr) == 1:
                return Resolution(module=where, how=" -> ".join(chain + [f"{path} imports module {mod}.{name}"]))
            found = _in_module(index, where, attr[1:], hops + 1, chain + [f"{path} imports {mod}.{name}"])
            if found:
                return found
        where = modules.get(mod)
        if where is not None and where != path:
            if not name:  # import pkg.x as y
                if len(attr) == 1:
                    return Resolution(module=where, how=" -> ".join(chain + [f"{path} imports {mod}"]))
                return _in_module(index, where, attr[1:], hops + 1, chain + [f"{path} imports {mod}"])
            return _in_module(index, where, [name] + attr[1:], hops + 1,
                              chain + [f"{path} re-exports {name} from {mod}"])
    for key, target in bound.items():
        if key.startswith("*"):
            mod = target.partition(":")[0]
            where = modules.get(mod)
            if where is None or where == path:
                continue
            names = exported(index, where)
            if names is not None and attr[0] not in names:
                continue
            found = _in_module(index, where, attr, hops + 1, chain + [f"{path} star-imports {mod}"])
            if found:
                return found
    return None


def resolve(index: CodeIndex, dotted: str) -> Resolution:
    """Resolve ``pkg.mod.Class.attr`` by every module/attribute split (longest module first), following
    imports and re-exports; on failure ``reason`` names the longest module found and what it lacks."""
    parts = dotted.split(".")
    modules = module_table(index)
    longest: tuple[str, str] | None = None
    for cut in range(len(parts), 0, -1):
        path = modules.get(".".join(parts[:cut]))
        if path is None:
            continue
        attr = parts[cut:]
        if not attr:
            return Resolution(module=path, how=f"module {dotted} is {path}")
        found = _in_module(index, path, attr, 0, [])
        if found is not None:
            return found
        longest = longest or (path, ".".join(attr))
    if longest:
        return Resolution(reason=f"module {longest[0]} neither defines nor imports '{longest[1]}'")
    return Resolution(reason=f"no module of '{dotted}' is in the index")
