"""The host-side code index on agent-written files: a hostile file costs a bounded parse, is indexed without
symbols with the reason in the refresh stats and the search tool's metadata, and its text stays searchable — in the
inline path and in the process pool. Happy path first: real code keeps every symbol and reports nothing."""

from __future__ import annotations

import shutil
import time

from skyrl_swe.index import CONTENT_CACHE, MAX_PARSE_BYTES, CodeIndex, parse_python
from skyrl_swe.search import Searcher
from skyrl_swe.tools import search_tool

# Each stalled the old index: the query cursor is quadratic in an unmatched bracket run (the first ran over ten
# minutes at 2 MB); the second is slow to parse at all; the third is an attribute chain 400k deep.
HOSTILE = {
    "pkg/brackets.py": b"MARKER_BRACKETS = 1\n" + b"(" * 900_000,
    "pkg/bad_defs.py": b"MARKER_DEFS = 1\n" + b"def f(:\n" * 120_000,
    "pkg/nested.py": b"MARKER_NESTED = 1\nx = a" + b".b" * 400_000,
}
LIMIT_S = 60  # generous for a loaded 2-core machine: the bounded refresh takes about 3 s of CPU


def write_project(root, hostile=True, padding=0):
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "ok.py").write_text('class Ledger:\n    def post(self, amount):\n        return amount\n')
    for n in range(padding):
        (root / "pkg" / f"pad{n}.py").write_text(f"def pad_{n}():\n    return {n}\n")
    if hostile:
        for rel, data in HOSTILE.items():
            (root / rel).write_bytes(data)


def test_real_code_keeps_its_symbols_and_reports_nothing(project_src, tmp_path):
    index = CodeIndex(project_src)
    stats = index.refresh()
    assert "skipped" not in stats and index.skipped() == {}
    assert "inflection/__init__.py:camelize" in [s.ref for s in index.files["inflection/__init__.py"].symbols]
    parsed = parse_python(b"class A:\n    def f(self):\n        g()\n")
    assert [s.qualname for s in parsed.symbols] == ["A", "A.f"] and parsed.calls == (("g", 3),)
    assert parsed.skipped == ""


def test_attack_hostile_files_are_bounded_and_their_text_stays_searchable(tmp_path):
    CONTENT_CACHE.data.clear()
    write_project(tmp_path)
    index = CodeIndex(tmp_path, workers=1)
    t0 = time.perf_counter()
    stats = index.refresh()
    assert time.perf_counter() - t0 < LIMIT_S
    assert set(stats["skipped"]) == set(HOSTILE)
    for rel, why in stats["skipped"].items():  # which bound trips first depends on the input's shape
        assert any(k in why for k in ("parse budget", "syntax error spans", "syntax errors in", "nests over")), \
            (rel, why)
    assert stats["skipped"]["pkg/nested.py"] == "its syntax tree nests over 400 levels"
    searcher = Searcher(index)
    for rel, marker in (("pkg/brackets.py", "MARKER_BRACKETS"), ("pkg/bad_defs.py", "MARKER_DEFS"),
                        ("pkg/nested.py", "MARKER_NESTED")):
        out = searcher.search(f"text:{marker}")
        assert f"{rel}:1:" in out.text, out.text
    assert searcher.search("Ledger.post").refs == ["pkg/ok.py:Ledger.post"]
    big = parse_python(b"def big():\n    pass\n" + b"#" * MAX_PARSE_BYTES)
    assert big.symbols == () and "parse limit" in big.skipped


def test_attack_the_process_pool_gets_the_same_bound(tmp_path):
    CONTENT_CACHE.data.clear()
    write_project(tmp_path, padding=210)  # over 200 cache misses: parsed in worker processes
    index = CodeIndex(tmp_path, workers=2)
    t0 = time.perf_counter()
    stats = index.refresh()
    assert time.perf_counter() - t0 < LIMIT_S
    assert stats["parsed"] == 214 and set(stats["skipped"]) == set(HOSTILE)
    assert Searcher(index).search("pad_209").refs == ["pkg/pad209.py:pad_209"]


async def test_attack_search_tool_metadata_names_the_skipped_file(ctx, sandbox):
    first = await search_tool.call({"query": "camelize"}, ctx)
    assert "skipped" not in first.metadata["index"]
    shutil.copyfile(__file__, sandbox.workspace / "inflection" / "copy_of_test.py")  # an ordinary file
    (sandbox.workspace / "inflection" / "evil.py").write_bytes(HOSTILE["pkg/brackets.py"])
    t0 = time.perf_counter()
    res = await search_tool.call({"query": "text:MARKER_BRACKETS"}, ctx)
    assert time.perf_counter() - t0 < LIMIT_S
    assert "inflection/evil.py:1:" in res.output
    assert list(res.metadata["index"]["skipped"]) == ["inflection/evil.py"]
