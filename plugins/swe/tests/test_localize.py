"""Name resolution, the fuzzy floor, test ranking, string routing, the prose retriever and ``localize`` — on a
small package written here (re-exports, star imports, tests, fixtures) and on inflection 0.5.1's real sdist; with
attack tests for every new input form (symlinks, huge and binary files, path traversal, import cycles, hostile
issue text)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from skyrl_swe.index import CodeIndex
from skyrl_swe.localize import frames, identifiers, localize, render, strings
from skyrl_swe.search import Searcher
from skyrl_swe.tools import localize_tool
from skyrl_swe.search_resolve import resolve

FILES = {
    "shop/__init__.py": '"""The shop package."""\nfrom .api import checkout, Cart as Basket\nfrom .util import *\n'
                        'from . import pricing\n__all__ = ["checkout", "Basket"]\n',
    "shop/api.py": '"""Public entry points."""\n\ndef checkout(cart):\n    """Charge the cart."""\n'
                   '    return cart.total()\n\n\nclass Cart:\n    def total(self):\n'
                   '        def inner_discount(x):\n            return x * 0.9\n'
                   '        return inner_discount(sum(self.items))\n',
    "shop/util.py": '__all__ = ["money_format"]\n\ndef money_format(v):\n    return f"{v:.2f} EUR"\n\n'
                    'def _hidden():\n    return 0\n',
    "shop/pricing.py": 'TAX_KEY = "vat-rate-percent"\n\ndef apply_tax(amount, conf):\n'
                       '    rate = conf["vat-rate-percent"]\n    if rate < 0:\n'
                       '        raise ValueError("shop.E042: negative tax rate")\n    return amount * (1 + rate / 100)\n',
    "shop/tests/test_api.py": 'def test_checkout():\n    checkout(None)\n\ndef apply_tax():\n'
                              '    "vat-rate-percent"; "vat-rate-percent"; "vat-rate-percent"\n',
    "shop/tests/fixtures/conf.py": 'def money_format(v):\n    return "fixture"\n',
    "cycle/a.py": "from cycle.b import ghost\n",
    "cycle/b.py": "from cycle.a import ghost\n",
}


@pytest.fixture
def repo(tmp_path) -> Path:
    root = tmp_path / "repo"
    for rel, text in FILES.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def refs(out) -> list[str]:
    return out.refs


def test_dotted_names_try_every_split_and_follow_re_exports(repo):
    index = CodeIndex(repo)
    index.refresh()
    s = Searcher(index)
    assert refs(s.search("shop.api.Cart.total")) == ["shop/api.py:Cart.total"]
    re_export = s.search("shop.Basket.total")  # alias re-export in shop/__init__.py
    assert re_export.mode == "qualname" and refs(re_export) == ["shop/api.py:Cart.total"]
    assert "re-exports Cart from shop.api" in re_export.text
    star = s.search("shop.money_format")  # star import limited by util's __all__
    assert refs(star) == ["shop/util.py:money_format"] and "star-imports shop.util" in star.text
    assert resolve(index, "shop._hidden").symbols == ()  # not in util's __all__: the star import does not bind it
    module = s.search("shop.pricing")
    assert module.mode == "module" and refs(module) == ["shop/pricing.py"] and "function apply_tax" in module.text
    sub = s.search("shop.pricing.apply_tax")
    assert refs(sub) == ["shop/pricing.py:apply_tax"]
    fallback = s.search("shop.nothing.checkout")
    assert "does not resolve" in fallback.text and "searched 'checkout' by name" in fallback.text
    assert refs(fallback)[0] == "shop/api.py:checkout"
    cyc = resolve(index, "cycle.a.ghost")  # a <-> b re-export each other: bounded, then a reason
    assert cyc.symbols == () and "ghost" in cyc.reason


def test_fuzzy_floor_and_exact_before_fuzzy(repo, project_src):
    s = Searcher(CodeIndex(project_src))
    none = s.search("xq")  # was: confident noise from 1-2 character names
    assert none.mode == "none" and none.refs == []
    assert "no close match" in none.text and "`text:xq`" in none.text
    assert s.search("camelise").refs[0] == "inflection/__init__.py:camelize"
    far = s.search("transmogrify_widget")
    assert far.mode == "none" and "no close match" in far.text
    r = Searcher(CodeIndex(repo))
    exact = r.search("money_format")
    assert exact.mode == "name" and exact.refs[0] == "shop/util.py:money_format"  # source before the fixture
    assert exact.refs[-1] == "shop/tests/fixtures/conf.py:money_format"
    fuzzy = r.search("money_formt")
    assert fuzzy.mode == "fuzzy" and fuzzy.refs[0] == "shop/util.py:money_format"


def test_tests_and_fixtures_rank_after_source_in_every_mode(repo):
    s = Searcher(CodeIndex(repo))
    for query in ("apply_tax", "aply_tax", '"vat-rate-percent"', "vat rate percent tax amount"):
        out = s.search(query)
        assert out.refs and out.refs[0].startswith("shop/pricing.py"), (query, out.refs)
        tests_at = [i for i, r in enumerate(out.refs) if "/tests/" in r]
        source_at = [i for i, r in enumerate(out.refs) if "/tests/" not in r]
        assert not tests_at or min(tests_at) > max(source_at), (query, out.refs)
    scoped = s.search("vat rate percent", path="shop/tests")  # still reachable with path:
    assert scoped.refs and all(r.startswith("shop/tests/") for r in scoped.refs)
    assert s.search("apply_tax", kind="function", path="shop/tests").refs == ["shop/tests/test_api.py:apply_tax"]


def test_a_name_used_but_never_defined_shows_where_it_is_used(repo):
    s = Searcher(CodeIndex(repo))
    out = s.search("rate")  # a local variable: no definition, no close name
    # most uses first (4 in apply_tax, 1 in the module's TAX_KEY string), the test file last
    assert out.mode == "usage"
    assert out.refs == ["shop/pricing.py:apply_tax", "shop/pricing.py:<module>", "shop/tests/test_api.py:apply_tax"]
    assert "used 9 time(s) in 3 definition(s)" in out.text and "`text:rate`" in out.text
    assert s.search("rat").mode == "none"  # not a whole word anywhere


def test_strings_route_to_content_search_and_map_to_definitions(repo):
    s = Searcher(CodeIndex(repo))
    key = s.search("vat-rate-percent")
    assert key.mode == "string"
    assert key.refs[:2] == ["shop/pricing.py:apply_tax", "shop/pricing.py:<module>"]
    msg = s.search("shop.E042")
    assert msg.mode == "string" and msg.refs[0] == "shop/pricing.py:apply_tax"
    quoted = s.search("'negative tax rate'")
    assert quoted.mode == "string" and quoted.refs == ["shop/pricing.py:apply_tax"]
    assert s.search('"nowhere at all zz"').mode == "none"
    assert strings('set `vat-rate-percent` or "shop.E042", see "negative tax rate"') == [
        "vat-rate-percent", "shop.E042", "negative tax rate"]


def test_prose_retriever_has_modules_whole_functions_and_no_tests(repo, project_src):
    s = Searcher(CodeIndex(repo))
    out = s.search("public entry points package")
    assert out.mode == "bm25" and out.refs[0] == "shop/api.py:<module>"  # a module-level document
    nested = s.search("inner discount items")
    assert nested.refs[0] == "shop/api.py:Cart.total"  # the nested function is read as part of its parent
    assert "shop/api.py:Cart.total.inner_discount" not in nested.refs
    real = Searcher(CodeIndex(project_src)).search("convert ordinal number suffix")
    assert real.refs[0] == "inflection/__init__.py:ordinal"
    assert not any(r.startswith("test_inflection.py") for r in real.refs)


def test_localize_fuses_traceback_names_strings_and_prose(repo, project_src):
    issue = ('Checkout crashes when the `vat-rate-percent` option is negative:\n\nTraceback (most recent call last):\n'
             '  File "/home/u/app.py", line 3, in <module>\n'
             '  File "/usr/lib/python3/site-packages/shop/pricing.py", line 6, in apply_tax\n'
             'ValueError: shop.E042: negative tax rate\n')
    assert frames(issue)[-1] == ("/usr/lib/python3/site-packages/shop/pricing.py", "apply_tax")
    loc = localize(CodeIndex(repo), issue)
    assert loc.files[0][0] == "shop/pricing.py"
    assert loc.functions[0][0].ref == "shop/pricing.py:apply_tax"
    assert {"traceback", "prose"} <= set(loc.evidence["shop/pricing.py"])
    assert not any("/tests/" in p for p, _ in loc.files)
    assert "1. shop/pricing.py" in render(loc)
    real = localize(CodeIndex(project_src), "`pluralize('octopus')` returns 'octopuss'; the plural of words "
                                            "ending in -us is wrong")
    assert real.files[0][0] == "inflection/__init__.py"
    assert real.functions[0][0].ref == "inflection/__init__.py:pluralize"
    empty = localize(CodeIndex(repo), "")
    assert empty.files == [] and empty.functions == [] and "Nothing in the repository" in render(empty)
    assert identifiers("call `shop.api.checkout()` then Cart.total") == ["shop.api.checkout", "checkout", "shop",
                                                                         "api", "Cart.total", "total"]


def test_attacks_symlinks_huge_binary_and_traversal(repo, tmp_path):
    secret = tmp_path / "secret.py"
    secret.write_text('def stolen_password():\n    return "hunter2-secret-key"\n')
    os.symlink(secret, repo / "shop" / "link.py")
    os.symlink(tmp_path, repo / "shop" / "up")
    (repo / "shop" / "huge.py").write_text("def huge_one():\n    pass\n" + "# pad\n" * 400_000)
    (repo / "shop" / "blob.py").write_bytes(b"\x00\xff\xfe def binary_def(:\n" + bytes(range(256)) * 50)
    index = CodeIndex(repo)
    index.refresh()
    assert not any(p.startswith(("shop/link", "shop/up")) for p in index.files)
    s = Searcher(index)
    for q in ("stolen_password", '"hunter2-secret-key"', "hunter2-secret-key", "huge_one", "../secret.py",
              "../../secret.py:stolen_password", "shop.up.secret.stolen_password", "shop.link.stolen_password"):
        out = s.search(q)
        assert 'return "hunter2-secret-key"' not in out.text and "stolen_password():" not in out.text, q
        assert not any("secret" in r or "huge" in r for r in out.refs), (q, out.refs)
    for scope in ("../", "../../..", "/etc", str(tmp_path)):
        out = s.search("money_format", path=scope)
        assert not any("secret" in r for r in out.refs)
    binary = s.search("binary_def")  # a binary file is indexed without raising; the word is found in it
    assert binary.mode == "usage" and binary.refs == ["shop/blob.py:<module>"]
    issue = f'File "{secret}", line 2, in stolen_password\nsee ../secret.py and `stolen_password` "hunter2-secret-key"'
    loc = localize(index, issue)
    assert not any("secret" in p for p, _ in loc.files) and 'return "hunter2' not in render(loc)


def test_attack_hostile_issue_text_is_bounded(repo):
    """Issue text is agent-controlled in the tool form: pathological input must not blow up the regexes."""
    index = CodeIndex(repo)
    index.refresh()
    nasty = ('"' * 20_000 + "`" * 20_000 + "a-" * 20_000 + 'File "' * 5_000 + "x." * 20_000 + "/" * 20_000)
    t0 = time.perf_counter()
    loc = localize(index, nasty * 3)
    assert time.perf_counter() - t0 < 30
    assert isinstance(loc.files, list)
    assert identifiers(nasty) is not None and strings(nasty) is not None


def test_attack_hostile_imports_are_read_in_linear_time(tmp_path):
    """An agent-written __init__.py full of unclosed import parentheses and __all__ brackets (2 MB)."""
    root = tmp_path / "repo"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "__init__.py").write_text(("from .x import (a,\n" * 50_000 + "__all__ = [\n" * 50_000)[:1_900_000])
    (root / "pkg" / "x.py").write_text("def a():\n    return 1\n")
    index = CodeIndex(root)
    index.refresh()
    from skyrl_swe.search_resolve import exported

    t0 = time.perf_counter()
    found = resolve(index, "pkg.a")
    names = exported(index, "pkg/__init__.py")
    assert time.perf_counter() - t0 < 10  # was quadratic: 93 s for the __all__ scan alone
    assert [s.ref for s in found.symbols] == ["pkg/x.py:a"] and names == []


async def test_localize_tool_on_a_sandbox(ctx):
    res = await localize_tool.call({"issue": "`camelize` drops the first letter when uppercase_first_letter is "
                                             "False", "max_results": 3}, ctx)
    assert not res.error
    assert res.metadata["files"][0] == "inflection/__init__.py"
    assert res.metadata["functions"][0] == "inflection/__init__.py:camelize"
    assert "Hint: search `inflection/__init__.py:camelize`" in res.output
    from skyrl_core.errors import ToolArgumentsError

    with pytest.raises(ToolArgumentsError, match="'issue' of 'localize'"):
        await localize_tool.call({"issue": ""}, ctx)


def test_skyrl_swe_localize_command(repo, tmp_path):
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps({"instance_id": "shop-1", "repo": "x/shop", "problem_statement":
                                "apply_tax raises shop.E042 for a negative `vat-rate-percent`"}) + "\n" +
                    json.dumps({"instance_id": "shop-2", "repo": "x/shop", "problem_statement": ""}) + "\n")
    out = tmp_path / "loc.jsonl"
    env = {**os.environ, "SKYRL_LOAD_PLUGINS": "skyrl-swe", "COLUMNS": "200"}
    proc = subprocess.run([sys.executable, "-c", "from skyrl_core.cli import main; main()", "swe", "localize",
                           str(rows), "--source", str(repo), "--top", "3", "--out", str(out)],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "shop/pricing.py" in proc.stdout and "shop-2: skipped: no problem_statement" in proc.stdout
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert lines[0]["files"][0] == "shop/pricing.py" and lines[0]["functions"][0] == "shop/pricing.py:apply_tax"
    assert lines[1] == {"instance_id": "shop-2", "skipped": "no problem_statement"}
    missing = subprocess.run([sys.executable, "-c", "from skyrl_core.cli import main; main()", "swe", "localize",
                              str(rows), "--source", str(tmp_path / "nope")], capture_output=True, text=True,
                             env=env, timeout=120)
    assert missing.returncode != 0 and "is not a directory" in missing.stdout + missing.stderr


def test_localisation_benchmark_merges_and_reports_per_repository(project_src):
    """The benchmark's per-identifier merges and its table (the figures in the README come from these)."""
    import importlib.util

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "localisation_bench.py"
    spec = importlib.util.spec_from_file_location("localisation_bench", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    searcher = Searcher(CodeIndex(project_src))
    reading, rr_files, files = bench.rank_search(searcher, ["transmogrify_x", "camelize", "inflection.pluralize"])
    assert reading[:2] == [("inflection/__init__.py", "camelize"), ("inflection/__init__.py", "pluralize")]
    assert files == rr_files == ["inflection/__init__.py"]
    row = {"measured": True, "repo": "jpvanhal/inflection", "gold_functions": ["inflection/__init__.py:camelize"]}
    for method in bench.METHODS:
        row.update({f"{method}_file@1": method == "localize", f"{method}_file@5": True, f"{method}_file@10": True,
                    f"{method}_function@5": False, f"{method}_function@10": method != "grep"})
    text = bench.table([row, {"measured": False, "instance_id": "x-1", "reason": "no sdist"}])
    assert "rows measured: 1 of 2 (gold function located in 1)" in text
    assert "| localize | 1/1 (100 %) | 1/1 (100 %) | 1/1 (100 %) | 0/1 (0 %) | 1/1 (100 %) |" in text
    assert "| grep | 0/1 (0 %) | 1/1 (100 %) | 1/1 (100 %) | 0/1 (0 %) | 0/1 (0 %) |" in text
    assert "| jpvanhal/inflection | 1; 1 | 1 / 1 | 1 / 1 | 1 / 1 | 1 / 1 | 1 / 0 |" in text
