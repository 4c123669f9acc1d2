"""Index time and query latency of the search tool on a large real project (default: Django's sdist).

    python plugins/swe/benchmarks/index_bench.py django==4.2.11 [--workers 2]

Downloads the sdist once (cached under $SKYRL_SWE_CACHE) and works on a temporary copy of it: builds a cold index
(empty content cache), then times an incremental refresh with no change, the two BM25 tables (the plain baseline
and the fielded prose retriever, cold: empty token caches), a set of queries of every form (median of 5,
milliseconds), ``localize`` on one issue text (median of 3), the prose table again after a one-file edit
(a refresh and a rebuild that re-tokenises only the edited file), and a refresh after an agent writes three
hostile 1 MB files (the shapes of ``tests/test_index_bounds.py``; each is indexed without symbols).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from skyrl_swe.generator import fetch_sdist
from skyrl_swe.index import CONTENT_CACHE, CodeIndex
from skyrl_swe.search import Searcher

QUERIES = ["QuerySet", "get_or_create", "Model.save", "django/db/models/query.py:QuerySet.filter", "subclass:Field",
           "calls:get_or_create", "text:def as_sql", "queryset filter exclude negated lookup", "method:clean",
           "ForeignKy", "django.utils.text.slugify", "django/db/models/query.py",
           # forms added with #24: a re-export, a message id, a quoted string, a name used but never defined
           "django.db.models.Q", "fields.E304", '"on_delete"', "related_query_name"]
ISSUE = ("QuerySet.bulk_create() crashes on mixed case columns in unique_fields/update_fields.\n"
         "Traceback (most recent call last):\n  File \"/app/django/db/models/query.py\", line 804, in bulk_create\n"
         "django.db.utils.ProgrammingError: column \"blacklistid\" does not exist. The `db_column` of the field "
         "is used for the INSERT but not for ON CONFLICT; see `_batched_insert` and \"on_conflict\".")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("project", nargs="?", default="django==4.2.11")
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    source, name, version = fetch_sdist(args.project)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / source.name
        shutil.copytree(source, root)
        print(json.dumps(measure(root, f"{name}=={version}", args.workers), indent=1))


def measure(root: Path, project: str, workers: int) -> dict:
    from skyrl_swe import search_prose

    CONTENT_CACHE.data.clear()
    index = CodeIndex(root, workers=workers)
    t0 = time.perf_counter()
    stats = index.refresh()
    build_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    index.refresh()
    refresh_ms = (time.perf_counter() - t0) * 1000
    searcher = Searcher(index)
    searcher.search("queryset filter")  # first BM25 query builds the BM25 table; timed separately
    t0 = time.perf_counter()
    index._derived.pop("bm25", None)
    searcher.bm25_rank("queryset filter", 5)
    bm25_build_s = time.perf_counter() - t0
    lat = {}
    for q in QUERIES:
        times = []
        for _ in range(5):
            t0 = time.perf_counter()
            searcher.search(q)
            times.append((time.perf_counter() - t0) * 1000)
        lat[q] = round(statistics.median(times), 1)
    from skyrl_swe.localize import localize
    from skyrl_swe.search_prose import prose_index

    t0 = time.perf_counter()
    index._derived.pop("prose", None)
    search_prose._FILE_DOCS.clear()  # cold: no file's tokens cached, a fresh vocabulary
    search_prose._VOCAB = search_prose._Vocabulary()
    prose_index(index)
    prose_build_s = time.perf_counter() - t0
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        localize(index, ISSUE)
        times.append((time.perf_counter() - t0) * 1000)
    lat["localize(issue text)"] = round(statistics.median(times), 1)
    n_symbols = len(index.symbols())
    edited = max(index.files, key=lambda rel: index.files[rel].size)  # the largest file: the worst one-file edit
    with open(root / edited, "a") as fh:
        fh.write("\n\ndef bench_added_helper(value):\n    return value\n")
    t0 = time.perf_counter()
    index.refresh()
    prose_index(index)
    prose_edit_s = time.perf_counter() - t0
    hostile = {"brackets.py": b"(" * 999_000, "bad_defs.py": b"def f(:\n" * 124_000,
               "chain.py": b"x = a" + b".b" * 499_000}
    for rel, data in hostile.items():
        (root / rel).write_bytes(data)
    t0 = time.perf_counter()
    after = index.refresh()
    hostile_s = time.perf_counter() - t0
    return {"project": project, "files": stats["files"], "symbols": n_symbols, "workers": workers,
            "skipped": len(stats.get("skipped", {})),
            "cold_index_s": round(build_s, 2), "noop_refresh_ms": round(refresh_ms, 1),
            "bm25_build_s": round(bm25_build_s, 2), "prose_build_s": round(prose_build_s, 2),
            "prose_after_one_edit_s": round(prose_edit_s, 2), "edited": edited,
            "hostile_refresh_s": round(hostile_s, 2), "hostile_skipped": sorted(after.get("skipped", {}).values()),
            "query_median_ms": lat,
            "query_max_of_medians_ms": max(v for k, v in lat.items() if k in QUERIES)}


if __name__ == "__main__":
    main()
