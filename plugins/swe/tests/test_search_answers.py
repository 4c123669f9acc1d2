"""What one ``search`` answer carries (#24): module-level assignments, package listings, upper-case words,
test packages yielding to library usage, dotted prefixes ranking the fallback, the callees and users of a precise
answer, identifier hygiene and localize's co-occurrence evidence — on a small project written here, with attack
tests for hostile files against the assignment scan."""

from __future__ import annotations

import time

import pytest

from skyrl_swe.index import CodeIndex
from skyrl_swe.localize import identifiers, localize
from skyrl_swe.search import Searcher

FILES = {
    "lib/__init__.py": "",
    "lib/core.py": ("def pretty_print(x):\n    return helper(x)\n\n\ndef helper(x):\n    return str(x)\n\n\n"
                    "pprint = pretty_print\nDEFAULT_LIMIT = 10\n\n\ndef uses_limit(n):\n"
                    "    return min(n, DEFAULT_LIMIT)\n"),
    "lib/cursor.py": "class CursorWrapper:\n    def execute(self, sql):\n        return sql\n",
    "lib/admin.py": "from .core import pretty_print\n\n\nclass Command:\n    def execute(self):\n        return pretty_print(1)\n",
    "lib/other.py": "def show(x):\n    return x.pretty_print()\n",  # a namesake attribute, not a user
    "lib/db/__init__.py": "",
    "lib/db/base.py": "def test(x):\n    return x\n",
    "lib/db/creation.py": "def create_test_db(settings):\n    return settings['TEST'] or settings['TEST']\n",
    "lib/query.py": "def get_ordering(model):\n    return model.ordering\n",
    "tests/ordering/__init__.py": "",
    "tests/ordering/test_it.py": "def test_ordering():\n    ordering = 1\n    return ordering\n",
    "docs/conf.py": "def execute():\n    pass\n",
}


@pytest.fixture
def searcher(tmp_path) -> Searcher:
    for rel, text in FILES.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    return Searcher(CodeIndex(tmp_path))


def test_module_level_assignments_resolve_to_the_assigned_definition(searcher):
    alias = searcher.search("pprint")
    assert alias.mode == "alias" and alias.refs[0] == "lib/core.py:pretty_print"
    assert "lib/core.py:9:  pprint = pretty_print" in alias.text
    constant = searcher.search("DEFAULT_LIMIT")  # a constant: where it is assigned, not a 'default_limit' guess
    assert constant.mode == "alias" and constant.refs == ["lib/core.py:10"]


def test_a_package_lists_its_modules(searcher):
    out = searcher.search("db")
    assert out.mode == "module" and out.refs[:2] == ["lib/db/base.py", "lib/db/creation.py"]
    assert "holds 2 module(s)" in out.text and out.total == 3


def test_upper_case_words_search_usages_not_case_insensitive_names(searcher):
    out = searcher.search("TEST")  # 'def test' in lib/db/base.py matches case-insensitively; it is not the point
    assert out.mode == "usage" and out.refs == ["lib/db/creation.py:create_test_db"]


def test_a_test_package_yields_to_library_usage(searcher):
    out = searcher.search("ordering")
    assert out.mode == "usage" and out.refs[0] == "lib/query.py:get_ordering"
    assert searcher.search("ordering", path="tests").mode == "module"  # still reachable inside the test tree


def test_a_dotted_prefix_ranks_the_fallback_and_aux_files_come_last(searcher):
    plain = searcher.search("execute")
    assert plain.refs == ["lib/admin.py:Command.execute", "lib/cursor.py:CursorWrapper.execute", "docs/conf.py:execute"]
    assert "Used by" not in plain.text
    dotted = searcher.search("self.cursor.execute")
    assert dotted.refs[0] == "lib/cursor.py:CursorWrapper.execute" and "does not resolve" in dotted.text


def test_a_precise_answer_names_its_callees_and_users(searcher):
    out = searcher.search("pretty_print")
    assert "Calls into: helper (lib/core.py:5)" in out.text and "Used by: Command.execute (lib/admin.py:5)" in out.text
    # lib/other.py's x.pretty_print() shares the name only: listed as such, never as a use
    assert "The name 'pretty_print' also occurs (not imported from here) in: show (lib/other.py:1)" in out.text
    assert "Used by: Command.execute (lib/admin.py:5)\n" in out.text
    assert out.more == ["lib/core.py:helper", "lib/admin.py:Command.execute", "lib/other.py:show"]


def test_identifiers_drop_builtins_tracebacks_and_fences():
    text = ("Make PersonName3 iterable, e.g. `next(it)`\nTraceback (most recent call last):\n"
            '  File "/x/app.py", line 3, in <module>\n```python\nvalue = True\nnext(iter(ds.PatientName))\n```\n'
            "____ art ____")
    ids = identifiers(text)
    assert ids[0] == "PersonName3" and "ds.PatientName" in ids and "PatientName" in ids
    assert not {"Traceback", "most", "recent", "python", "next", "iter", "True", "e.g", "____", "app"} & set(ids)


def test_localize_adds_files_holding_the_issue_names_together(searcher):
    loc = localize(searcher.index, "CursorWrapper breaks when helper runs and `uses_limit` is called with DEFAULT_LIMIT")
    assert loc.files[0][0] == "lib/core.py" and "names together" in loc.evidence["lib/core.py"]


def test_attack_hostile_assignment_chains_stay_bounded(searcher, tmp_path):
    """An agent-written 1.5 MB module of endless ``a = a = ...`` chains and self-assignments: the anchored,
    bounded assignment scan answers in seconds and never follows ``pprint = pprint`` around."""
    hostile = tmp_path / "lib" / "evil.py"
    hostile.write_text(("a = " * 40 + "pprint\n") * 8000 + "pprint = pprint\n" + "x = " * 100_000 + "\n")
    started = time.monotonic()
    out = searcher.search("pprint")
    assert time.monotonic() - started < 20
    assert out.mode == "alias" and out.refs[0] == "lib/core.py:pretty_print"
    assert any(ref.startswith("lib/evil.py:") for ref in out.refs)


def test_usage_answers_show_the_lines_that_use_the_word(tmp_path):
    body = "\n".join(f"    step_{i} = {i}" for i in range(40))
    (tmp_path / "app.py").write_text(f"def long_function(settings):\n{body}\n    return settings['TIMEOUT_S']\n")
    out = Searcher(CodeIndex(tmp_path)).search("TIMEOUT_S")
    assert out.mode == "usage" and "    42      return settings['TIMEOUT_S']" in out.text
    assert "step_20" not in out.text  # the matching line, not the function's outline


def test_library_packages_win_over_test_packages_and_ambiguous_paths_say_so(tmp_path):
    for rel in ("tests/migrations/__init__.py", "src/db/migrations/__init__.py", "src/db/migrations/state.py",
                "src/a/shortcuts.py", "src/b/shortcuts.py"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("def redirect():\n    pass\n" if "shortcuts" in rel else "")
    s = Searcher(CodeIndex(tmp_path))
    package = s.search("migrations")
    assert package.mode == "module" and package.refs[0] == "src/db/migrations/state.py"
    ambiguous = s.search("shortcuts.py:redirect")
    assert ambiguous.mode == "path" and "'shortcuts.py' is ambiguous: 2 indexed files" in ambiguous.text
    assert ambiguous.refs == ["src/a/shortcuts.py", "src/b/shortcuts.py"] and "`src/a/shortcuts.py:redirect`" in ambiguous.text


def test_localize_reads_bare_file_names_and_never_splits_a_word(searcher):
    from skyrl_swe import localize as loc_mod

    loc = localize(searcher.index, 'Fix cursor.py "string index out of range"')
    assert loc.files[0][0] == "lib/cursor.py" and "path" in loc.evidence["lib/cursor.py"]
    long_text = "x " * (loc_mod.MAX_TEXT // 2 - 3) + "pretty_print"
    assert loc_mod._head(long_text).endswith("x") and "pretty_pr" not in loc_mod.identifiers(long_text)


def test_localize_command_fails_when_nothing_is_localised_and_names_bad_rows(tmp_path):
    import json
    import os
    import subprocess
    import sys

    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps({"instance_id": "x-1", "problem_statement": 123}) + "\n")
    env = dict(os.environ, SKYRL_LOAD_PLUGINS="swe", COLUMNS="400")
    cmd = [sys.executable, "-c", "from skyrl_core.cli import main; main()", "swe", "localize", str(rows),
           "--source", str(tmp_path)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 1 and "x-1: skipped: problem_statement is a int, not text" in proc.stdout
    assert "no instance localised (1 row(s)" in proc.stderr
    rows.write_text('{"instance_id": "ok"}\nnot json\n')
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode != 0 and f"{rows} line 2 is not JSON" in proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_module_level_binding_is_mentioned_beside_methods_of_that_name(tmp_path):
    (tmp_path / "measure.py").write_text("class Distance:\n    pass\n\n\nD = Distance\n")
    (tmp_path / "dateformat.py").write_text("class DateFormat:\n    def D(self):\n        return 1\n")
    out = Searcher(CodeIndex(tmp_path)).search("D")
    assert out.mode == "name" and out.refs == ["dateformat.py:DateFormat.D"]
    assert "Also bound at module level: measure.py:5  `D = Distance`" in out.text


def test_an_outline_says_when_a_file_was_not_parsed_for_definitions(tmp_path):
    from skyrl_swe import index as index_mod

    (tmp_path / "big.py").write_text("def f():\n    pass\n" + "# pad\n" * (index_mod.MAX_PARSE_BYTES // 6 + 10))
    out = Searcher(CodeIndex(tmp_path)).search("big.py")
    assert out.mode == "outline" and "not parsed for definitions:" in out.text and "parse limit" in out.text
    assert "partial parse" not in out.text


def test_attack_hostile_files_against_the_users_and_callees_scans(searcher, tmp_path):
    """An agent-written 900 KB module of endless ``from`` prefixes, ``core.`` chains and receiver calls: the
    linked-user and callee scans (bounded, anchored patterns) answer in seconds, and a file that only *says*
    the name in a string or comment is never called a user."""
    hostile = tmp_path / "lib" / "evil.py"
    hostile.write_text("from " * 60_000 + "\n" + ("core." * 20_000 + "\n") + "x = " + "a." * 50_000 + "pretty_print\n"
                       + "# pretty_print mentioned, from lib.core import nothing\ns = 'pretty_print'\n")
    (tmp_path / "lib" / "decoy.py").write_text("def decoy():\n    return 'pretty_print'  # pretty_print\n")
    started = time.monotonic()
    out = searcher.search("pretty_print")
    assert time.monotonic() - started < 20
    assert "Used by: Command.execute (lib/admin.py:5)\n" in out.text  # the decoy's mentions are no use
    assert "also occurs (not imported from here) in: decoy (lib/decoy.py:1)" in out.text


def test_attack_hostile_issue_text_for_localize_stays_bounded(searcher):
    """An issue text an agent (or a scraped issue) made hostile: after a real title, 300 KB of ``a/`` segments,
    ``.py`` runs and quotes: localize reads at most MAX_TEXT characters, its patterns are bounded, and it answers
    in seconds without raising."""
    text = "Fix cursor.py crash\n" + "a/" * 50_000 + "x.py " + ".py" * 20_000 + ' "' * 10_000 + "\n"
    started = time.monotonic()
    loc = localize(searcher.index, text)
    assert time.monotonic() - started < 30
    assert loc.files and loc.files[0][0] == "lib/cursor.py"
