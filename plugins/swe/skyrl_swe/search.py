"""The ``search`` tool: AST-based code search over the trajectory's workspace (SkyRL-Agent, arXiv 2511.16108,
Sec. 4.1 — the SWE agent's search tool localises code by structure rather than by grep).

Query forms (one string; the first that applies wins):

- ``path/to/mod.py:Class.method`` or ``path/to/mod.py`` — a qualified path (a file alone gives its outline);
- ``Class.method`` or ``pkg.mod.func`` — a dotted qualified name;
- ``class:X`` / ``def:X`` / ``method:X`` — every class / function / method named X (fuzzy when none is exact);
- ``subclass:Y`` — classes deriving from Y; ``calls:Z`` — call sites of Z; ``text:some words`` — substring;
- a quoted literal (``"max_age"``), a hyphenated option or config key, a message id (``E1101``) — content search,
  hits grouped by their enclosing definitions;
- a bare identifier — definitions with that name; else a module-level assignment of it (``pprint =
  pretty_print``: the assigned definition, one hop); else the module of that name (a package lists its modules;
  a test package only when no library code uses the word); else, for a name the code uses but never defines, the
  definitions that use it as a word; else names within :data:`FUZZY_FLOOR` (rapidfuzz ratio, names of
  :data:`FUZZY_MIN_LEN`+ characters); else "no close match" and a ``text:`` hint. An UPPER_CASE word (a
  constant, setting key or SQL keyword) goes from the exact name straight to its uses;
- an answer with one or two definitions also names what they call and what uses them (``Calls into:``,
  ``Used by:``; those refs are in :attr:`SearchOutput.more` with the ``[N more]`` ones);
- a dotted name resolves through every module/attribute split and through re-exports
  (:mod:`skyrl_swe.search_resolve`), then falls back to a plain name search with the reason shown;
- anything else (several words, prose) — fielded BM25 over modules and definitions (:mod:`skyrl_swe.search_prose`).

Test and fixture files rank after source in every form, examples/docs/benchmarks/scripts between the two;
``path`` into a test tree still reaches them.

Results show the code with line numbers, or a skeleton (signature, docstring, member signatures with line
ranges) when a body is longer than ``max_lines``; the output ends with a hint for a more precise next query.
The index lives in the trajectory's tool store and is refreshed (incrementally) before every query.
"""

from __future__ import annotations

import asyncio
import re
import threading
from pathlib import Path

import attrs

from skyrl_core import ToolContext, ToolResult

from .runtime import outside_workspace, workspace_for_tool

from .index import CodeIndex, Symbol, code_tokens
from .search_prose import MODULE_KIND, is_test_path, module_symbol, prose_index
from .search_related import assignment_sites, place, word_lines
from .search_related import callees as callees_of
from .search_related import users as users_of
from .search_resolve import module_table, resolve

DEFAULT_RESULTS = 5
MAX_QUERY_CHARS = 10_000  # a query is a name, a path or a few words
MAX_LINES = 60
KIND_ORDER = {"class": 0, "function": 1, "method": 2}
_PREFIXES = {"class": "class", "def": "function", "function": "function", "func": "function", "method": "method",
             "subclass": "subclass", "bases": "subclass", "calls": "calls", "callers": "calls", "text": "text",
             "grep": "text", "file": "file"}
_QUALIFIED_PATH = re.compile(r"^(?P<path>[\w./-]+\.pyi?)(?::(?P<qual>[\w.]+))?(?::(?P<line>\d+))?$")
_DOTTED = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)+$")
_IDENT = re.compile(r"^[A-Za-z_]\w*$")
# evidence that is a string, not a definition name: a quoted literal, a message id (E1101, fields.E304,
# admin.W411), an option or config key with a hyphen (--max-line-length, max-line-length)
_QUOTED = re.compile(r"^(?P<q>['\"])(?P<body>.+)(?P=q)$", re.DOTALL)
_MESSAGE_ID = re.compile(r"^(?:[a-z_]+\.)?[A-Z]{1,4}\d{2,5}$")
_KEY = re.compile(r"^-{0,2}[A-Za-z_][\w]*(?:-[\w]+)+$")
_CONSTANT = re.compile(r"^[A-Z][A-Z0-9_]+$")  # TEST, SQLITE_MAX, E501 is a message id (caught before)
_CONTEXT_STOP = frozenset({"self", "cls", "objects", "obj", "instance"})
FUZZY_FLOOR = 80  # rapidfuzz ratio (0-100) a name must reach to be offered as a close match
FUZZY_MIN_LEN = 3  # shorter definition names are never offered as fuzzy matches


@attrs.define
class SearchOutput:
    """A rendered answer: ``text`` for the model, ``mode`` the query form used, ``refs`` of the results shown."""

    text: str
    mode: str
    refs: list[str] = attrs.Factory(list)
    total: int = 0  # how many definitions matched before truncation (0 when not counted)
    more: list[str] = attrs.Factory(list)  # the refs named (not shown) in the answer's "[N more: ...]" line


_is_test_path = is_test_path  # the name the benchmark and older callers import


def _rank_key(sym: Symbol) -> tuple:
    return (place(sym.path), KIND_ORDER.get(sym.kind, 3), sym.path.count("/"), sym.path, sym.start)


class Searcher:
    """Answers queries against one :class:`CodeIndex`. ``path`` restricts results to files under a prefix;
    ``kind`` to class | function | method."""

    def __init__(self, index: CodeIndex) -> None:
        self.index = index

    # -- entry -------------------------------------------------------------------------------------------------
    def search(self, query: str, max_results: int = DEFAULT_RESULTS, path: str | None = None,
               kind: str | None = None, max_lines: int = MAX_LINES, refresh: bool = True) -> SearchOutput:
        """Answer one query (forms in the module docstring). ``refresh=False`` skips the index refresh, for a
        caller that has just refreshed and runs many queries (:func:`skyrl_swe.localize.localize`)."""
        if refresh:
            self.index.refresh()
        query = query.strip()
        self.configure(path, kind, max_results, max_lines)
        if not query:
            return SearchOutput("Empty query. Hint: search a name (`camelize`), a qualified path "
                                "(`pkg/mod.py:Class.method`), `subclass:Base`, `calls:func` or `text:words`.", "none")
        prefix, _, rest = query.partition(":")
        mode = _PREFIXES.get(prefix.strip().lower()) if rest and not prefix.endswith((".py", ".pyi")) else None
        if mode is not None:
            rest = rest.strip()
            if mode in ("class", "function", "method"):
                return self._by_name(rest, kinds={mode})
            return getattr(self, f"_{mode}")(rest)
        m = _QUALIFIED_PATH.match(query)
        if m:
            return self._qualified_path(m.group("path"), m.group("qual"), m.group("line"))
        if _QUOTED.match(query):
            return self._string(_QUOTED.match(query).group("body"))
        if _MESSAGE_ID.match(query) or _KEY.match(query):
            return self._string(query)
        if _DOTTED.match(query):
            return self._dotted(query)
        if _IDENT.match(query):
            return self._by_name(query, kinds={kind} if kind else None)
        return self._bm25(query)

    def configure(self, path: str | None = None, kind: str | None = None, max_results: int = DEFAULT_RESULTS,
                  max_lines: int = MAX_LINES) -> None:
        """Set the scope (files under ``path``), kind filter and output limits the next lookups use."""
        self.scope = (path or "").strip("./") if path and path not in (".", "./") else ""
        self.kind = kind
        self.max_results = max(1, max_results)
        self.max_lines = max_lines

    # -- helpers -----------------------------------------------------------------------------------------------
    def _in_scope(self, path: str) -> bool:
        return not self.scope or path == self.scope or path.startswith(self.scope + "/")

    def _symbols(self) -> list[Symbol]:
        return [s for s in self.index.symbols() if self._in_scope(s.path) and (not self.kind or s.kind == self.kind)]

    def _render(self, sym: Symbol, full: bool | None = None) -> tuple[str, bool]:
        """The code of ``sym`` with line numbers, or its skeleton when longer than ``max_lines``; returns
        (text, is_skeleton)."""
        lines = self.index.lines(sym.path)
        if sym.kind == MODULE_KIND:
            outline = [f"{'  ' * s.qualname.count('.')}{s.kind} {s.name}  lines {s.start}-{s.end}"
                       for s in self.index.files[sym.path].symbols[:12]]
            return (f"## {sym.path}  module ({sym.end} lines)\n" + "\n".join(f"{n:6d}  {lines[n - 1]}" for n in
                    range(1, min(len(lines), 8) + 1)) + ("\n  outline: " + "; ".join(outline) if outline else ""),
                    True)
        head = f"## {sym.path}:{sym.start}-{sym.end}  {sym.kind} {sym.qualname}"
        if sym.bases:
            head += f"({', '.join(sym.bases)})"
        if full or (full is None and sym.n_lines <= self.max_lines):
            body = [f"{n:6d}  {lines[n - 1]}" for n in range(sym.start, min(sym.end, len(lines)) + 1)]
            return head + "\n" + "\n".join(body), False
        return head + "\n" + self._skeleton(sym, lines), True

    def _focused(self, sym: Symbol, hits: list[int], most: int = 6) -> str:
        """``sym``'s signature and the lines it matched on (at most ``most``), each with its line number."""
        lines = self.index.lines(sym.path)
        where = f"{sym.kind} {sym.qualname}" if sym.kind != MODULE_KIND else "module level"
        out = [f"## {sym.path}:{sym.start}-{sym.end}  {where}"]
        keep = list(range(sym.start, sym.header_end + 1)) if sym.kind != MODULE_KIND else []
        for n in sorted(set(hits))[:most]:
            if n not in keep:
                keep.append(n)
        last = None
        for n in keep:
            if n > len(lines):
                continue
            if last is not None and n > last + 1:
                out.append(f"{'':6}  ...")
            out.append(f"{n:6d}  {lines[n - 1]}")
            last = n
        if len(set(hits)) > most:
            out.append(f"{'':6}  ... ({len(set(hits)) - most} more matching lines)")
        return "\n".join(out)

    def _skeleton(self, sym: Symbol, lines: list[str]) -> str:
        shown: list[int] = list(range(sym.start, sym.header_end + 1))
        doc = _docstring_lines(lines, sym.header_end)
        shown += doc
        members = [s for s in self.index.files[sym.path].symbols
                   if s.start > sym.start and s.end <= sym.end and s.qualname.count(".") == sym.qualname.count(".") + 1]
        out = [f"{n:6d}  {lines[n - 1]}" for n in shown if n <= len(lines)]
        if members:
            for member in members:
                for n in range(member.start, member.header_end + 1):
                    out.append(f"{n:6d}  {lines[n - 1]}")
                out.append(f"{'':6}        ...  ({member.kind} {member.name}: lines {member.start}-{member.end})")
        else:
            after = (doc[-1] if doc else sym.header_end) + 1
            preview = list(range(after, min(after + 10, sym.end + 1)))
            out += [f"{n:6d}  {lines[n - 1]}" for n in preview]
            if preview and preview[-1] < sym.end:
                out.append(f"{'':6}  ... ({sym.end - preview[-1]} more lines, to line {sym.end})")
        return "\n".join(out)

    def _results(self, syms: list[Symbol], mode: str, header: str, hint: str | None = None,
                 focus: dict[Symbol, list[int]] | None = None) -> SearchOutput:
        """Render ``syms`` (at most ``max_results``); ``focus`` maps a symbol to the lines that made it match (a
        word's uses, a string's occurrences): those are shown under its signature instead of its outline."""
        shown = syms[: self.max_results]
        parts = [header]
        skeletons = []
        for sym in shown:
            if focus and focus.get(sym) and (sym.kind == MODULE_KIND or sym.n_lines > self.max_lines // 4):
                parts.append(self._focused(sym, focus[sym]))
                continue
            text, skeleton = self._render(sym)
            parts.append(text)
            if skeleton:
                skeletons.append(sym)
        if len(syms) > len(shown):
            rest = ", ".join(s.ref for s in syms[len(shown): len(shown) + 10])
            parts.append(f"[{len(syms) - len(shown)} more: {rest}{' ...' if len(syms) > len(shown) + 10 else ''}]")
        related: list[Symbol] = []  # what a precise answer calls, then what uses it: named, not shown
        if len(syms) <= 2:  # a precise answer: where its code leads is the next thing to read
            callees = list(dict.fromkeys(c for sym in shown for c in callees_of(self.index, sym, self._in_scope)
                                         if c not in shown))
            if callees:
                parts.append("Calls into: " + ", ".join(f"{c.qualname} ({c.path}:{c.start})" for c in callees[:8]))
            users: dict[Symbol, bool] = {}  # user -> linked (the first shown definition's verdict)
            for sym in shown:
                for u, ok in users_of(self.index, sym, self._in_scope):
                    if u not in shown and u not in callees:
                        users.setdefault(u, ok)
            used = [u for u, ok in users.items() if ok][:8]
            named = [u for u, ok in users.items() if not ok][:8]
            if used:
                parts.append("Used by: " + ", ".join(f"{u.qualname} ({u.path}:{u.start})" for u in used))
            if named:  # the same word, but nothing links it to this definition: said so, not called a use
                parts.append(f"The name '{shown[0].name}' also occurs (not imported from here) in: " +
                             ", ".join(f"{u.qualname} ({u.path}:{u.start})" for u in named))
            related = callees[:8] + list(users)[:8]
        if hint is None:
            hint = self._hint(shown, syms, skeletons)
        parts.append("Hint: " + hint)
        return SearchOutput("\n\n".join(parts), mode, [s.ref for s in shown], total=len(syms),
                            more=[r.ref for r in related] + [s.ref for s in syms[len(shown): len(shown) + 10]])

    def _hint(self, shown: list[Symbol], syms: list[Symbol], skeletons: list[Symbol]) -> str:
        if skeletons and skeletons[0].kind == MODULE_KIND:
            return f"search `{skeletons[0].path}` for the file's full outline."
        if skeletons:
            sk = skeletons[0]
            lines = self.index.files[sk.path].symbols
            member = next((s for s in lines if s.start > sk.start and s.end <= sk.end), None)
            target = f"`{sk.path}:{member.qualname}`" if member else f"`{sk.path}:{sk.qualname}`"
            return (f"{sk.qualname} is long ({sk.n_lines} lines) so only its outline is shown; search {target} for "
                    f"one member, or view lines with str_replace_editor (view_range [{sk.start}, {sk.end}]).")
        if len(syms) > 1:
            s = shown[0]
            return (f"{len(syms)} matches; name one exactly with a qualified path such as `{s.ref}`, "
                    f"or list its callers with `calls:{s.name}`.")
        if shown:
            s = shown[0]
            return f"see who calls it with `calls:{s.name}`; edit it with str_replace_editor on {s.path}."
        return "try `text:<words>` for a substring search."

    # -- query forms -------------------------------------------------------------------------------------------
    def _by_name(self, name: str, kinds: set[str] | None = None, context: list[str] = ()) -> SearchOutput:
        """Definitions named ``name``; ``context`` (lower-case words of a dotted prefix) ranks definitions whose
        qualified name or path contains more of them first, among files of the same place."""
        table = self.index.by_name()
        exact = [s for s in table.get(name, []) if self._in_scope(s.path) and (not kinds or s.kind in kinds)
                 and (not self.kind or s.kind == self.kind)]
        what = "/".join(sorted(kinds)) if kinds else "definition"

        def near(sym: Symbol) -> int:
            where = sym.ref.lower()
            return -sum(w in where for w in context)

        if exact:
            exact.sort(key=lambda s: (place(s.path), near(s)) + _rank_key(s))
            out = self._results(exact, "name", f"{len(exact)} {what}(s) named '{name}':")
            if not kinds and not self.kind and all(s.kind == "method" or place(s.path) for s in exact):
                # no library function or class of that name: a module-level binding (D = Distance) may be
                # what the issue means
                sites = [site for site in assignment_sites(self.index, name, self._in_scope) if not place(site[0])]
                if sites:
                    also = "; ".join(f"{p}:{n}  `{t[:100]}`" for p, n, t in sites[:3])
                    out = attrs.evolve(out, text=out.text + f"\n\nAlso bound at module level: {also}")
            return out
        module = module_table(self.index).get(name) if not kinds and not self.kind else None
        assigned = self._assigned(name) if not kinds and not self.kind else None
        if assigned is not None and (module is None or place(assigned.refs[0].partition(":")[0]) < place(module)):
            return assigned
        if module is not None and self._in_scope(module):
            if not (is_test_path(module) and not self._tests_in_scope()):
                return self._module_answer(name, module)
            # a test package named like the word (tests/ordering/) says less than where the library uses it
            used = self._usage(name, []) if name not in self.index.by_name() else None
            if used is not None and place(used.refs[0].partition(":")[0]) < 2:
                return used
            return self._module_answer(name, module)
        from rapidfuzz import fuzz, process

        if not kinds and not self.scope and not self.kind:
            names, lowered_names = self.index.derived("names", lambda: (list(table), [n.lower() for n in table]))
        else:
            names = [n for n, syms in table.items()
                     if any(self._in_scope(s.path) and (not kinds or s.kind in kinds) for s in syms)]
            lowered_names = [n.lower() for n in names]
        lowered = name.lower()
        if _CONSTANT.match(name) and not kinds:
            # an upper-case word is a constant, setting or SQL keyword (TEST, MIGRATE, SELECT): where it occurs
            # says something; 'test' or 'select' definitions that match it case-insensitively do not
            used = self._usage(name, [])
            if used is not None:
                return used
            return SearchOutput(f"No definition named '{name}' and it occurs nowhere as a word.\n\nHint: "
                                f"`text:{name}` searches substrings case-insensitively.", "none")
        exact_ci = [n for n, low in zip(names, lowered_names) if low == lowered]
        # plain edit-distance ratio, not WRatio: WRatio's partial matching scores a 1-2 character name inside
        # the query high, so every miss used to come back with confident noise
        floor_len = max(FUZZY_MIN_LEN, len(lowered) // 2)
        scored = [(names[i], score, i) for _m, score, i in process.extract(
            lowered, lowered_names, scorer=fuzz.ratio, limit=self.max_results * 4, score_cutoff=FUZZY_FLOOR)
            if len(names[i]) >= floor_len]
        candidates = exact_ci + [n for n, _score, _ in scored if n not in exact_ci]
        if not exact_ci and not kinds:
            # a name the code uses but never defines (a parameter, attribute, keyword, config key) says more
            # where it is used than any fuzzy neighbour does
            used = self._usage(name, [n for n, _score, _ in scored[:3]])
            if used is not None:
                return used
        syms: list[Symbol] = []
        for cand in candidates:
            syms += [s for s in table[cand] if self._in_scope(s.path) and (not kinds or s.kind in kinds)
                     and (not self.kind or s.kind == self.kind)]
        # case-insensitive exact names first, then by closeness; source before tests across every candidate
        order = {cand: i for i, cand in enumerate(candidates)}
        syms.sort(key=lambda s: (place(s.path), order[s.name], near(s), _rank_key(s)))
        if not syms:
            return SearchOutput(f"No {what} named '{name}' and no close match (no name of {floor_len}+ characters "
                                f"reaches {FUZZY_FLOOR}/100 similarity).\n\nHint: `text:{name}` searches file "
                                f"contents, `{name} some words` ranks definitions by text similarity.", "none")
        closest = ", ".join(dict.fromkeys(s.name for s in syms[: self.max_results]))
        return self._results(syms, "fuzzy", f"No {what} named exactly '{name}'; closest names: {closest}",
                             hint=f"search one of [{closest}] exactly, or `text:{name}` for a substring search.")

    def _qualified_path(self, path: str, qual: str | None, line: str | None) -> SearchOutput:
        path = path.lstrip("./") if path.startswith("./") else path
        entry = self.index.files.get(path)
        if entry is None:
            tails = [p for p in self.index.files if p.endswith("/" + path) or p == path]
            if len(tails) == 1:
                path, entry = tails[0], self.index.files[tails[0]]
            elif tails:
                tails.sort(key=lambda p: (place(p), p.count("/"), p))
                listing = ", ".join(tails[:10]) + (f" [{len(tails) - 10} more]" if len(tails) > 10 else "")
                example = f"{tails[0]}:{qual}" if qual else tails[0]
                return SearchOutput(f"'{path}' is ambiguous: {len(tails)} indexed files end with it: {listing}\n\n"
                                    f"Hint: give more of the path, e.g. `{example}`.", "path", tails[:10],
                                    total=len(tails))
            else:
                from rapidfuzz import process

                close = [c for c, _s, _ in process.extract(path, list(self.index.files), limit=5)]
                return SearchOutput(f"No indexed file '{path}'. Closest files: {', '.join(close)}\n\n"
                                    f"Hint: paths are relative to the repository root, e.g. `{close[0] if close else 'pkg/mod.py'}"
                                    f":Class.method`.", "path")
        if line:
            n = int(line)
            inner = [s for s in entry.symbols if s.start <= n <= s.end]
            if inner:
                sym = min(inner, key=lambda s: s.n_lines)
                return self._results([sym], "path", f"Definition around {path}:{n}:")
        if not qual:
            return self._outline(path)
        syms = [s for s in entry.symbols if s.qualname == qual] or \
               [s for s in entry.symbols if s.qualname.endswith("." + qual) or s.name == qual]
        if not syms:
            names = ", ".join(s.qualname for s in entry.symbols[:30])
            return SearchOutput(f"No '{qual}' in {path}. Defined there: {names}\n\nHint: search `{path}` for its "
                                f"outline, or `{qual.rsplit('.', 1)[-1]}` to look in every file.", "path")
        return self._results(syms, "path", f"{path}:{qual}:")

    def _assigned(self, name: str) -> SearchOutput | None:
        """A name bound by a module-level assignment (``pprint = pretty_print``, ``Matrix = MutableDenseMatrix``,
        ``DEFAULT_DB_ALIAS = "default"``): the assigned value's definition when it is a name defined in the
        project (one hop), then the assignment lines; None when no indexed file assigns it at module level."""
        sites = assignment_sites(self.index, name, self._in_scope)
        if not sites:
            return None
        table = self.index.by_name()
        targets: list[Symbol] = []
        for path, _line, text in sites[:5]:
            value = text.rsplit("=", 1)[-1].strip()
            if _IDENT.match(value) and value != name:
                found = [s for s in table.get(value, []) if self._in_scope(s.path)]
                found.sort(key=lambda s: (s.path != path, place(s.path)) + _rank_key(s))
                targets += [s for s in found[:3] if s not in targets]
        listing = [f"{p}:{n}:  {t[:160]}" for p, n, t in sites[:10]]
        more = f"\n[{len(sites) - 10} more]" if len(sites) > 10 else ""
        text = (f"No def or class named '{name}'; it is assigned at module level in {len(sites)} place(s):\n" +
                "\n".join(listing) + more)
        refs = [f"{p}:{n}" for p, n, _t in sites[:10]]
        if targets:
            shown = self._results(targets, "alias", text + "\n\nThe assigned value's definition:")
            return attrs.evolve(shown, refs=[s.ref for s in targets[: self.max_results]] + refs, total=len(sites))
        first = sites[0]
        return SearchOutput(text + f"\n\nHint: view {first[0]} around line {first[1]} with str_replace_editor, "
                            f"or `{name}` as a whole word with `text:{name}`.", "alias", refs, total=len(sites))

    def _tests_in_scope(self) -> bool:
        return bool(self.scope) and is_test_path(self.scope + ("/x.py" if not self.scope.endswith(".py") else ""))

    def _module_answer(self, name: str, module: str) -> SearchOutput:
        out = self._outline(module)
        return SearchOutput(f"No definition named '{name}'; module {name} is {module}:\n" + out.text, "module",
                            out.refs, total=out.total)

    def _package_files(self, init: str) -> list[str]:
        """The modules directly in the package of ``init`` (its ``__init__.py``) and its subpackages'
        ``__init__.py``, source before tests, alphabetical."""
        base = init[: -len("__init__.py")]
        out = []
        for p in self.index.files:
            rest = p[len(base):] if p.startswith(base) and p != init else None
            if rest and (rest.count("/") == 0 or (rest.count("/") == 1 and rest.endswith("/__init__.py"))):
                out.append(p)
        return sorted(out, key=lambda p: (place(p), p))

    def _outline(self, path: str) -> SearchOutput:
        entry = self.index.files[path]
        state = (f", not parsed for definitions: {entry.skipped}; its text is still searched with `text:`"
                 if entry.skipped else ", has syntax errors: partial parse" if entry.has_error else "")
        rows = [f"## {path} ({entry.n_lines} lines{state})"]
        for s in entry.symbols:
            depth = s.qualname.count(".")
            bases = f"({', '.join(s.bases)})" if s.bases else ""
            rows.append(f"{'  ' * depth}{s.kind} {s.name}{bases}  lines {s.start}-{s.end}")
        first = next((s for s in entry.symbols), None)
        hint = (f"search `{path}:{first.qualname}` for one definition's code." if first else
                "this file defines no classes or functions; view it with str_replace_editor.")
        refs = [path]
        if path.endswith("__init__.py"):
            members = self._package_files(path)
            if members:
                rows.append(f"package {path[: -len('/__init__.py')] or '.'} holds {len(members)} module(s):")
                rows += [f"  {m}  ({len(self.index.files[m].symbols)} definitions)" for m in members[:40]]
                if len(members) > 40:
                    rows.append(f"  [{len(members) - 40} more]")
                # an __init__ that defines nothing is a directory listing: its modules are the answer
                refs = (refs + members) if entry.symbols else (members + refs)
                if not first:
                    hint = f"search `{members[0]}` for a module's outline."
        return SearchOutput("\n".join(rows) + "\n\nHint: " + hint, "outline", refs, total=len(refs))

    def _dotted(self, query: str) -> SearchOutput:
        """``pkg.mod.Class.method``: every module/attribute split, imports and re-exports followed
        (:mod:`skyrl_swe.search_resolve`); then ``Class.method`` as a qualified-name suffix anywhere; then a
        plain name search for the last part, with the reason shown; then a string search for the whole."""
        found = resolve(self.index, query)
        if found.module is not None and self._in_scope(found.module):
            out = self._outline(found.module)
            return SearchOutput(f"{found.how}:\n" + out.text, "module", out.refs, total=out.total)
        syms = [s for s in found.symbols if self._in_scope(s.path) and (not self.kind or s.kind == self.kind)]
        if syms:
            return self._results(syms, "qualname", f"{query} resolves to {found.how}:")
        matches = [s for s in self._symbols() if s.qualname == query or s.qualname.endswith("." + query)]
        if not matches:  # QuerySet.Delete as a user wrote it
            low = query.lower()
            matches = [s for s in self._symbols() if s.qualname.lower() == low or s.qualname.lower().endswith("." + low)]
        if matches:
            matches.sort(key=_rank_key)
            return self._results(matches, "qualname", f"{len(matches)} definition(s) of '{query}':")
        last = query.rsplit(".", 1)[-1]
        # the prefix still says where to look: self.cursor.execute prefers CursorWrapper.execute
        context = [w for w in query.lower().split(".")[:-1] if len(w) >= 3 and w not in _CONTEXT_STOP]
        fallback = self._by_name(last, context=context)
        if fallback.mode == "none":
            text = self._string(query)
            if text.mode == "string":
                return attrs.evolve(text, text=f"'{query}' names no definition ({found.reason}); it occurs as "
                                    f"text:\n" + text.text)
        return attrs.evolve(fallback, text=f"'{query}' does not resolve ({found.reason}); searched '{last}' by "
                            f"name instead.\n" + fallback.text)

    def _subclass(self, base: str) -> SearchOutput:
        short = base.rsplit(".", 1)[-1]
        syms = [s for s in self._symbols() if s.kind == "class"
                and any(b == base or b.rsplit(".", 1)[-1] == short for b in s.bases)]
        syms.sort(key=_rank_key)
        if not syms:
            return SearchOutput(f"No class derives from '{base}'.\n\nHint: check the base's name with "
                                f"`class:{short}`.", "subclass")
        listing = [f"{s.ref}  lines {s.start}-{s.end}  ({', '.join(s.bases)})" for s in syms[:50]]
        more = f"\n[{len(syms) - 50} more]" if len(syms) > 50 else ""
        return SearchOutput(f"{len(syms)} class(es) deriving from '{base}':\n" + "\n".join(listing) + more +
                            f"\n\nHint: search `{syms[0].ref}` for a class's code.", "subclass",
                            [s.ref for s in syms[:50]])

    def _calls(self, name: str) -> SearchOutput:
        short = name.rsplit(".", 1)[-1]
        rows = []
        for path, entry in self.index.files.items():
            if not self._in_scope(path):
                continue
            hits = [line for called, line in entry.calls if called == short]
            if hits:
                lines = entry.data.decode("utf-8", "replace").splitlines()
                for line in hits:
                    sym = entry.enclosing(line)
                    rows.append((path, line, sym.qualname if sym else "",
                                 lines[line - 1].strip() if line <= len(lines) else ""))
        rows.sort(key=lambda r: (_is_test_path(r[0]), r[0], r[1]))
        if not rows:
            return SearchOutput(f"No call sites of '{short}'.\n\nHint: `text:{short}` finds it in any form "
                                f"(passed as a value, in strings).", "calls")
        limit = self.max_results * 6
        listing = [f"{p}:{n}  in {caller or '<module>'}:  {code[:160]}" for p, n, caller, code in rows[:limit]]
        more = f"\n[{len(rows) - limit} more call sites]" if len(rows) > limit else ""
        first = next((r for r in rows if r[2]), rows[0])
        nxt = f"`{first[0]}:{first[2]}`" if first[2] else f"`{first[0]}:{first[1]}`"
        return SearchOutput(f"{len(rows)} call site(s) of '{short}':\n" + "\n".join(listing) + more +
                            f"\n\nHint: search {nxt} to read a caller's code.", "calls",
                            [f"{p}:{n}" for p, n, _c, _ in rows[:limit]])

    def _text(self, needle: str) -> SearchOutput:
        if not needle:
            return SearchOutput("Empty text query.\n\nHint: `text:some words`.", "text")
        rows = self._scan(needle.encode(), fold=False)
        if not rows:  # case-insensitive only when the exact text occurs nowhere (lower-casing costs a copy)
            rows = self._scan(needle.lower().encode(), fold=True)
        if not rows:
            return SearchOutput(f"'{needle}' does not occur in any indexed file.\n\nHint: try fewer words, or a "
                                f"bare name for a fuzzy definition search.", "text")
        limit = self.max_results * 6
        listing = [f"{p}:{n}:  {t[:160]}" for p, n, t in rows[:limit]]
        more = f"\n[{len(rows) - limit} more lines]" if len(rows) > limit else ""
        p, n, _ = rows[0]
        return SearchOutput(f"{len(rows)}{'+' if len(rows) > 500 else ''} line(s) containing '{needle}':\n" +
                            "\n".join(listing) + more + f"\n\nHint: search `{p}:{n}` for the definition around a "
                            f"line.", "text", [f"{p}:{n}" for p, n, _ in rows[:limit]])

    def _scan(self, key: bytes, fold: bool) -> list[tuple[str, int, str]]:
        rows: list[tuple[str, int, str]] = []
        for path in sorted(self.index.files, key=lambda p: (_is_test_path(p), p)):
            if not self._in_scope(path):
                continue
            data = self.index.files[path].data
            hay = data.lower() if fold else data
            start = 0
            while (pos := hay.find(key, start)) >= 0:
                line_start = data.rfind(b"\n", 0, pos) + 1
                line_end = data.find(b"\n", pos)
                line_end = line_end if line_end >= 0 else len(data)
                rows.append((path, data.count(b"\n", 0, pos) + 1,
                             data[line_start:line_end].decode("utf-8", "replace").strip()))
                start = line_end + 1
                if len(rows) > 500:
                    return rows
        return rows

    def _bm25_index(self):
        def build():
            import logging

            import bm25s

            logging.getLogger("bm25s").setLevel(logging.WARNING)  # it sets DEBUG on itself: keep tool output clean
            docs: list[Symbol] = []
            corpus: list[list[str]] = []
            for path, entry in self.index.files.items():
                lines = entry.data.decode("utf-8", "replace").splitlines()
                for s in entry.symbols:
                    if s.kind == "class":
                        members = [m.start for m in entry.symbols if m.start > s.start and m.end <= s.end]
                        stop = (min(members) - 1) if members else s.end
                    else:
                        stop = s.end
                    text = "\n".join(lines[s.start - 1: stop])
                    tokens = code_tokens(s.path.replace("/", " ") + " " + text)
                    docs.append(s)
                    corpus.append(tokens or ["_"])
            if not corpus:
                return None, docs
            vocab: dict[str, int] = {}
            ids = [[vocab.setdefault(t, len(vocab)) for t in doc] for doc in corpus]
            retriever = bm25s.BM25()
            retriever.index(bm25s.tokenization.Tokenized(ids=ids, vocab=vocab), show_progress=False)
            return (retriever, vocab), docs

        return self.index.derived("bm25", build)

    def bm25_rank(self, query: str, k: int) -> list[tuple[Symbol, float]]:
        """The ``k`` best symbols for ``query`` by plain BM25 (Robertson & Zaragoza 2009) over each definition's
        code tokens: the baseline the localisation benchmark compares against (the tool's prose form is
        :meth:`prose_rank`). Returns (symbol, score) pairs, best first."""
        model, docs = self._bm25_index()
        if model is None:
            return []
        retriever, vocab = model
        q = [vocab[t] for t in dict.fromkeys(code_tokens(query)) if t in vocab]
        if not q:
            return []
        import numpy as np

        scores = retriever.get_scores(q)
        order = np.argsort(-scores)
        out = []
        for i in order:
            if scores[i] <= 0 or len(out) >= k:
                break
            sym = docs[int(i)]
            if self._in_scope(sym.path) and (not self.kind or sym.kind == self.kind):
                out.append((sym, float(scores[i])))
        return out

    def prose_rank(self, query: str, k: int) -> list[Symbol]:
        """The ``k`` best modules and definitions for ``query`` by fielded BM25 (:mod:`skyrl_swe.search_prose`);
        tests only when the scope is inside a test tree."""
        hits = prose_index(self.index).rank(query, k, include_tests=self._tests_in_scope(), keep=lambda s: self._in_scope(s.path)
                                            and (not self.kind or s.kind == self.kind))
        return [h.symbol for h in hits]

    def _bm25(self, query: str, note: str | None = None) -> SearchOutput:
        syms = self.prose_rank(query, self.max_results * 4)
        if not syms:
            return SearchOutput(f"Nothing matches '{query[:120]}'.\n\nHint: search a class or function name, or "
                                f"`text:<exact words>`.", "bm25")
        shown_query = query if len(query) <= 120 else query[:117] + "..."
        header = note or f"No definition matches '{shown_query}' by name; ranked by text similarity (BM25):"
        best = next((s for s in syms if s.kind != MODULE_KIND), syms[0])
        return self._results(syms, "bm25", header, hint=f"search a name from these results exactly (e.g. "
                             f"`{best.ref}`), or `calls:{best.name}` for its call sites.")

    def _usage(self, word: str, close: list[str]) -> SearchOutput | None:
        """Definitions whose code uses ``word`` as a whole identifier (most uses first, source before tests),
        or None when no indexed file does. Files are pre-filtered by their identifier sets
        (:func:`skyrl_swe.search_prose.file_words`, cached by content hash)."""
        where: dict[Symbol, list[int]] = {}  # definition -> the lines using the word (their count ranks it)
        for path, entry, line in word_lines(self.index, word, self._in_scope):
            sym = entry.enclosing(line) or module_symbol(path, entry.n_lines)
            if not self.kind or sym.kind == self.kind:
                where.setdefault(sym, []).append(line)
        if not where:
            return None
        n_lines = sum(map(len, where.values()))
        syms = sorted(where, key=lambda s: (place(s.path), -len(where[s]), s.kind == MODULE_KIND, s.path, s.start))
        near = f" (closest names: {', '.join(close)})" if close else ""
        callable_hint = f"; `calls:{word}` its call sites" if not _CONSTANT.match(word) else ""
        return self._results(syms, "usage", f"No definition named '{word}'{near}; it is used {n_lines} time(s) in "
                             f"{len(syms)} definition(s) or module(s):",
                             hint=f"`text:{word}` lists every line{callable_hint}.", focus=where)

    def _string(self, needle: str) -> SearchOutput:
        """A string the issue quotes (config key, message id, literal): the definitions whose code contains it,
        most occurrences first, source before tests; module-level occurrences stand for their file."""
        rows = self._scan(needle.encode(), fold=False) or self._scan(needle.lower().encode(), fold=True)
        if not rows:
            return SearchOutput(f"'{needle}' occurs in no indexed file.\n\nHint: search a definition name, or a "
                                f"few words for text similarity.", "none")
        where: dict[Symbol, list[int]] = {}  # definition -> the lines holding the string
        for path, line, _text in rows:
            entry = self.index.files[path]
            sym = entry.enclosing(line) or module_symbol(path, entry.n_lines)
            if not self.kind or sym.kind == self.kind:
                where.setdefault(sym, []).append(line)
        syms = sorted(where, key=lambda s: (place(s.path), -len(where[s]), s.kind == MODULE_KIND, s.path, s.start))
        if not syms:
            return self._text(needle)
        out = self._results(syms, "string", f"'{needle}' occurs {len(rows)}{'+' if len(rows) > 500 else ''} "
                            f"time(s), in {len(syms)} definition(s) or module(s):",
                            hint=f"`text:{needle}` lists every line.", focus=where)
        return out

def _docstring_lines(lines: list[str], header_end: int) -> list[int]:
    """Line numbers of the docstring that starts right after the signature (first three lines at most)."""
    n = header_end + 1
    if n > len(lines):
        return []
    first = lines[n - 1].strip()
    if not first.startswith(('"""', "'''", 'r"""', "r'''")):
        return []
    quote = '"""' if '"""' in first else "'''"
    end = n
    if first.count(quote) < 2:
        while end < len(lines) and quote not in lines[end]:
            end += 1
        end += 1
    return list(range(n, min(end, n + 2) + 1))


# -- the tool --------------------------------------------------------------------------------------------------
_INDEXES: dict[str, CodeIndex] = {}
_INDEXES_LOCK = threading.Lock()


def index_for(root: str | Path, ctx: ToolContext | None = None) -> CodeIndex:
    """The index of ``root``: kept in the trajectory's tool store, or process-wide by path without a context."""
    root = str(Path(root).resolve())
    if ctx is not None:
        store = ctx.tool_store("search")
        index = store.get("index")
        if index is None or str(index.root) != root:
            index = store["index"] = CodeIndex(root)
        return index
    with _INDEXES_LOCK:
        index = _INDEXES.get(root)
        if index is None:
            index = _INDEXES[root] = CodeIndex(root)
        return index


async def run_search(args: dict, ctx: ToolContext) -> ToolResult:
    root, failure = await workspace_for_tool(ctx, "the search tool")
    if failure is not None:
        return failure
    outside = outside_workspace(root, args["path"]) if args.get("path") else None
    if outside:
        return ToolResult(output=f"Error: {outside}", error=True)
    index = index_for(root, ctx)
    out = await asyncio.to_thread(Searcher(index).search, args["query"], int(args.get("max_results") or
                                  DEFAULT_RESULTS), args.get("path"), args.get("kind"))
    return ToolResult(output=out.text, metadata={"mode": out.mode, "results": out.refs,
                                                 "index_version": index.version, "index": dict(index.stats)})
