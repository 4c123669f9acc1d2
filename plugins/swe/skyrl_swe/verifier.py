"""The ``swe_tests`` verifier: reward 1 when the agent's patch makes every FAIL_TO_PASS and PASS_TO_PASS test pass.

Procedure (the SWE-bench harness's, with the agent's ways around it closed):

1. the agent's patch is the ``git diff`` of its workspace against the pristine HEAD;
2. from it, drop every file the test run would load that is not the fix — test files, files the instance's test
   patch touches, ``conftest.py``, ``sitecustomize.py``/``usercustomize.py``, ``.pth`` files, pytest
   configuration (``pytest.ini``, ``tox.ini``) — and record them in the metrics;
3. apply the rest to a fresh copy of the pristine repository in a new runtime of the same kind, then the
   instance's test patch;
4. run the tests named by FAIL_TO_PASS and PASS_TO_PASS (their files) with the repository's runner and read
   per-test results from the runner's own report — pytest's JUnit XML file, not text the code under test could
   print. Django's ``runtests.py`` has no report file; its verbosity-2 result lines are parsed instead (marked
   ``report: "django"`` in the metrics).
"""

from __future__ import annotations

import asyncio
import logging
import re
import shutil
import subprocess
import uuid
import xml.etree.ElementTree as ET
from pathlib import Path, PurePosixPath
from typing import Any

import attrs

from skyrl_core import Instance, VerifierResult
from skyrl_core.runtime import RuntimeSpec

from .grading import (ERROR, FAILED, MISSING, PASSED, SKIPPED, convention_of, django_labels, grade_tests,  # noqa: F401
                      lookup, parse_django, parse_junit, parse_pytest_summary)
from .runtime import SweSandbox, ensure_prepared

log = logging.getLogger(__name__)

RUNNER_LOADED = {"conftest.py", "sitecustomize.py", "usercustomize.py", "pytest.ini", "tox.ini", "noxfile.py"}
TEST_TIMEOUT_S = 1800.0


# -- patches -----------------------------------------------------------------------------------------------------
def split_patch(patch: str) -> list[tuple[str, str]]:
    """A unified git diff split per file: ``[(path, chunk)]`` (the b/ path, or a/ for deletions)."""
    chunks: list[tuple[str, str]] = []
    current: list[str] = []
    for line in patch.splitlines(keepends=True):
        if line.startswith("diff --git ") and current:
            chunks.append(_chunk(current))
            current = []
        current.append(line)
    if current and current[0].startswith("diff --git "):
        chunks.append(_chunk(current))
    return chunks


def _chunk(lines: list[str]) -> tuple[str, str]:
    header = lines[0].rstrip("\n")
    path = ""
    for line in lines[1:6]:
        if line.startswith("+++ b/"):
            path = line[6:].rstrip("\n")
        elif line.startswith("--- a/") and not path:
            path = line[6:].rstrip("\n")
        elif line.startswith("rename to "):
            path = line[len("rename to "):].rstrip("\n")
    if not path:
        m = re.match(r"diff --git a/(.*) b/(.*)$", header)
        path = m.group(2) if m else header
    return path, "".join(lines)


def is_test_file(path: str) -> bool:
    p = PurePosixPath(path)
    name = p.name
    return (name.startswith("test_") or name.endswith(("_test.py", "_tests.py")) or name == "tests.py"
            or any(part in ("tests", "test", "testing") for part in p.parts[:-1]))


def filter_patch(patch: str, protected: set[str]) -> tuple[str, list[str]]:
    """The agent's patch without files the test run would load besides the fix; returns (patch, dropped paths)."""
    kept, dropped = [], []
    for path, chunk in split_patch(patch):
        name = PurePosixPath(path).name
        if (path in protected or name in RUNNER_LOADED or name.endswith(".pth") or is_test_file(path)):
            dropped.append(path)
        else:
            kept.append(chunk)
    return "".join(kept), dropped


def apply_patch(workdir: Path, patch: str) -> tuple[bool, str]:
    """``git apply`` (falling back to ``patch -p1 --fuzz 3``) in ``workdir``; returns (ok, message)."""
    if not patch.strip():
        return True, "empty patch"
    if not patch.endswith("\n"):
        patch += "\n"
    proc = subprocess.run(["git", "apply", "--whitespace=nowarn", "-"], cwd=workdir, input=patch.encode(),
                          capture_output=True)
    if proc.returncode == 0:
        return True, "git apply"
    if shutil.which("patch"):
        fallback = subprocess.run(["patch", "-p1", "--batch", "--fuzz=3", "-f"], cwd=workdir, input=patch.encode(),
                                  capture_output=True)
        if fallback.returncode == 0:
            return True, "patch --fuzz"
    return False, proc.stderr.decode("utf-8", "replace").strip()[:2000]


# -- reports: parsing and test-id matching live in grading.py (re-exported here for existing importers) ------------
# -- running tests ---------------------------------------------------------------------------------------------
@attrs.define
class TestRun:
    """Per-test ``results``, which report they came from, the command's exit code and an output excerpt."""

    results: dict[str, str]
    report: str
    exit_code: int | None
    output: str


def runner_kind(data: dict) -> str:
    cmd = (data.get("test_cmd") or "").strip()
    if "runtests.py" in cmd or (not cmd and data.get("repo") == "django/django"):
        return "django"
    if not cmd or cmd.startswith(("pytest", "python -m pytest")):
        return "pytest"
    return "command"


async def run_tests(runtime: Any, data: dict, tests: list[str], timeout_s: float = TEST_TIMEOUT_S) -> TestRun:
    """Run ``tests`` in ``runtime`` (whose workspace holds the patched repository) and collect per-test results."""
    kind = runner_kind(data)
    if kind == "django":
        labels = django_labels(tests, data.get("test_patch") or "")
        res = await runtime.exec(["python", "tests/runtests.py", "--verbosity", "2", "--settings=test_sqlite",
                                  "--parallel", "1", *labels], timeout_s=timeout_s)
        return TestRun(parse_django(res.output), "django", res.exit_code, res.output[-4000:])
    if kind == "command":
        res = await runtime.exec(data["test_cmd"], timeout_s=timeout_s)
        return TestRun(parse_pytest_summary(res.output), "text", res.exit_code, res.output[-4000:])
    files = list(dict.fromkeys(t.split("::", 1)[0] for t in tests if "::" in t or t.endswith(".py")))
    report_dir = f".skyrl-report-{uuid.uuid4().hex[:8]}"
    report = f"{report_dir}/junit.xml"
    base = (data.get("test_cmd") or "python -m pytest").split()
    if base[0] == "pytest":
        base = ["python", "-m", "pytest", *base[1:]]
    argv = [*base, "-p", "no:cacheprovider", "-q", "-o", "junit_family=xunit1", f"--junitxml={report}", *files]
    res = await runtime.exec(argv, timeout_s=timeout_s)
    host = Path(runtime.workspace) / report
    try:
        xml_text = await asyncio.to_thread(host.read_text, encoding="utf-8")
        results = parse_junit(xml_text)
    except (OSError, ET.ParseError) as exc:
        log.warning("no JUnit report from the test run (%s); exit %s", exc, res.exit_code)
        results = {}
    finally:
        await asyncio.to_thread(shutil.rmtree, Path(runtime.workspace) / report_dir, True)
    return TestRun(results, "junit", res.exit_code, res.output[-4000:])


def _verification_spec(spec: RuntimeSpec | None, runtime_type: str) -> RuntimeSpec:
    base = spec or RuntimeSpec(type=runtime_type)
    return attrs.evolve(base, cpu_time_s=max(base.cpu_time_s, int(TEST_TIMEOUT_S)),
                        memory_mb=max(base.memory_mb, 4096), workspace=None, source=None)


async def verify_patch(instance: Instance, patch: str, runtime_cls: type | None = None,
                       spec: RuntimeSpec | None = None) -> VerifierResult:
    """Apply ``patch`` (filtered) and the test patch to a fresh pristine copy and score the instance's tests."""
    data = instance.data
    cls = runtime_cls or SweSandbox
    protected = {p for p, _ in split_patch(data.get("test_patch") or "")}
    kept, dropped = filter_patch(patch or "", protected)
    metrics: dict[str, Any] = {"model_patch": patch or "", "dropped_files": dropped, "patch_applied": False}
    f2p, p2p = list(data.get("FAIL_TO_PASS") or []), list(data.get("PASS_TO_PASS") or [])
    if not f2p and not p2p:
        metrics["error"] = "the instance lists no FAIL_TO_PASS or PASS_TO_PASS tests"
        return VerifierResult(reward=0.0, metrics=metrics)
    check = cls(_verification_spec(spec, getattr(cls, "name", "swe_sandbox")), instance=instance)
    try:
        await check.start()
        await ensure_prepared(check, instance)
        ok, how = await asyncio.to_thread(apply_patch, Path(check.workspace), kept)
        metrics["patch_applied"] = ok
        if not ok:
            metrics["error"] = f"the agent's patch does not apply: {how}"
            return VerifierResult(reward=0.0, metrics=metrics)
        ok, how = await asyncio.to_thread(apply_patch, Path(check.workspace), data.get("test_patch") or "")
        if not ok:
            metrics["error"] = f"the instance's test patch does not apply after the agent's patch: {how}"
            return VerifierResult(reward=0.0, metrics=metrics)
        run = await run_tests(check, data, f2p + p2p)
    finally:
        await check.close()
    grade = grade_tests(run.results, f2p, p2p, convention_of(data))
    metrics.update({**grade.metrics(), "report": run.report, "test_exit_code": run.exit_code})
    if not run.results:
        metrics["test_output"] = run.output
    return VerifierResult(reward=1.0 if metrics["resolved"] else 0.0, metrics=metrics)


async def swe_tests(trajectory: Any, runtime: Any, instance: Instance) -> VerifierResult:
    """The registered verifier ``(trajectory, runtime, instance) -> VerifierResult`` (see the module doc)."""
    patch = ""
    if runtime is not None and getattr(runtime, "prepared", False) and hasattr(runtime, "diff"):
        patch = await runtime.diff()
    elif isinstance(getattr(trajectory, "answer", None), str):
        patch = trajectory.answer
    runtime_cls = type(runtime) if runtime is not None and hasattr(runtime, "prepare") else None
    try:
        return await verify_patch(instance, patch, runtime_cls, getattr(runtime, "spec", None))
    except Exception as exc:  # a broken test run scores 0 but keeps the patch (the predictions file needs it)
        log.warning("instance %s: verification failed: %s: %s", instance.id, type(exc).__name__, exc)
        return VerifierResult(reward=0.0, metrics={"model_patch": patch, "patch_applied": False,
                                                   "error": f"verification failed: {type(exc).__name__}: {exc}"})
