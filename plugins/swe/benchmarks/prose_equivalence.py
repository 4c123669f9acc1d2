"""Check that this checkout's prose retriever ranks exactly as an earlier commit's does, on a real project.

    python plugins/swe/benchmarks/prose_equivalence.py django==4.2.11 --base d145f2d

Builds :class:`skyrl_swe.search_prose.ProseIndex` with the code of ``--base`` (extracted with ``git archive``
into a temporary package) and with this checkout's code over the same :class:`CodeIndex`, then asserts: the same
documents in the same order; per field the same BM25 score matrix entry for entry (token, document, float32
score) — so the same tokens and scores; and the same ``rank()`` answers (references and scores) for a set of
queries, with and without tests. Exits 1 on a mismatch.

Then times, back to back in this process and alternating for ``--rounds`` rounds (medians in seconds), the base
commit's plain BM25 table (``Searcher._bm25_index``, its token memo emptied first) and its fielded prose table
against this checkout's prose table built cold (fresh vocabulary, no file's tokens cached) and again after a
one-file edit of the largest file (only that file re-tokenised).
"""

from __future__ import annotations

import argparse
import importlib
import io
import json
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import numpy as np

from skyrl_swe.generator import fetch_sdist
from skyrl_swe.index import CodeIndex
from skyrl_swe import search_prose
from skyrl_swe.search_prose import ProseIndex

REPO = Path(__file__).resolve().parents[3]
QUERIES = ["queryset filter exclude negated lookup", "QuerySet.bulk_create crashes on mixed case columns",
           "get_or_create", "the admin changelist ignores list_select_related", "migrations squash optimizer",
           "ValueError: invalid literal for int() with base 10", "def as_sql(self, compiler, connection)",
           "camelize underscore pluralize singularize", "template tag autoescape off", "x", "", "_ __ ___"]


def base_package(rev: str, into: Path):
    """The ``skyrl_swe`` package of commit ``rev``, importable as ``skyrl_swe_base``."""
    archive = subprocess.run(["git", "-C", str(REPO), "archive", rev, "plugins/swe/skyrl_swe"], check=True,
                             capture_output=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tf:
        tf.extractall(into, filter="data")
    (into / "plugins/swe/skyrl_swe").rename(into / "skyrl_swe_base")
    sys.path.insert(0, str(into))
    return importlib.import_module("skyrl_swe_base.search_prose")


def columns(retriever, vocab: dict[str, int]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """token -> (document ids, float32 scores) of one field's BM25 matrix (empty columns left out)."""
    sc = retriever.scores
    out = {}
    for token, col in vocab.items():
        if col + 1 >= len(sc["indptr"]):
            continue
        a, b = sc["indptr"][col], sc["indptr"][col + 1]
        if b > a:
            out[token] = (sc["indices"][a:b], sc["data"][a:b])
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("project", nargs="?", default="django==4.2.11")
    ap.add_argument("--base", default="d145f2d", help="the commit whose prose retriever is the reference")
    ap.add_argument("--source", help="a source directory instead of the project's sdist")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(args.source) if args.source else fetch_sdist(args.project)[0]
        root = Path(tmp) / "project"
        shutil.copytree(source, root)
        old_mod = base_package(args.base, Path(tmp) / "base")
        index = CodeIndex(root)
        index.refresh()
        old, new = old_mod.ProseIndex.build(index), ProseIndex.build(index)
        problems = compare(old, new)
        times = timings(old_mod, index, args.rounds)
    print(json.dumps({"project": source.name, "documents": len(new.docs), "base": args.base,
                      "identical": not problems, "problems": problems, "rounds": args.rounds,
                      "median_s": {k: round(statistics.median(v), 2) for k, v in times.items()}}, indent=1))
    return 1 if problems else 0


def timings(old_mod, index: CodeIndex, rounds: int) -> dict[str, list[float]]:
    old_search = importlib.import_module(old_mod.__name__.replace("search_prose", "search"))
    old_index_mod = importlib.import_module(old_mod.__name__.replace("search_prose", "index"))
    times: dict[str, list[float]] = {"base_plain_bm25": [], "base_prose": [], "new_prose_cold": []}
    for _ in range(rounds):
        old_index_mod._TOKEN_MEMO.clear()
        index._derived.pop("bm25", None)
        t0 = time.perf_counter()
        old_search.Searcher(index)._bm25_index()
        times["base_plain_bm25"].append(time.perf_counter() - t0)
        old_index_mod._TOKEN_MEMO.clear()
        t0 = time.perf_counter()
        old_mod.ProseIndex.build(index)
        times["base_prose"].append(time.perf_counter() - t0)
        search_prose._FILE_DOCS.clear()
        search_prose._VOCAB = search_prose._Vocabulary()
        t0 = time.perf_counter()
        ProseIndex.build(index)
        times["new_prose_cold"].append(time.perf_counter() - t0)
    edited = max(index.files, key=lambda rel: index.files[rel].size)
    with open(index.root / edited, "a") as fh:
        fh.write("\n\ndef check_added_helper(value):\n    return value\n")
    index.refresh()
    t0 = time.perf_counter()
    ProseIndex.build(index)
    times["new_prose_after_one_edit"] = [time.perf_counter() - t0]
    return times


def compare(old, new) -> list[str]:
    problems = []
    old_refs = [f"{d.path}:{d.qualname}" for d in old.docs]
    if old_refs != [f"{d.path}:{d.qualname}" for d in new.docs]:
        problems.append("documents differ")
    for field, (old_r, old_vocab) in old.retrievers.items():
        a, b = columns(old_r, old_vocab), columns(new.retrievers[field], new.vocab)
        if a.keys() != b.keys():
            problems.append(f"{field}: token sets differ ({len(a.keys() - b.keys())} only old, "
                            f"{len(b.keys() - a.keys())} only new)")
            continue
        bad = [t for t in a if not (np.array_equal(a[t][0], b[t][0]) and np.array_equal(a[t][1], b[t][1])
                                    and a[t][1].dtype == b[t][1].dtype)]
        if bad:
            problems.append(f"{field}: {len(bad)} tokens with different documents or scores, e.g. {bad[:3]}")
    n_answers = 0
    for q in QUERIES:
        for tests in (False, True):
            x = [(h.symbol.ref, h.score) for h in old.rank(q, 50, include_tests=tests)]
            y = [(h.symbol.ref, h.score) for h in new.rank(q, 50, include_tests=tests)]
            n_answers += len(x)
            if x != y:
                problems.append(f"rank({q!r}, include_tests={tests}) differs")
    if n_answers < 100:
        problems.append(f"only {n_answers} answers compared: too few queries matched anything")
    return problems


if __name__ == "__main__":
    sys.exit(main())
