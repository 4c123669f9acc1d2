"""Rows as datasets write them: ``environment_setup`` holding ``pip install -e .`` builds in the repository copy, a
repository whose README is a symlink copies, pytest 9 subtests (several reports for one test id) are aggregated,
an environment that cannot be built is *unverifiable* (never reward 0), and a row whose command field is no
command is refused naming the field. The builds are real (pip from the package index, in the sandbox)."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest

from skyrl_core import Instance
from skyrl_core.errors import ConfigError
from skyrl_core.tasks import SCORED, UNVERIFIABLE
from skyrl_swe.channel import read_channel
from skyrl_swe.data import normalise_row
from skyrl_swe.verifiers import verify_patch

pytestmark = pytest.mark.timeout(900)

BUGGY = "def shout(text):\n    return text.lower()\n"
FIXED = "def shout(text):\n    return text.upper()\n"
TESTS = textwrap.dedent("""\
    import importlib.metadata
    import unittest

    from loud import shout


    class TestShout(unittest.TestCase):
        def test_words(self):
            for word in ("a", "bc"):
                with self.subTest(word=word):
                    self.assertEqual(shout(word), word.upper())


    def test_installed():
        assert importlib.metadata.version("loud") == "0.3"
    """)


def _diff(path: str, old: str, new: str) -> str:
    import difflib

    lines = difflib.unified_diff(old.splitlines(True), new.splitlines(True), f"a/{path}", f"b/{path}")
    return f"diff --git a/{path} b/{path}\n" + "".join(lines)


GOLD = _diff("src/loud/__init__.py", BUGGY, FIXED)


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    """A package that only imports once installed (src layout), with a README.rst that is a symlink."""
    root = tmp_path_factory.mktemp("loud")
    (root / "src" / "loud").mkdir(parents=True)
    (root / "src" / "loud" / "__init__.py").write_text(BUGGY)
    (root / "tests").mkdir()
    (root / "tests" / "test_loud.py").write_text(TESTS)
    (root / "README.md").write_text("loud\n")
    os.symlink("README.md", root / "README.rst")
    (root / "pyproject.toml").write_text(textwrap.dedent("""\
        [build-system]
        requires = ["setuptools>=61"]
        build-backend = "setuptools.build_meta"

        [project]
        name = "loud"
        version = "0.3"
        readme = "README.rst"
        """))
    return root


def row(project: Path, **extra) -> Instance:
    data = normalise_row({"instance_id": "loud__loud-1", "repo": "loud/loud", "version": "0.3",
                          "repo_dir": str(project), "environment_setup": "pip install -e .", "patch": GOLD,
                          "test_patch": "", "FAIL_TO_PASS": ["tests/test_loud.py::TestShout::test_words"],
                          "PASS_TO_PASS": ["tests/test_loud.py::test_installed"], **extra})
    return Instance(id=data["instance_id"], data=data)



async def test_environment_setup_installs_the_repository_and_gold_scores_1(project):
    result = await verify_patch(row(project), GOLD)
    assert result.outcome == SCORED and result.reward == 1.0, result.metrics
    assert result.metrics["tests"] == {"tests/test_loud.py::TestShout::test_words": "PASSED",
                                       "tests/test_loud.py::test_installed": "PASSED"}
    empty = await verify_patch(row(project), "")
    # the subtests failed: the test fails (their reports are aggregated, not refused as duplicates)
    assert empty.outcome == SCORED and empty.reward == 0.0 and "error_eval" not in empty.metrics, empty.metrics
    assert empty.metrics["tests"]["tests/test_loud.py::TestShout::test_words"] == "FAILED"
    assert empty.metrics["tests"]["tests/test_loud.py::test_installed"] == "PASSED"


async def test_a_symlinked_readme_copies_with_an_install_step(project):
    inst = row(project, environment_setup="", install="python -m pip install -e .")
    result = await verify_patch(inst, GOLD)
    assert result.reward == 1.0, result.metrics


async def test_an_environment_that_does_not_build_is_unverifiable_not_zero(project):
    result = await verify_patch(row(project, environment_setup="pip install -e . && exit 3"), GOLD)
    assert result.outcome == UNVERIFIABLE, result
    assert "environment_setup: pip install -e . && exit 3" in result.reason and "exit 3" in result.reason


def test_a_row_whose_command_field_is_no_command_is_refused_naming_the_field():
    base = {"instance_id": "x__y-1", "repo": "x/y"}
    with pytest.raises(ConfigError, match="'environment_setup' holds a commit id"):
        normalise_row({**base, "environment_setup": "a" * 40})
    with pytest.raises(ConfigError, match="'install' must be shell commands"):
        normalise_row({**base, "install": {"cmd": "pip install ."}})
    assert normalise_row({**base, "environment_setup": ["pip install -e .", "pip install numpy"]})


def test_subtest_reports_are_aggregated_worst_wins_and_a_second_plain_report_is_still_refused():
    import json

    def ev(**kw):
        return json.dumps(kw)

    lines = [ev(event="collected", ids=["t.py::T::test_a", "t.py::T::test_b"]),
             *[ev(event="report", id=i, when="setup", outcome="passed") for i in ("t.py::T::test_a", "t.py::T::test_b")],
             ev(event="report", id="t.py::T::test_a", when="call", outcome="passed", subtest=True),
             ev(event="report", id="t.py::T::test_a", when="call", outcome="failed", subtest=True),
             ev(event="report", id="t.py::T::test_a", when="call", outcome="passed"),
             ev(event="report", id="t.py::T::test_b", when="call", outcome="passed", subtest=True),
             ev(event="report", id="t.py::T::test_b", when="call", outcome="passed"),
             ev(event="finish", exitstatus=1)]
    results, problems = read_channel(lines, 1)
    assert results == {"t.py::T::test_a": "FAILED", "t.py::T::test_b": "PASSED"} and problems == []
    forged = lines[:-1] + [ev(event="report", id="t.py::T::test_a", when="call", outcome="passed"), lines[-1]]
    assert any("reported twice" in p for p in read_channel(forged, 1)[1])


def test_verify_command_reports_every_instance_and_a_summary(project, tmp_path):
    import json

    from typer.testing import CliRunner

    from skyrl_swe.cli import swe_app

    good = row(project).data
    broken = {**good, "instance_id": "loud__loud-2", "environment_setup": "pip install -e . && exit 3"}
    # a list: a verification step raises inside verify_patch, which answers unverifiable (a verifier bug is no
    # verdict on the agent) and the next instance still runs
    raising = {**good, "instance_id": "loud__loud-3", "test_cmd": ["pytest"]}
    after = {**good, "instance_id": "loud__loud-4"}
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in (good, broken, raising, after)))
    result = CliRunner().invoke(swe_app, ["verify", str(path)])
    lines = [json.loads(line) for line in result.output.splitlines() if line.startswith("{")]
    outcomes = {r["instance_id"]: (r["outcome"], r["reward"]) for r in lines}
    assert outcomes == {"loud__loud-1": ("scored", 1.0), "loud__loud-2": ("unverifiable", 0.0),
                        "loud__loud-3": ("unverifiable", 0.0), "loud__loud-4": ("scored", 1.0)}, result.output
    assert "4 instance(s): 2 reward 1; 2 scored, 0 tampered, 2 unverifiable, 0 error, 0 skipped" in result.output
    assert "AttributeError" in result.output and result.exit_code == 1
