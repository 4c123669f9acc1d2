"""No test skips in CI unnoticed: under SKYRL_CI_NO_SKIPS=1 the pytest plugin ``skyrl_core.testing`` turns every skip
(in a test, in its set-up, or of a whole module at collection) into a failure naming the reason, unless
``.ci/allowed-skips.txt`` allows it; expected failures stay what they are. Each case runs a real pytest subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from skyrl_core.testing import REPO, read_allowed_skips, require_sandbox, skip_allowed

CASES = '''
import pytest

def test_needs_a_gpu():
    pytest.skip("no CUDA device")

@pytest.mark.skipif(True, reason="optional server absent")
def test_marked():
    pass

@pytest.mark.xfail(strict=True, reason="known bug")
def test_known_bug():
    assert False

def test_runs():
    assert True
'''


def run_pytest(tmp_path: Path, env: dict, *files: str) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if k not in ("SKYRL_CI_NO_SKIPS", "SKYRL_ALLOWED_SKIPS")}
    full.update(env)
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "skyrl_core.testing", "-q", "-ra",
                           "-p", "no:cacheprovider", *files], cwd=tmp_path, env=full, capture_output=True,
                          text=True, timeout=120)


def test_without_the_variable_a_skip_stays_a_skip(tmp_path):
    (tmp_path / "test_cases.py").write_text(CASES)
    proc = run_pytest(tmp_path, {}, "test_cases.py")
    assert proc.returncode == 0, proc.stdout
    assert "1 passed, 2 skipped, 1 xfailed" in proc.stdout
    assert "SKIPPED [1] test_cases.py:5: no CUDA device" in proc.stdout  # -ra names every skip with its reason


def test_in_ci_every_skip_fails_with_its_reason_unless_allowed(tmp_path):
    (tmp_path / "test_cases.py").write_text(CASES)
    (tmp_path / "test_module.py").write_text("import pytest\npytest.importorskip('no_such_package_anywhere')\n")
    allow = tmp_path / "allowed.txt"
    allow.write_text("# comment\n*test_cases.py | optional server absent | a documented optional server\n")
    proc = run_pytest(tmp_path, {"SKYRL_CI_NO_SKIPS": "1", "SKYRL_ALLOWED_SKIPS": str(allow)},
                      "test_cases.py", "test_module.py")
    assert proc.returncode == 1, proc.stdout
    assert "skipped in CI (SKYRL_CI_NO_SKIPS=1): no CUDA device" in proc.stdout
    assert "modules skipped at collection in CI" in proc.stdout
    assert "skipped in CI (SKYRL_CI_NO_SKIPS=1): could not import 'no_such_package_anywhere'" in proc.stdout
    assert "FAILED test_cases.py::test_needs_a_gpu" in proc.stdout
    # the rest of the suite still ran: the allowed skip, the expected failure, the passing test
    assert "1 failed, 1 passed, 2 skipped, 1 xfailed" in proc.stdout


def test_the_allow_list_says_why_for_every_entry(tmp_path):
    entries = read_allowed_skips(REPO / ".ci" / "allowed-skips.txt")
    assert entries and all(len(why) > 20 for _glob, _reason, why in entries)
    assert skip_allowed("plugins/swe/tests/docker/test_docker_eval.py", "no Docker engine answers (x)", entries)
    assert not skip_allowed("tests/test_serve.py", "no Docker engine answers", entries)
    bad = tmp_path / "bad.txt"
    bad.write_text("tests/* | some reason\n")
    with pytest.raises(ValueError, match="bad.txt:1: expected 'PATH-GLOB | REASON-SUBSTRING | why'"):
        read_allowed_skips(bad)


def test_ci_runs_every_suite_with_the_plugin_and_the_variable():
    script = (REPO / ".ci" / "run").read_text()
    assert "export SKYRL_CI_NO_SKIPS=1" in script
    # run_pytest (the core suite and every plugin suite in the shared venv) and the security suite as a normal user
    assert script.count("-p skyrl_core.testing") >= 2


def test_the_own_environment_suites_fail_an_unallowed_skip_too():
    """The suites in their own venvs (each plugin's ci.sh, the vllm engine's) run pytest with the plugin as well:
    without it a GPU-only test skipped there unnoticed while the shared-venv suites failed every skip."""
    scripts = sorted(REPO.glob("plugins/*/ci.sh")) + [REPO / "scripts" / "ci-vllm.sh"]
    assert len(scripts) >= 5
    for script in scripts:
        lines = [line for line in script.read_text().splitlines()
                 if "-m pytest" in line and not line.lstrip().startswith("#")]
        assert lines, f"{script.relative_to(REPO)} runs no pytest"
        for line in lines:
            assert "-p skyrl_core.testing" in line, f"{script.relative_to(REPO)}: {line.strip()}"


def test_no_test_needs_a_gpu_ci_never_has():
    """A test that needs CUDA could only ever skip in CI (#31 item 7): GPU checks are device scripts
    (plugins/*/device/), not tests."""
    offenders = []
    for path in sorted(REPO.glob("**/tests/**/test_*.py")):
        if path == Path(__file__) or any(part.startswith(".") or part in ("site", "build")
                                         for part in path.relative_to(REPO).parts):
            continue
        text = path.read_text(errors="replace")
        if "mark.gpu" in text or "no CUDA GPU" in text:
            offenders.append(str(path.relative_to(REPO)))
    assert not offenders, offenders


def test_require_sandbox_fails_when_ci_requires_the_sandbox(monkeypatch):
    from skyrl_core.default_plugins.runtimes.sandbox import LocalSandbox

    # the registered sandbox runtime's contract member says why it cannot start
    problem = "bwrap: setting up uid map: Permission denied"
    monkeypatch.setattr(LocalSandbox, "unavailable", staticmethod(lambda: problem))
    monkeypatch.setenv("SKYRL_REQUIRE_SANDBOX", "1")
    with pytest.raises(pytest.fail.Exception, match="SKYRL_REQUIRE_SANDBOX=1 but the sandbox is unavailable: bwrap"):
        require_sandbox()
    monkeypatch.setenv("SKYRL_REQUIRE_SANDBOX", "0")
    with pytest.raises(pytest.skip.Exception, match="Permission denied"):
        require_sandbox()
