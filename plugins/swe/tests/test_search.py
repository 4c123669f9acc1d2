"""The AST search tool and its index on a real project (inflection 0.5.1), including files with syntax errors."""

from __future__ import annotations

import shutil

from skyrl_swe.index import CodeIndex, parse_python
from skyrl_swe.search import Searcher
from skyrl_swe.tools import search_tool


async def search(ctx, query, **kw):
    return await search_tool.call({"query": query, **kw}, ctx)


async def test_exact_name_shows_code_and_a_hint(ctx):
    res = await search(ctx, "camelize")
    assert not res.error and res.metadata["mode"] == "name"
    assert "## inflection/__init__.py:144-168  function camelize" in res.output
    assert "   144  def camelize(string: str, uppercase_first_letter: bool = True) -> str:" in res.output
    assert res.metadata["results"][0] == "inflection/__init__.py:camelize"
    assert res.metadata["results"] == ["inflection/__init__.py:camelize"]  # exact: test_camelize is not shown
    assert res.output.rstrip().splitlines()[-1].startswith("Hint: ")


async def test_fuzzy_name(ctx):
    res = await search(ctx, "camelise")
    assert res.metadata["mode"] == "fuzzy"
    assert res.metadata["results"][0] == "inflection/__init__.py:camelize"
    assert "closest names: camelize" in res.output and "Hint: search one of" in res.output


async def test_qualified_path_dotted_and_outline(ctx):
    res = await search(ctx, "inflection/__init__.py:pluralize")
    assert res.metadata["results"] == ["inflection/__init__.py:pluralize"]
    assert "if not word or word.lower() in UNCOUNTABLES:" in res.output
    dotted = await search(ctx, "inflection.ordinal")
    assert dotted.metadata["results"] == ["inflection/__init__.py:ordinal"]
    outline = await search(ctx, "inflection/__init__.py")
    assert outline.metadata["mode"] == "outline"
    assert "function _irregular  lines 91-141" in outline.output and "  function caseinsensitive" in outline.output
    missing = await search(ctx, "inflection/__init__.py:no_such")
    assert "No 'no_such' in inflection/__init__.py" in missing.output


async def test_structured_patterns(ctx, sandbox):
    (sandbox.workspace / "inflection" / "shapes.py").write_text(
        "class Base:\n    def area(self):\n        return 0\n\n"
        "class Square(Base):\n    def area(self):\n        return camelize(self.side)\n\n"
        "class Other(object):\n    pass\n")
    sub = await search(ctx, "subclass:Base")
    assert sub.metadata["results"] == ["inflection/shapes.py:Square"]
    methods = await search(ctx, "method:area")
    assert sorted(methods.metadata["results"]) == ["inflection/shapes.py:Base.area", "inflection/shapes.py:Square.area"]
    calls = await search(ctx, "calls:camelize")
    assert "inflection/shapes.py:7" in calls.metadata["results"]
    assert any(r.startswith("test_inflection.py:") for r in calls.metadata["results"])
    assert "in Square.area" in calls.output
    text = await search(ctx, "text:UNCOUNTABLES = ")
    assert text.metadata["results"][0].startswith("inflection/__init__.py:")
    scoped = await search(ctx, "area", path="inflection/shapes.py", kind="method")
    assert len(scoped.metadata["results"]) == 2


async def test_bm25_fallback_for_prose(ctx):
    res = await search(ctx, "convert ordinal number suffix")
    assert res.metadata["mode"] == "bm25"
    assert "inflection/__init__.py:ordinal" in res.metadata["results"][:3]


async def test_skeleton_for_long_bodies(project_src, tmp_path):
    root = tmp_path / "repo"
    shutil.copytree(project_src, root)
    out = Searcher(CodeIndex(root)).search("_irregular", max_lines=20)
    assert "only its outline is shown" in out.text
    assert "def caseinsensitive(string: str) -> str:" in out.text  # the nested def's signature
    assert "(function caseinsensitive: lines 99-100)" in out.text
    assert "view_range [91, 141]" in out.text


async def test_index_updates_incrementally_after_edits(ctx, sandbox):
    from skyrl_swe.tools import editor_tool

    first = await search(ctx, "camelize")
    assert first.metadata["index"]["parsed"] >= 0
    await editor_tool.call({"command": "str_replace", "path": "inflection/__init__.py",
                            "old_str": "def dasherize(word: str) -> str:",
                            "new_str": "def brand_new_helper():\n    return 1\n\n\ndef dasherize(word: str) -> str:"},
                           ctx)
    res = await search(ctx, "brand_new_helper")
    assert res.metadata["results"] == ["inflection/__init__.py:brand_new_helper"]
    assert res.metadata["index"] == {"files": first.metadata["index"]["files"], "changed": 1, "parsed": 1,
                                     "removed": 0}
    again = await search(ctx, "brand_new_helper")
    assert again.metadata["index"]["changed"] == 0 and again.metadata["index_version"] == res.metadata["index_version"]


def test_content_cache_shares_parses_across_copies(project_src, tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    shutil.copytree(project_src, a)
    shutil.copytree(project_src, b)
    CodeIndex(a).refresh()
    stats = CodeIndex(b).refresh()
    assert stats["parsed"] == 0 and stats["files"] >= 4


async def test_syntax_errors_are_parsed_partially(ctx, sandbox):
    (sandbox.workspace / "broken.py").write_text(
        "def fine_before(x):\n    return x\n\ndef broken(:\n    pass\n\nclass StillFound:\n"
        "    def method(self):\n        return helper_call(1)\n")
    res = await search(ctx, "StillFound.method")
    assert res.metadata["results"] == ["broken.py:StillFound.method"]
    outline = await search(ctx, "broken.py")
    assert "partial parse" in outline.output and "function fine_before" in outline.output
    assert (await search(ctx, "calls:helper_call")).metadata["results"] == ["broken.py:9"]
    parsed = parse_python(b"\x00\xff garbage ((( def")
    assert parsed.has_error and parsed.symbols == ()


async def test_empty_and_unmatched_queries_give_hints(ctx):
    empty = await search(ctx, "  ")
    assert "Empty query" in empty.output and "Hint" in empty.output
    none = await search(ctx, "text:zzqq_not_anywhere")
    assert "does not occur" in none.output and "Hint" in none.output


def test_skyrl_tools_run_search_on_a_project_directory(project_src):
    """`skyrl tools run search ... --workspace DIR` on a plain project directory (not a git repository, used in
    place): code lines come back whole even on a narrow terminal, no library log noise, nothing written."""
    import json
    import os
    import subprocess
    import sys

    before = sorted(str(p.relative_to(project_src)) for p in project_src.rglob("*"))
    env = {**os.environ, "COLUMNS": "60", "SKYRL_LOAD_PLUGINS": "skyrl-swe"}
    skyrl = [sys.executable, "-c", "from skyrl_core.cli import main; main()"]

    def run(query: str) -> str:
        proc = subprocess.run([*skyrl, "tools", "run", "search", json.dumps({"query": query}), "--workspace",
                               str(project_src)], capture_output=True, text=True, env=env, timeout=120)
        assert proc.returncode == 0, proc.stderr
        assert "DEBUG" not in proc.stdout + proc.stderr
        return proc.stdout

    out = run("camelize")
    assert "   144  def camelize(string: str, uppercase_first_letter: bool = True) -> str:\n" in out
    out = run("inflection/__init__.py:pluralize")
    assert "if not word or word.lower() in UNCOUNTABLES:" in out and "function pluralize" in out
    out = run("return the plural form of a word")  # prose: BM25 over definitions
    assert "ranked by text similarity (BM25)" in out and "inflection/__init__.py" in out
    assert sorted(str(p.relative_to(project_src)) for p in project_src.rglob("*")) == before
