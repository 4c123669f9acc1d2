"""Check that this checkout's prose retriever ranks exactly as an earlier commit's does, on a real project.

    python plugins/swe/benchmarks/prose_equivalence.py django==4.2.11 --base d145f2d

Builds :class:`skyrl_swe.search_prose.ProseIndex` with the code of ``--base`` (extracted with ``git archive``
into a temporary package) and with this checkout's code over the same :class:`CodeIndex`, then asserts: the same
documents in the same order; per field the same BM25 score matrix entry for entry (token, document, float32
score) — so the same tokens and scores; and the same ``rank()`` answers (references and scores) for a set of
queries, with and without tests. Prints both build times (back to back, same process) and exits 1 on a mismatch.
"""

from __future__ import annotations

import argparse
import importlib
import io
import json
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import numpy as np

from skyrl_swe.generator import fetch_sdist
from skyrl_swe.index import CodeIndex
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
    args = ap.parse_args()
    root = Path(args.source) if args.source else fetch_sdist(args.project)[0]
    index = CodeIndex(root)
    index.refresh()
    with tempfile.TemporaryDirectory() as tmp:
        old_mod = base_package(args.base, Path(tmp))
        t0 = time.perf_counter()
        old = old_mod.ProseIndex.build(index)
        old_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    new = ProseIndex.build(index)
    new_s = time.perf_counter() - t0
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
    print(json.dumps({"project": str(root.name), "documents": len(new.docs), "base": args.base,
                      "base_build_s": round(old_s, 2), "new_build_s": round(new_s, 2),
                      "queries": len(QUERIES) * 2, "answers_compared": n_answers,
                      "identical": not problems, "problems": problems}, indent=1))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
