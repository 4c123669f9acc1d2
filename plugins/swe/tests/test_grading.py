"""Test grading on real runner output (captured from Django and pytest runs, tests/fixtures/README.md) under each
dataset's id convention, and the verifier end to end on a shipped Django row whose ids are keyed by docstring."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from skyrl_swe.grading import (ERROR, FAILED, MISSING, PASSED, SKIPPED, convention_of, django_labels, grade_tests,
                               match_test, parse_django, parse_junit, parse_pytest_summary)

FIX = Path(__file__).resolve().parent / "fixtures"
OUT = FIX / "runner_output"
ROW = json.loads((FIX / "swebench" / "django__django-17029.json").read_text())[0]


def read(name: str) -> str:
    return (OUT / name).read_text(encoding="utf-8")


# -- Django ------------------------------------------------------------------------------------------------------
def test_django_results_printed_lines_after_the_test_name():
    res = parse_django(read("django_tiny_project.log"))
    assert res["test_noisy (orders.tests.PriceTests)"] == PASSED  # "... computing totals", two lines, then "ok"
    assert res["test_warns (orders.tests.PriceTests)"] == PASSED  # a DeprecationWarning between "..." and "ok"
    assert res["test_rounding (orders.tests.PriceTests)"] == FAILED
    assert res["test_broken (orders.tests.PriceTests)"] == ERROR
    assert res["test_gateway (orders.tests.PriceTests)"] == SKIPPED
    assert res["test_known_bug (orders.tests.PriceTests)"] == PASSED  # expected failure
    assert len(res) == 9  # "Ran 9 tests"


def test_django_docstring_collision_is_reported_and_graded_strictly():
    res = parse_django(read("django_tiny_project.log"))
    grade = grade_tests(res, ["Rounding is done per order."], ["Totals are logged while computed.",
                                                              "test_total (orders.tests.TaxTests.test_total)"])
    # PriceTests.test_rounding fails, TaxTests.test_rounding passes: both carry that docstring
    assert grade.tests["Rounding is done per order."] == FAILED
    assert grade.ambiguous == {"Rounding is done per order.": ["test_rounding (orders.tests.PriceTests)",
                                                               "test_rounding (orders.tests.TaxTests)"]}
    assert grade.tests["Totals are logged while computed."] == PASSED
    assert grade.metrics()["match_rules"] == {"docstring": 2, "django": 1}
    assert "ambiguous_tests" in grade.metrics()


def test_shipped_django_row_graded_on_real_output_before_and_after_the_gold_patch():
    f2p, p2p = ROW["FAIL_TO_PASS"], ROW["PASS_TO_PASS"]
    assert sum(not t.startswith("test") for t in p2p) == 34  # docstring-keyed ids
    before = grade_tests(parse_django(read("django_17029_apps_before_fix.log")), f2p, p2p)
    after = grade_tests(parse_django(read("django_17029_apps_gold.log")), f2p, p2p)
    assert (before.fail_to_pass, before.pass_to_pass, before.resolved) == ("0/1", "43/43", False)
    assert (after.fail_to_pass, after.pass_to_pass, after.resolved) == ("1/1", "43/43", True)
    assert MISSING not in after.tests.values() and after.ambiguous == {}


def test_django_labels_for_docstring_ids_run_the_test_patch_modules():
    labels = django_labels(ROW["FAIL_TO_PASS"] + ROW["PASS_TO_PASS"], ROW["test_patch"])
    assert labels == ["apps.tests"]
    assert django_labels(["test_x (a.tests.T)", "test_y (a.tests.T.test_y)"]) == ["a.tests.T.test_x",
                                                                                  "a.tests.T.test_y"]
    assert django_labels(["A docstring.", "test_y (b.tests.T.test_y)"]) == ["b.tests"]


# -- pytest ------------------------------------------------------------------------------------------------------
def test_swe_bench_ids_cut_at_a_space_match_their_test():
    res = parse_junit(read("pytest_junit.xml"))
    # SWE-bench's log parser keeps the summary line's first word: "test_slugify[two words]" -> "test_slugify[two"
    m = match_test(res, "tests/unit/test_slug.py::test_slugify[two", "swe-bench")
    assert (m.status, m.rule) == (PASSED, "cut at space")
    assert match_test(res, "tests/unit/test_slug.py::test_slugify[double", "swe-bench").matched == (
        "tests/unit/test_slug.py::test_slugify[double  space]",)
    assert match_test(res, "tests/unit/test_slug.py::test_slugify[two", "generated").status == MISSING
    assert match_test(res, "tests/unit/test_slug.py::TestEdges::test_known").status == PASSED  # xfail
    assert match_test(res, "tests/unit/test_slug.py::TestEdges::test_locale").status == SKIPPED


def test_r2e_gym_ids_and_their_collisions():
    res = parse_junit(read("pytest_junit.xml"))
    m = match_test(res, "TestEdges.test_empty", "r2e-gym")  # the same class and test in two files
    assert m.rule == "r2e" and m.status == FAILED and len(m.matched) == 2
    assert match_test(res, "test_slugify[two words]", "r2e-gym").status == PASSED
    grade = grade_tests(res, ["test_roundtrip"], ["TestEdges.test_empty"], "r2e-gym")
    assert grade.ambiguous == {"TestEdges.test_empty": ["tests/integration/test_slug.py::TestEdges::test_empty",
                                                        "tests/unit/test_slug.py::TestEdges::test_empty"]}
    assert not grade.resolved


def test_text_summary_reads_what_the_report_says():
    text = parse_pytest_summary(read("pytest_rA.log"))
    junit = parse_junit(read("pytest_junit.xml"))
    fake = "tests/unit/test_slug.py::TestEdges::test_fake"  # a line the test printed into its captured output
    assert fake not in text and fake not in junit
    assert text["tests/unit/test_slug.py::test_slugify[two words]"] == PASSED
    assert {k: v for k, v in junit.items() if v != SKIPPED} == dict(text)


# every per-test form of pytest's terminal output, captured from runner_projects/pytest_ids (fixtures README)
CALC = "tests/test_calc.py::"
CALC_RESULTS = {CALC + "test_evaluate[a[0] - b-2]": PASSED, CALC + "test_evaluate[a[1] * 2-8]": PASSED,
                CALC + "test_evaluate[[1, 2][0]-1]": PASSED, CALC + "test_evaluate[b - - 1-3]": FAILED,
                CALC + "test_passes_then_teardown_errors": ERROR, CALC + "test_prints_a_fake_result": FAILED,
                CALC + "test_skipped": SKIPPED, CALC + "test_known": PASSED}


@pytest.mark.parametrize("log,expected", [
    ("pytest_v.log", CALC_RESULTS),
    ("pytest_v_s.log", CALC_RESULTS),  # -s: printed text (a fake "PASSED [ 40%]") between id and status
    ("pytest_ids_rA.log", {k: v for k, v in CALC_RESULTS.items() if v != SKIPPED}),  # -rA names skips by line
    ("pytest_q.log", {k: v for k, v in CALC_RESULTS.items() if v in (FAILED, ERROR)}),  # -q names failures only
])
def test_every_pytest_output_form_is_read(log, expected):
    assert dict(parse_pytest_summary(read(log))) == expected


def test_verbose_and_xdist_lines_grade_under_each_convention():
    results = parse_pytest_summary(read("pytest_v.log"))
    grade = grade_tests(results, [CALC + "test_evaluate[a[0] - b-2]"], [CALC + "test_known"], "generated")
    assert grade.resolved and grade.rules == {"exact": 2}
    # SWE-bench keeps the text before the first space; R2E-Gym drops the file
    assert match_test(results, CALC + "test_evaluate[a[0]", "swe-bench").status == PASSED
    assert match_test(results, CALC + "test_evaluate[b", "swe-bench").status == FAILED
    assert match_test(results, "test_evaluate[[1, 2][0]-1]", "r2e-gym").status == PASSED
    xdist = ("[gw1] [ 50%] PASSED tests/test_calc.py::test_evaluate[a[0] - b-2] \n"
             "[gw0] [100%] FAILED tests/test_calc.py::test_evaluate[b - - 1-3] \n")
    assert dict(parse_pytest_summary(xdist)) == {CALC + "test_evaluate[a[0] - b-2]": PASSED,
                                                 CALC + "test_evaluate[b - - 1-3]": FAILED}
    # -s output holding a line of "=" and a result line of its own does not end or fake the progress section
    printed = read("pytest_v_s.log").replace(
        "tests/test_calc.py::test_prints_a_fake_result tests/test_calc.py::test_evaluate[b - - 1] PASSED [ 40%]",
        "tests/test_calc.py::test_prints_a_fake_result " + "=" * 40 + "\nresult: PASSED [ 40%]\n" + "=" * 40)
    assert dict(parse_pytest_summary(printed)) == CALC_RESULTS
    # a runner that calls pytest twice: both sessions are read
    twice = read("pytest_v.log") + read("pytest_rA.log")
    assert dict(parse_pytest_summary(twice)) == {**CALC_RESULTS, **dict(parse_pytest_summary(read("pytest_rA.log")))}


def test_duplicate_ids_and_conventions():
    grade = grade_tests({"a.py::t": PASSED}, ["a.py::t"], ["a.py::t"])
    assert grade.duplicates == ["a.py::t"] and grade.resolved
    assert convention_of({"source_format": "r2e-gym"}) == "r2e-gym"
    assert convention_of({"mutation": {"kind": "off_by_one"}}) == "generated"
    assert convention_of({}) == "swe-bench"


def test_a_printed_fake_result_line_cannot_turn_a_failure_into_a_pass():
    # the code under test prints "test_a (m.T) ... ok" (before or inside its own result): the worse status wins
    for out in ("test_a (m.T) ... ok\ntest_a (m.T) ... FAIL\n", "test_a (m.T) ... FAIL\ntest_a (m.T) ... ok\n",
                "test_a (m.T) ... test_a (m.T) ... ok\nFAIL\n"):
        assert parse_django(out)["test_a (m.T)"] == FAILED, out


# -- end to end --------------------------------------------------------------------------------------------------
@pytest.mark.slow
async def test_verifier_gives_the_gold_patch_of_a_docstring_keyed_django_row_reward_1(tmp_path):
    """django__django-17029 on the Django 4.2.3 source distribution from the package index (the row's base is
    5.0-dev of June 2023; its patch and test patch apply to 4.2.3 unchanged)."""
    from skyrl_core import DataSpec
    from skyrl_swe.data import load_instances
    from skyrl_swe.generator import GeneratorError, fetch_sdist
    from skyrl_swe.verifiers import verify_patch

    try:
        src, _, _ = fetch_sdist("Django==4.2.3")
    except GeneratorError as exc:
        pytest.skip(f"cannot fetch the Django 4.2.3 sdist from the package index: {exc}")
    row = {**ROW, "repo_dir": str(src), "requirements": ["asgiref>=3.6,<4", "sqlparse>=0.3.1"]}
    (tmp_path / "rows.jsonl").write_text(json.dumps(row) + "\n")
    inst = load_instances(DataSpec(path=str(tmp_path / "rows.jsonl")))[0]
    gold = await verify_patch(inst, ROW["patch"])
    assert gold.metrics.get("report") == "django", gold.metrics
    assert gold.metrics["fail_to_pass"] == "1/1" and gold.metrics["pass_to_pass"] == "43/43", gold.metrics
    assert gold.reward == 1.0
    assert gold.metrics["match_rules"] == {"django": 10, "docstring": 34}
    # without the fix the same run fails test_clear_cache: tests/fixtures/runner_output/django_17029_apps_before_fix.log
