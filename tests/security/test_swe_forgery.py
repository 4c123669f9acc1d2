"""Forging reward 1 from the code under test (issue #30), and the verifier's outcome contract.

Each attack kind is run twice: as written (the diff scan finds it: *tampered*), and with the scan switched off
(``no_scan``), so the run-time evidence alone must catch it: canary tests planted at verification time beside
the real ones, the launcher that loads the runner before the workspace is importable, the printed-line
cross-checks, and a control run on the pristine tree that decides the blame. Every attack forges reward 1 on the
code before #30 (the ``old`` column of docs/runtimes.md's table). The project and helpers are those of
``test_swe_attacks.py``."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("skyrl_swe")

from skyrl_core import Instance  # noqa: E402
from skyrl_core.errors import RuntimeLost  # noqa: E402
from skyrl_core.runtime import RuntimeSpec  # noqa: E402
from skyrl_swe import verifiers as V  # noqa: E402
from skyrl_swe.runtime import SweSandbox  # noqa: E402
from skyrl_swe.verifiers import swe_tests, verify_patch  # noqa: E402
from test_swe_attacks import GOLD, diff, instance, project  # noqa: E402,F401  (project: the fixture)

ADD = "tests/test_core.py::test_add"
NEG = "tests/test_core.py::test_neg"

# a consistent stream for the two real tests, every phase passed, exit status 0
FORGED_STREAM = textwrap.dedent('''\
    def _stream():
        import json
        ids = ["tests/test_core.py::test_add", "tests/test_core.py::test_neg"]
        out = [{"event": "collected", "ids": ids}]
        out += [{"event": "report", "id": i, "when": w, "outcome": "passed", "xfail": False}
                for i in ids for w in ("setup", "call", "teardown")]
        out.append({"event": "finish", "exitstatus": 0})
        return "".join(json.dumps(e) + "\\n" for e in out).encode()
    ''')

# a sender that reports every failure as a pass and the exit status as 0
FORGING_SENDER = textwrap.dedent('''\
    def _forger(send):
        def _forge(event):
            if event.get("outcome") == "failed":
                event["outcome"] = "passed"
            if event.get("event") == "finish":
                event["exitstatus"] = 0
            send(event)
        return _forge
    ''')

ATTACKS = {
    # (a) the package's __init__.py neuters pytest
    "runtest replaced by a no-op": (
        "import _pytest.python\n_pytest.python.Function.runtest = lambda self: None\n",
        "import importlib\n_m = importlib.import_module('_py' + 'test.python')\n"
        "setattr(getattr(_m, 'Func' + 'tion'), 'run' + 'test', lambda self: None)\n"),
    "AssertionError turned into xfail": (
        textwrap.dedent('''\
            import _pytest.python
            _orig = _pytest.python.Function.runtest
            def _runtest(self):
                try:
                    _orig(self)
                except AssertionError:
                    import pytest
                    pytest.xfail("flaky")
            _pytest.python.Function.runtest = _runtest
            '''),
        textwrap.dedent('''\
            import importlib
            _cls = getattr(importlib.import_module('_py' + 'test.python'), 'Func' + 'tion')
            _name = 'run' + 'test'
            _orig = getattr(_cls, _name)
            def _patched(self):
                try:
                    _orig(self)
                except AssertionError:
                    import pytest
                    pytest.xfail("flaky")
            setattr(_cls, _name, _patched)
            ''')),
    # (c) the result channel's sender rewritten, exit forced to 0
    "channel sender rewritten, exit 0": (
        FORGING_SENDER + textwrap.dedent('''\
            import atexit, os, sys
            _c = sys.modules["skyrl_result_channel"]
            _c._send = _forger(_c._send)
            atexit.register(os._exit, 0)
            '''),
        FORGING_SENDER + textwrap.dedent('''\
            import os, sys
            def _arm():
                import atexit
                for _c in list(sys.modules.values()):
                    if getattr(_c, "_send", None) is not None and hasattr(_c, "_FD"):
                        _c._send = _forger(_c._send)
                atexit.register(getattr(os, "_ex" + "it"), 0)
            _arm()
            ''')),
    # (c) the channel's fd found in /proc/self/environ, a consistent forged stream written, exit 0
    "channel fd from /proc/self/environ": (
        FORGED_STREAM + textwrap.dedent('''\
            import os
            for _e in open("/proc/self/environ", "rb").read().split(b"\\0"):
                if _e.startswith(b"SKYRL_RESULT_FD="):
                    os.write(int(_e.split(b"=", 1)[1]), _stream())
                    os._exit(0)
            '''),
        FORGED_STREAM + textwrap.dedent('''\
            import os
            def _go():
                key = ("SKY" + "RL_RESULT_FD=").encode()
                for e in open(os.path.join("/", "proc", "se" + "lf", "environ"), "rb").read().split(b"\\0"):
                    if e.startswith(key):
                        try:
                            os.write(int(e.split(b"=", 1)[1]), _stream())
                        except OSError:
                            return
                        getattr(os, "_ex" + "it")(0)
            _go()
            ''')),
    # (c) the same stream written to every pipe the process holds (the channel is one of them)
    "channel fd found among /proc/self/fd": (
        FORGED_STREAM + textwrap.dedent('''\
            import os
            for _fd in map(int, os.listdir("/proc/self/fd")):
                if _fd > 2 and os.readlink(f"/proc/self/fd/{_fd}").startswith(("pipe:", "/skyrl/")):
                    os.write(_fd, _stream())
            os._exit(0)
            '''),
        FORGED_STREAM + textwrap.dedent('''\
            import os, stat
            def _go():
                where = os.path.join("/", "proc", "se" + "lf", "fd")
                for fd in map(int, os.listdir(where)):
                    try:
                        if fd > 2 and stat.S_ISFIFO(os.fstat(fd).st_mode):
                            os.write(fd, _stream())
                    except OSError:
                        pass
                getattr(os, "_ex" + "it")(0)
            _go()
            ''')),
}
# the channel's descriptor is moved before any tested code runs: the one /proc/self/environ names is closed, so
# this forger writes nothing and the run is an honest failure
FORGER_FINDS_NOTHING = {"channel fd from /proc/self/environ"}


@pytest.fixture
def no_scan(monkeypatch):
    """The diff scan off: only the run-time evidence decides."""
    monkeypatch.setattr(V, "tamper_findings", lambda patch: [])


def init_py(source: str) -> str:
    return diff("calc/__init__.py", "", source)


# -- honest patches keep their reward, with canaries in the run ----------------------------------------------------
async def test_gold_1_and_empty_0_with_canaries_beside_the_real_tests(project):
    inst = instance(project)
    gold = await verify_patch(inst, GOLD)
    assert (gold.reward, gold.outcome, gold.metrics["canaries"]) == (1.0, "scored", 4), gold
    assert set(gold.metrics["tests"]) == {ADD, NEG}  # canaries are not graded
    empty = await verify_patch(inst, "")
    assert (empty.reward, empty.outcome) == (0.0, "scored") and "control" not in empty.metrics, empty
    assert (project / "tests" / "test_core.py").read_text().count("def test_") == 2  # planted in the copy only


def test_canaries_are_named_like_their_neighbours_and_never_reuse_a_name():
    import random

    source = "".join(f"def test_{a}_{b}():\n    pass\n" for a, b in [("parse", "empty"), ("parse", "nested"),
                                                                    ("format", "unicode"), ("round", "trip")])
    for seed in range(50):
        canaries = V.make_canaries({"tests/test_x.py": source}, random.Random(seed))
        names = list(canaries.expect)
        assert sorted(canaries.expect.values()) == ["FAILED", "FAILED", "PASSED", "PASSED"]
        assert len(set(names)) == 4 and not any(f"def {n}(" in source for n in names)
        words = {w for n in names for w in n[5:].split("_")}
        assert words <= {"parse", "empty", "nested", "format", "unicode", "round", "trip"}
        namespace: dict = {}
        exec(canaries.sources["tests/test_x.py"], namespace)  # noqa: S102 - our own generated source
        for name, want in canaries.expect.items():
            try:
                namespace[name]()
                got = "PASSED"
            except AssertionError:
                got = "FAILED"
            assert got == want, (name, canaries.sources)


# -- (a), (c): the code under test neuters the runner or forges the channel ----------------------------------------
@pytest.mark.parametrize("attack", list(ATTACKS))
async def test_attack_is_found_in_the_diff(project, attack):
    plain, _ = ATTACKS[attack]
    result = await verify_patch(instance(project), init_py(plain))
    assert (result.reward, result.outcome) == (0.0, "tampered"), result
    assert "calc/__init__.py: reaches for" in result.reason


@pytest.mark.parametrize("attack", list(ATTACKS))
async def test_attack_hidden_from_the_scan_betrays_itself_at_run_time(project, attack, no_scan):
    _, hidden = ATTACKS[attack]
    result = await verify_patch(instance(project), init_py(hidden))
    if attack in FORGER_FINDS_NOTHING:
        assert (result.reward, result.outcome, result.metrics["tests"][ADD]) == (0.0, "scored", "FAILED"), result
        return
    assert (result.reward, result.outcome) == (0.0, "tampered"), result
    assert "canary test" in result.reason, result.reason  # a must-fail canary passed, or canaries were never run
    assert "control run without the agent's patch was consistent" in result.metrics["control"]


# -- (b) a pytest.py at the repository root ------------------------------------------------------------------------
SHADOW_PYTEST = FORGED_STREAM + textwrap.dedent('''\
    import os, sys
    fd = os.environ.get("SKYRL_RESULT_FD")
    if fd:
        os.write(int(fd), _stream())
    sys.exit(0)
    ''')


async def test_a_pytest_py_at_the_root_is_tampering(project):
    result = await verify_patch(instance(project), diff("pytest.py", None, SHADOW_PYTEST))
    assert (result.reward, result.outcome) == (0.0, "tampered"), result
    assert "shadows the test runner (pytest)" in result.reason


async def test_a_pytest_py_at_the_root_never_runs(project, no_scan):
    result = await verify_patch(instance(project), diff("pytest.py", None, SHADOW_PYTEST) + GOLD.replace(
        "return a + b", "return a - b + 0"))
    assert (result.reward, result.outcome) == (0.0, "scored"), result
    assert result.metrics["tests"][ADD] == "FAILED" and result.metrics["canaries"] == 4
    gold = await verify_patch(instance(project), diff("pytest.py", None, SHADOW_PYTEST) + GOLD)
    assert (gold.reward, gold.outcome) == (1.0, "scored"), gold  # the real runner ran the real tests


# -- (c) a shell test_cmd: a PASSED line printed at exit beside the real FAILED ----------------------------------------
PRINT_AT_EXIT = textwrap.dedent('''\
    def _late():
        import atexit
        atexit.register(print, "PASSED tests/test_core.py::test_add")
    _late()
    ''')


def shell_instance(project: Path) -> Instance:
    return instance(project, test_cmd="PYTHONDONTWRITEBYTECODE=1 python -m pytest -rA -p no:cacheprovider "
                                      "tests/test_core.py")


async def test_shell_runner_gold_1_and_a_printed_pass_is_tampering(project):
    inst = shell_instance(project)
    assert V.runner_kind(inst.data) == "command"
    gold = await verify_patch(inst, GOLD)
    assert (gold.reward, gold.outcome, gold.metrics["report"]) == (1.0, "scored", "text"), gold
    result = await verify_patch(inst, init_py(PRINT_AT_EXIT))
    assert (result.reward, result.outcome) == (0.0, "tampered"), result
    assert f"{ADD} was reported FAILED and PASSED" in result.reason


def test_shell_runner_exit_status_is_cross_checked():
    results = {ADD: "PASSED", NEG: "PASSED"}
    assert V.command_problems(f"PASSED {ADD}\nPASSED {NEG}\n", results, 1) == [
        "the test command exited 1 although every reported test passed"]
    assert V.command_problems(f"FAILED {ADD}\n", {ADD: "FAILED"}, 0) == [
        "the test command exited 0 although tests failed"]
    assert V.command_problems(f"PASSED {ADD}\nPASSED {NEG}\n", results, 0) == []


# -- (d) a compiled sitecustomize.pyc ------------------------------------------------------------------------------
def binary_patch(tmp_path: Path, name: str, data: bytes) -> str:
    """``git diff --binary`` adding ``name`` with ``data`` (as the docker runtime's diff carries it)."""
    repo = tmp_path / "bin-repo"
    repo.mkdir()
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], cwd=repo, check=True)
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "base"], cwd=repo, check=True)
    (repo / name).write_bytes(data)
    subprocess.run([*git, "add", name], cwd=repo, check=True)
    return subprocess.run([*git, "diff", "--cached", "--binary"], cwd=repo, check=True, capture_output=True,
                          text=True).stdout


def compiled_sitecustomize(tmp_path: Path) -> bytes:
    """``sitecustomize`` compiled by this interpreter (the sandbox's environment is built from it): it fixes
    ``add`` before any test runs."""
    import py_compile

    source = tmp_path / "sitecustomize.py"
    source.write_text("import calc.core\ncalc.core.add = lambda a, b: a + b\n")
    return Path(py_compile.compile(str(source), cfile=str(tmp_path / "sitecustomize.pyc"))).read_bytes()


async def test_a_compiled_sitecustomize_is_tampering_and_never_loads(project, tmp_path, monkeypatch):
    patch = binary_patch(tmp_path, "sitecustomize.pyc", compiled_sitecustomize(tmp_path))
    assert "GIT binary patch" in patch
    result = await verify_patch(instance(project), patch)
    assert (result.reward, result.outcome) == (0.0, "tampered"), result
    assert "sitecustomize.pyc: a compiled file" in result.reason
    monkeypatch.setattr(V, "tamper_findings", lambda patch: [])
    result = await verify_patch(instance(project), patch)
    assert result.metrics["patch_applied"] and result.metrics["dropped_files"] == [], result
    assert (result.reward, result.outcome) == (0.0, "scored"), result
    assert result.metrics["tests"][ADD] == "FAILED"


# -- end to end: the bash tool, submit, swe_tests ------------------------------------------------------------------
async def test_forgery_through_bash_and_submit_is_tampering(project):
    from skyrl_core import ToolContext
    from skyrl_swe.tools import bash_tool, submit_tool

    _, hidden = ATTACKS["AssertionError turned into xfail"]
    async with SweSandbox(RuntimeSpec(type="swe_sandbox"), instance=instance(project)) as rt:
        ctx = ToolContext(runtime=rt)
        await bash_tool.call({"command": f"cat > calc/__init__.py <<'EOF'\n{hidden}EOF\n"}, ctx)
        submitted = await submit_tool.call({}, ctx)
        assert submitted.finish and "calc/__init__.py" in submitted.answer
        result = await swe_tests(None, rt, rt.instance)
    assert (result.reward, result.outcome) == (0.0, "tampered"), result
    assert "must fail but was PASSED" in result.reason, result.reason


def test_forgeries_through_skyrl_swe_verify(project, tmp_path):
    """``skyrl swe verify --predictions``: each hidden attack and the root ``pytest.py`` score 0, tampered; the
    gold patch 1 (one instance per prediction, the same row)."""
    import json

    rows, preds = [], []
    attacks = {f"hidden {name}": init_py(hidden) for name, (_, hidden) in ATTACKS.items()
               if name not in FORGER_FINDS_NOTHING}
    attacks.update({"pytest.py at the root": diff("pytest.py", None, SHADOW_PYTEST), "gold": GOLD})
    for k, patch in enumerate(attacks.values()):
        data = dict(instance(project).data, instance_id=f"calc__calc-{k}")
        rows.append(json.dumps(data))
        preds.append(json.dumps({"instance_id": data["instance_id"], "model_patch": patch}))
    (tmp_path / "rows.jsonl").write_text("\n".join(rows) + "\n")
    (tmp_path / "preds.jsonl").write_text("\n".join(preds) + "\n")
    out = subprocess.run([sys.executable, "-m", "skyrl_core.cli", "swe", "verify", str(tmp_path / "rows.jsonl"),
                          "--predictions", str(tmp_path / "preds.jsonl")], capture_output=True, text=True,
                         timeout=600, env={**os.environ, "SKYRL_LOAD_PLUGINS": "skyrl-swe"})
    assert out.returncode == 0, out.stderr[-2000:]
    results = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    assert [(r["reward"], r["outcome"]) for r in results] == [(0.0, "tampered")] * (len(attacks) - 1) + [
        (1.0, "scored")], results


# -- blame: the agent's doing is tampered, the infrastructure's unverifiable ---------------------------------------
async def test_breaking_the_run_on_purpose_is_tampered_not_masked(project, no_scan):
    # exits 0 at import, before pytest reports its collection: the run is broken, the pristine control is not
    result = await verify_patch(instance(project), init_py("import os\ndef _x():\n    os._exit(0)\n_x()\n"))
    assert (result.reward, result.outcome) == (0.0, "tampered"), result
    assert "never reported its collection" in result.reason


async def test_a_row_whose_tests_cannot_run_is_unverifiable(project):
    # the listed test file does not exist in the tree: the pristine control breaks the same way
    inst = instance(project, FAIL_TO_PASS=["tests/test_absent.py::test_add"], PASS_TO_PASS=[])
    result = await verify_patch(inst, GOLD)
    assert result.outcome == "unverifiable", result
    assert "the control run did not run 1 listed test(s) either" in result.reason
    none = await verify_patch(instance(project, FAIL_TO_PASS=[], PASS_TO_PASS=[]), GOLD)
    assert none.outcome == "unverifiable" and "lists no" in none.reason


async def test_a_test_run_timing_out_without_the_agent_is_unverifiable(project, monkeypatch):
    # the run does not finish in its time even on the pristine tree (a host too loaded for the limit)
    monkeypatch.setattr(V.run_tests, "__defaults__", (1.0,))
    inst = instance(project, test_patch=diff("tests/conftest.py", None, "import time\ntime.sleep(20)\n"))
    result = await verify_patch(inst, GOLD)
    assert result.outcome == "unverifiable", result
    assert "wall_time" in result.reason and "control run" in result.reason, result.reason


class LostDuringTests(SweSandbox):
    """A stand-in for a container killed under the test run (the real kill is in the docker suite): the run's
    command raises RuntimeLost, as the docker runtime does for a dead container."""

    async def exec(self, command, *args, **kwargs):
        if "skyrl_launcher.py" in " ".join(command if isinstance(command, list) else [command]):
            raise RuntimeLost("container skyrl-test is not running (status exited, exit 137, OOM-killed False)")
        return await super().exec(command, *args, **kwargs)


async def test_a_runtime_lost_in_both_runs_is_unverifiable_and_masked(project):
    from skyrl_core.default_plugins.eval.run import outcome_counts
    from skyrl_core.postprocess import build_training_batch
    from skyrl_core.rollout import apply_verifier_result
    from skyrl_core.tasks import Unverifiable
    from skyrl_core.default_plugins.trainer.runlog import trajectory_summary
    from skyrl_core.transitions import Trajectory, Transition

    result = await verify_patch(instance(project), GOLD, LostDuringTests)
    assert result.outcome == "unverifiable" and "RuntimeLost" in result.reason, result
    # through the rollout's contract: error_eval, loss-masked, counted; the scored sibling trains
    trajs = []
    for k, verdict in enumerate([result, await verify_patch(instance(project), "")]):
        t = Trajectory(instance_id="calc__calc-1", sample_index=k, task="swe", group_id="calc__calc-1")
        t.transitions.append(Transition(input_ids=[1, 2, 3], output_ids=[4, 5], output_logprobs=[-0.5, -0.5],
                                        finish_reason="stop"))
        t.finish_reason = "finished"
        try:
            apply_verifier_result(t, verdict, "swe_tests")
        except Unverifiable as exc:  # what the dispatcher's eval stage does with it
            t.fail("error_eval", str(exc))
        trajs.append(t)
    lost, scored = trajs
    assert (lost.finish_reason, lost.masked, lost.metrics["outcome"]) == ("error_eval", True, "unverifiable")
    assert (scored.masked, scored.reward, scored.metrics["outcome"]) == (False, 0.0, "scored")
    assert outcome_counts(trajs) == {"unverifiable": 1, "scored": 1}
    assert trajectory_summary(trajs)["outcome/unverifiable"] == 1.0
    batch = build_training_batch(trajs, skip_zero_advantage=False)
    assert sorted(d.loss_mask for d in batch.data) == [0, 1]


async def test_an_environment_that_does_not_build_is_unverifiable(project):
    inst = instance(project, install="echo the build log says: no compiler >&2; exit 3")
    result = await swe_tests(None, None, inst)
    assert result.outcome == "unverifiable", result
    assert "no compiler" in result.reason and "exit" in result.reason, result.reason


async def test_a_trajectory_whose_runtime_was_lost_is_unverifiable(project):
    class Lost:
        finish_reason, error, answer = "error_runtime", "container gone", GOLD

    result = await swe_tests(Lost(), None, instance(project))
    assert result.outcome == "unverifiable" and "container gone" in result.reason


def test_scan_spares_honest_code_and_the_test_frameworks_own_source():
    honest = diff("calc/core.py", "x = 1\n", "import atexit\n\n\ndef close():\n    atexit.register(print)\n"
                                             "    builtins_seen = 1\n# os._exit(0) is not used here\n")
    assert V.tamper_findings(honest) == []
    framework = diff("src/_pytest/python.py", "a = 1\n", "def runtest(self):\n    return _pytest.outcomes\n")
    assert V.tamper_findings(framework) == []
    assert V.tamper_findings(diff("calc/plug.py", None, "def runtest(self):\n    pass\n"))
    assert V.tamper_findings(diff("src/pytest.py", None, "x = 1\n"))
    assert V.tamper_findings(diff("pluggy/__init__.py", None, "x = 1\n"))
    assert V.tamper_findings(diff("src/_pytest/newer.py", None, "x = 1\n")) == []  # a fix to pytest itself
    assert V.tamper_findings("diff --git a/ b/\n") == []  # a header without a path: nothing to scan
    assert V.tamper_findings(diff("calc/__pycache__/core.cpython-312.pyc", None, "x"))


async def test_a_patch_that_breaks_an_import_is_a_plain_failure(project):
    """A collection error stops pytest before the canaries run (exit 2): no claim of success to refute, so the
    verdict is scored 0, not tampered; the same early stop with every listed test forged as passed is not excused."""
    broken = await verify_patch(instance(project), GOLD + diff("calc/broken.py", None, "x = (\n") + diff(
        "calc/__init__.py", "", "from . import broken  # noqa\n"))
    assert (broken.reward, broken.outcome) == (0.0, "scored") and "control" not in broken.metrics, broken
    main = V.Attempt("tests", V.TestRun({ADD: "PASSED", NEG: "PASSED"}, "channel", 2, ""),
                     V.Canaries({}, {"test_parse_empty": "FAILED"}))
    assert not V._stopped_early_and_failing(main, [ADD], [NEG], instance(project).data)


def test_canaries_sit_among_the_real_tests_and_touch_what_the_file_imports():
    import random
    import re

    source = ("import os\nfrom calc.core import add, neg\n\n\n@decorate\ndef test_add():\n    assert add(2, 3) == 5\n"
              "\n\nclass TestNeg:\n    def test_neg(self):\n        assert neg(2) == -2\n\n\n"
              "def test_tail():\n    '''\ndef test_inside_a_string():\n'''\n")
    ends = 0
    for seed in range(40):
        rng = random.Random(seed)
        canaries = V.make_canaries({"t.py": source}, rng)
        blocks = canaries.blocks["t.py"]
        text = V.placed(source, blocks, rng)
        assert text is not None and text.count("def test_") == source.count("def test_") + 4
        assert "@decorate\ndef test_add():" in text  # a decorator stays on its function
        assert all(re.search(r"subject = (os|add|neg)\n", b) for b in blocks)
        ends += text.rstrip().endswith(blocks[-1].rstrip())
        namespace = {"decorate": lambda f: f}
        exec(compile(text.replace("from calc.core import add, neg", "add = neg = abs"), "t.py", "exec"),  # noqa: S102
             namespace)
        assert set(canaries.expect) <= {n for n in namespace if n.startswith("test_")}
    assert ends < 40  # not always at the end
    assert V.placed("print 'python 2'\n", ["def test_x():\n    pass\n"], random.Random(0)) is None


async def test_gold_1_under_a_configuration_that_turns_warnings_into_errors(project):
    """The launcher loads the channel plugin before the workspace is importable and hands it to pytest as an
    object: named with ``-p`` it would be a module pytest cannot rewrite, a warning, an error here."""
    strict = instance(project, test_patch=diff("pytest.ini", None, "[pytest]\nfilterwarnings =\n    error\n"))
    gold = await verify_patch(strict, GOLD)
    assert (gold.reward, gold.outcome) == (1.0, "scored"), gold
