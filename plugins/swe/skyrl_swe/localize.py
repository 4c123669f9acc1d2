"""``localize``: an issue text in, ranked files and functions out — the agent's first call on a SWE task.

The evidence an issue gives is read four ways and fused:

1. **traceback frames and paths** — ``File ".../pkg/mod.py", line 12, in func`` and ``pkg/mod.py`` mentioned in
   the text, matched to indexed files by their path tail (weight :data:`WEIGHTS` ``frame`` / ``path``);
2. **identifiers** (:func:`identifiers`: backticked code, dotted, snake_case, CamelCase names, calls) — each one
   ``search`` query; exact and qualified answers weigh more than fuzzy ones, and a name defined in many places
   weighs less (``1/sqrt(matches)``, floored);
3. **strings** (:func:`strings`: quoted literals, option and config keys, message ids) — content search, hits
   mapped to their enclosing definitions;
4. **prose** — the whole text through the fielded BM25 retriever (:mod:`skyrl_swe.search_prose`).

Each source yields ranked files and definitions; fusion is weighted reciprocal rank fusion (Cormack, Clarke and
Büttcher 2009): ``score(x) = sum_sources weight / (K + rank)``, ``K`` = :data:`RRF_K`, ranks from 0. Tests and
fixtures are left out (``path`` restricts to a subtree instead). Nothing in the workspace is executed.
"""

from __future__ import annotations

import builtins
import math
import re

import attrs

from .index import CodeIndex, Symbol
from .search import Searcher
from .search_related import is_aux_path
from .search_prose import MODULE_KIND, is_test_path, prose_index

MAX_TEXT = 50_000  # characters of issue text read (the rest is ignored)
RRF_K = 5
WEIGHTS = {"frame": 1.5, "path": 0.6, "qualname": 1.0, "module": 0.5, "outline": 0.5, "name": 0.8, "alias": 0.8,
           "string": 0.5, "usage": 0.15, "fuzzy": 0.2, "bm25": 0.2, "prose": 3.0,
           "together": 0.5, "near": 0.3, "title": 2.0}
AUX_WEIGHT = 0.3  # examples, docs, benchmarks, setup scripts: read by users, rarely where a fix goes

# -- evidence in an issue text --------------------------------------------------------------------------------
_CODE_SPAN = re.compile(r"`{1,3}([^`]{1,2000})`{1,3}")
_DOTTED = re.compile(r"\b[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+\b")
_IDENT = re.compile(r"\b[A-Za-z_]\w*\b")
_STOP = frozenset("""self cls none true false print import from return def class if else elif for while in is not and
or with as try except raise pass lambda yield assert del global nonlocal break continue async await int str float
bool list dict set tuple object type len range isinstance super kwargs args e g i e x y np pd plt os sys re
the this that and http https www com org github py""".split())
# builtins asked about bare (``next(it)``, ``getattr``) are the language's, not the project's; as a method
# (``qs.all``) they stay
_BUILTINS = frozenset(n for n in dir(builtins) if n.islower() and not n.startswith("_"))
_TRACEBACK_NOISE = re.compile(r"Traceback \(most recent call last\):|(?<=```)[A-Za-z0-9_+-]{1,20}(?=\s)|"
                              r"File \"[^\"\n]{1,400}\", line \d{1,7}, in [\w<>]{1,200}")
_FRAME = re.compile(r"File \"(?P<path>[^\"\n]{1,400}?\.py)\", line (?P<line>\d{1,7}), in (?P<func>[\w<>]{1,200})")
_PATH = re.compile(r"(?<![\w/.-])(?P<path>(?:[\w.-]{1,100}/){0,12}[\w-][\w.-]{0,99}\.py)\b")
_QUOTED_LIT = re.compile(r"(?<![\w\\])(['\"])(?P<body>[^'\"\n]{3,80})\1")
_KEY_LIKE = re.compile(r"(?<![\w-])(?:--)?[A-Za-z_]\w*(?:-\w+)+(?![\w-])|\b(?:[a-z_]+\.)?[A-Z]{1,4}\d{2,5}\b")


def _code_like(token: str) -> bool:
    """snake_case, CamelCase, dotted, or a name with a digit: words a person would not write in prose."""
    return ("_" in token.strip("_") or "." in token or re.search(r"[a-z][A-Z]", token) is not None
            or (token[:1].isupper() and any(c.isupper() for c in token[1:])) or
            (re.search(r"\d", token) is not None and token[:1].isalpha()))


def identifiers(text: str, limit: int = 10) -> list[str]:
    """Code identifiers from an issue text, in order of first appearance: everything inside backticks, plus
    dotted, snake_case and CamelCase names and names followed by ``(`` elsewhere; stop words and builtins
    dropped; a dotted name ``a.b.c`` also yields ``c`` later. At most ``limit``."""
    # the traceback header and frame lines are read by :func:`frames`; a code fence's language tag is no name
    text = _TRACEBACK_NOISE.sub(" ", _head(text))
    found: list[tuple[int, str]] = []
    for m in _CODE_SPAN.finditer(text):
        for tok in _DOTTED.findall(m.group(1)) + _IDENT.findall(m.group(1)):
            found.append((m.start(), tok))
    prose = _CODE_SPAN.sub(" ", text)
    for m in _DOTTED.finditer(prose):
        if not re.fullmatch(r"[\w.]*\.(?:com|org|io|html|txt|py|rst|md)", m.group(0)):
            found.append((m.start(), m.group(0)))
    for m in _IDENT.finditer(prose):
        tok = m.group(0)
        if _code_like(tok) or prose[m.end(): m.end() + 1] == "(":
            found.append((m.start(), tok))
    out: list[str] = []
    for _pos, tok in sorted(found, key=lambda p: p[0]):
        tok = tok.strip(".")
        if (len(tok) < 3 or tok.lower() in _STOP or tok in _BUILTINS or not re.search(r"[A-Za-z]", tok)
                or re.fullmatch(r"(?:[A-Za-z]\.)+[A-Za-z]?", tok)):  # 3, ____, e.g, i.e
            continue
        if tok not in out:
            out.append(tok)
        if "." in tok:
            last = tok.rsplit(".", 1)[-1]
            if len(last) >= 3 and last.lower() not in _STOP and last not in out:
                out.append(last)
    return out[:limit]


def strings(text: str, limit: int = 6) -> list[str]:
    """String evidence from an issue text, in order: quoted literals of 3-80 characters that are not plain
    identifiers or sentences, hyphenated option/config keys (``--max-line-length``, ``max-line-length``) and
    message ids (``E1101``, ``fields.E304``). At most ``limit``."""
    text = _head(text)
    found: list[tuple[int, str]] = []
    for m in _QUOTED_LIT.finditer(text):
        body = m.group("body").strip()
        if len(body) >= 3 and body.count(" ") <= 3 and not re.fullmatch(r"[A-Za-z_]\w*", body):
            found.append((m.start(), body))
    for m in _KEY_LIKE.finditer(text):
        tok = m.group(0)
        if re.search(r"[a-z]", tok) or re.search(r"\d", tok):
            found.append((m.start(), tok))
    out: list[str] = []
    for _pos, tok in sorted(found, key=lambda p: p[0]):
        if tok not in out:
            out.append(tok)
    return out[:limit]


def frames(text: str) -> list[tuple[str, str]]:
    """Traceback frames ``(path, function)`` in the order printed, innermost last."""
    return [(m.group("path"), m.group("func")) for m in _FRAME.finditer(_head(text))]


def mentioned_paths(text: str) -> list[str]:
    """``dir/.../file.py`` paths and bare ``file.py`` names mentioned in the text (traceback paths included), in
    order."""
    return list(dict.fromkeys(m.group("path") for m in _PATH.finditer(_head(text))))


def _head(text: str) -> str:
    """The first :data:`MAX_TEXT` characters, cut at a whitespace so no word is split (``filter`` -> ``filt``)."""
    if len(text) <= MAX_TEXT:
        return text
    cut = text[:MAX_TEXT]
    at = max(cut.rfind(" "), cut.rfind("\n"), cut.rfind("\t"))
    return cut[:at] if at > 0 else cut


# -- fusion ---------------------------------------------------------------------------------------------------
@attrs.define
class Localization:
    """Ranked candidates: ``files`` as (path, score) and ``functions`` as (symbol, score), best first;
    ``evidence`` maps a path to the sources that pointed at it (``name:get_or_create``, ``prose``, ...)."""

    files: list[tuple[str, float]]
    functions: list[tuple[Symbol, float]]
    evidence: dict[str, list[str]]
    queries: list[str]


class _Fusion:
    def __init__(self) -> None:
        self.files: dict[str, float] = {}
        self.syms: dict[Symbol, float] = {}
        self.evidence: dict[str, list[str]] = {}

    def add(self, label: str, weight: float, syms: list[Symbol], files: list[str] | None = None) -> None:
        for rank, sym in enumerate(dict.fromkeys(s for s in syms if s.kind != MODULE_KIND)):
            aux = AUX_WEIGHT if is_aux_path(sym.path) else 1.0
            self.syms[sym] = self.syms.get(sym, 0.0) + aux * weight / (RRF_K + rank)
        ordered = list(dict.fromkeys((files or []) + [s.path for s in syms]))
        for rank, path in enumerate(ordered):
            aux = AUX_WEIGHT if is_aux_path(path) else 1.0
            self.files[path] = self.files.get(path, 0.0) + aux * weight / (RRF_K + rank)
            if label not in self.evidence.setdefault(path, []):
                self.evidence[path].append(label)


def _match_path(index: CodeIndex, path: str) -> str | None:
    """The indexed file a mentioned or traceback path names (longest tail match), or None."""
    parts = path.replace("\\", "/").split("/")
    for cut in range(len(parts)):
        tail = "/".join(parts[cut:])
        if tail in index.files:
            return tail
        hits = [p for p in index.files if p.endswith("/" + tail)]
        if len(hits) == 1:
            return hits[0]
        if hits:
            return min(hits, key=lambda p: (p.count("/"), p))
    return None


def localize(index: CodeIndex, text: str, max_queries: int = 10, path: str | None = None) -> Localization:
    """Rank the files and definitions of ``index`` that the issue ``text`` is about (see the module docstring).
    ``path`` restricts every source to files under that prefix. Raises nothing on odd input: an empty text
    gives empty rankings."""
    text = _head(text)
    searcher = Searcher(index)
    index.refresh()
    searcher.configure(path)
    fusion = _Fusion()
    scope_ok = lambda p: searcher._in_scope(p) and not is_test_path(p)  # noqa: E731
    frame_rows = frames(text)
    for rank, (fpath, func) in enumerate(reversed(frame_rows)):
        where = _match_path(index, fpath)
        if where is None or not scope_ok(where):
            continue
        syms = [s for s in index.files[where].symbols if s.name == func]
        fusion.add("traceback", WEIGHTS["frame"] / (1 + 0.3 * rank), syms, [where])
    title = next((line for line in text.splitlines() if line.strip()), "")
    for mentioned in mentioned_paths(text):
        where = _match_path(index, mentioned)
        if where is not None and scope_ok(where):
            fusion.add("path", WEIGHTS["path"] * (WEIGHTS["title"] if mentioned in title else 1.0), [], [where])
    queries = identifiers(text, max_queries)
    for q in queries + strings(text):
        out = searcher.search(q, max_results=10, path=path, refresh=False)
        syms = [s for s in (_symbol(index, ref) for ref in out.refs) if s is not None and scope_ok(s.path)]
        files = [ref.partition(":")[0] for ref in out.refs if scope_ok(ref.partition(":")[0])]
        if not files:
            continue
        weight = WEIGHTS.get(out.mode, 0.2)
        if out.mode == "fuzzy" and syms:
            # PersonName3 -> PersonName (ratio 95) is nearly a name match; a ratio-80 neighbour is a guess
            from rapidfuzz import fuzz

            closeness = fuzz.ratio(q.rsplit(".", 1)[-1].lower(), syms[0].name.lower())
            weight = WEIGHTS["fuzzy"] + (WEIGHTS["name"] - WEIGHTS["fuzzy"]) * max(0.0, closeness - 80) / 20
        if out.mode == "usage" and out.total <= 2:  # a word used in one or two places only: it points there
            weight = WEIGHTS["name"]
        if q in title:  # the title names what it is about
            weight *= WEIGHTS["title"]
        if out.mode in ("name", "string", "usage", "fuzzy", "alias") and out.total > 1:
            weight *= max(0.25, min(1.0, 2 / math.sqrt(out.total)))  # a name defined everywhere says little
        fusion.add(f"{out.mode}:{q}", weight, syms, files)
        if out.more:  # what a precise answer calls and is used by, and the matches it did not show
            more = [s for s in (_symbol(index, ref) for ref in out.more) if s is not None and scope_ok(s.path)]
            fusion.add(f"near:{q}", weight * WEIGHTS["near"], more, [s.path for s in more])
    co = _cooccurrence(index, queries, scope_ok)
    if co:
        fusion.add("names together", WEIGHTS["together"], [], co)
    hits = [h for h in prose_index(index).rank(text, 100, keep=lambda s: scope_ok(s.path))]
    # a file's prose score: its best documents, decaying (1, 1/2, 1/4), so one lucky definition does not
    # outrank a file where several match
    per_file: dict[str, list[float]] = {}
    for h in hits:
        per_file.setdefault(h.symbol.path, []).append(h.score)
    file_rank = sorted(per_file, key=lambda p: -sum(v / 2 ** i for i, v in enumerate(per_file[p][:3])))
    fusion.add("prose", WEIGHTS["prose"], [h.symbol for h in hits[:60]], file_rank)
    files = sorted(fusion.files.items(), key=lambda kv: (-kv[1], kv[0]))
    # a definition in a strongly indicated file gains a little of its file's score
    fscore = dict(files)
    syms = sorted(((s, v + 0.25 * fscore.get(s.path, 0.0)) for s, v in fusion.syms.items()),
                  key=lambda kv: (-kv[1], kv[0].path, kv[0].start))
    return Localization(files=files, functions=syms, evidence=fusion.evidence, queries=queries)


def _cooccurrence(index: CodeIndex, queries: list[str], keep, top: int = 30) -> list[str]:
    """Files holding several of the issue's identifiers (the last part of a dotted one) as words, ranked by
    the summed inverse document frequency ``log(N / df)`` of those present — grep's evidence, with rare names
    counting more than common ones. Files need at least two of them."""
    from .search_prose import file_words

    names = list(dict.fromkeys(q.rsplit(".", 1)[-1] for q in queries))
    if len(names) < 2:
        return []
    words = {path: file_words(entry) for path, entry in index.files.items() if keep(path)}
    n = max(1, len(words))
    df = {name: sum(name in w for w in words.values()) for name in names}
    idf = {name: math.log(n / df[name]) for name in names if df[name]}
    scored = []
    for path, w in words.items():
        present = [name for name in idf if name in w]
        if len(present) >= 2:
            scored.append((sum(idf[name] for name in present), path))
    scored.sort(key=lambda sp: (-sp[0], sp[1]))
    return [path for _score, path in scored[:top]]


def _symbol(index: CodeIndex, ref: str) -> Symbol | None:
    path, _, qual = ref.partition(":")
    entry = index.files.get(path)
    if entry is None:
        return None
    if qual == "<module>" or qual.isdigit() or not qual:
        from .search_prose import module_symbol

        return module_symbol(path, entry.n_lines)
    return next((s for s in entry.symbols if s.qualname == qual), None)


def render(loc: Localization, top: int = 10) -> str:
    """The ranking as plain text for a model: files with their evidence, then definitions with line ranges."""
    if not loc.files:
        return ("Nothing in the repository matches the issue text.\n\nHint: search a name from the issue, or "
                "`text:<exact words>`.")
    rows = ["Files most likely to need changes (score, evidence):"]
    for i, (path, score) in enumerate(loc.files[:top], 1):
        ev = ", ".join(loc.evidence.get(path, [])[:4])
        rows.append(f"{i:3d}. {path}  {score:.2f}  [{ev}]")
    rows.append("")
    rows.append("Definitions:")
    for i, (sym, score) in enumerate(loc.functions[:top], 1):
        rows.append(f"{i:3d}. {sym.ref}  {sym.kind}  lines {sym.start}-{sym.end}  {score:.2f}")
    best = loc.functions[0][0].ref if loc.functions else loc.files[0][0]
    rows.append("")
    rows.append(f"Hint: search `{best}` to read the best candidate's code.")
    return "\n".join(rows)


# -- the tool's handler (the declaration is skyrl_swe.tools.localize_tool) ------------------------------------
async def run_localize(args: dict, ctx) -> "ToolResult":
    import asyncio

    from skyrl_core import ToolResult

    from .runtime import outside_workspace, workspace_for_tool
    from .search import index_for

    root, failure = await workspace_for_tool(ctx, "the localize tool")
    if failure is not None:
        return failure
    outside = outside_workspace(root, args["path"]) if args.get("path") else None
    if outside:
        return ToolResult(output=f"Error: {outside}", error=True)
    index = index_for(root, ctx)  # the search tool's index: one parse serves both tools
    top = int(args.get("max_results") or 10)
    loc = await asyncio.to_thread(localize, index, args["issue"], 10, args.get("path"))
    return ToolResult(output=render(loc, top), metadata={
        "files": [p for p, _ in loc.files[:top]], "functions": [s.ref for s, _ in loc.functions[:top]],
        "queries": loc.queries, "index_version": index.version, "index": dict(index.stats)})


# -- the command ----------------------------------------------------------------------------------------------
def localize_instances(instances, source, top: int, out, echo=print) -> list[dict]:
    """``skyrl swe localize``: each row's ranking as a terminal table (rich) and, with ``out``, JSON lines
    (instance_id, files, functions, queries, or the reason a row was skipped). A row with no source directory
    is reported and skipped; a source that is not a directory raises ``SkyrlError`` naming it."""
    import json
    from pathlib import Path

    from rich.console import Console
    from rich.table import Table
    from skyrl_core import DataSpec
    from skyrl_core.errors import SkyrlError

    from .data import load_rows

    if source is not None and not Path(source).is_dir():
        raise SkyrlError(f"--source {source} is not a directory (give a repository checkout)")
    rows = load_rows(DataSpec(path=str(instances)))
    indexes: dict[str, CodeIndex] = {}
    console = Console(width=160)
    results = []
    for row in rows:
        iid = row.get("instance_id", "?")
        root = source or row.get("repo_dir")
        text = row.get("problem_statement") or ""
        if not isinstance(text, str):
            text, why = "", f"problem_statement is a {type(text).__name__}, not text"
        else:
            why = "no problem_statement" if not text else f"no source directory (repo_dir={root!r}; pass --source)"
        if not root or not Path(root).is_dir() or not text:
            results.append({"instance_id": iid, "skipped": why})
            echo(f"{iid}: skipped: {why}")
            continue
        index = indexes.setdefault(str(root), CodeIndex(root))
        loc = localize(index, text)
        # two rankings, two tables: a definition's row is not its neighbouring file's
        files = Table(title=f"{iid}: files (queries {', '.join(loc.queries[:6])})", show_lines=False)
        for col in ("#", "file", "score", "evidence"):
            files.add_column(col, overflow="fold")
        for i, (path, score) in enumerate(loc.files[:top], 1):
            files.add_row(str(i), path, f"{score:.2f}", ", ".join(loc.evidence.get(path, [])[:4]))
        defs = Table(title=f"{iid}: definitions", show_lines=False)
        for col in ("#", "definition", "kind", "lines", "score"):
            defs.add_column(col, overflow="fold")
        for i, (sym, score) in enumerate(loc.functions[:top], 1):
            defs.add_row(str(i), sym.ref, sym.kind, f"{sym.start}-{sym.end}", f"{score:.2f}")
        console.print(files)
        console.print(defs)
        results.append({"instance_id": iid, "files": [p for p, _ in loc.files[:top]],
                        "functions": [s.ref for s, _ in loc.functions[:top]], "queries": loc.queries})
    if out is not None:
        Path(out).write_text("".join(json.dumps(r) + "\n" for r in results))
        echo(f"wrote {len(results)} line(s) to {out}")
    return results
