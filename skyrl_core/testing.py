"""Test helpers shared by the core's and the plugins' suites, and the pytest plugin CI loads so that no test is
skipped there unnoticed.

``require_sandbox()``: skip a test that needs the bubblewrap sandbox when it cannot start, but fail it when
``SKYRL_REQUIRE_SANDBOX=1`` (CI sets it): a sandbox test never passes CI by skipping.

The plugin (``pytest -p skyrl_core.testing``, which ``.ci/run`` passes to every suite it runs in the shared venv):
with ``SKYRL_CI_NO_SKIPS=1`` every skipped test, and every module skipped at collection, is reported as a failure
naming its reason, unless the allow-list file (``SKYRL_ALLOWED_SKIPS``, else ``.ci/allowed-skips.txt`` at the
repository root) holds a line ``PATH-GLOB | REASON-SUBSTRING | why`` matching the test's path (relative to the
repository root) and its skip reason. Expected failures (xfail) are not skips. Without the variable the plugin
does nothing, so a developer's machine without Docker or a GPU skips as before, naming why (``-ra``).
"""

from __future__ import annotations

import fnmatch
import os
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]


def require_sandbox() -> None:
    """Skip the calling test when the registered ``sandbox`` runtime cannot start (naming why: its ``unavailable``,
    :mod:`skyrl_core.contracts`), or fail it when ``SKYRL_REQUIRE_SANDBOX=1``."""
    from .contracts import member
    from .plugins import get_registry

    unavailable = member(get_registry().get("runtimes", "sandbox"), "runtimes", "unavailable")
    problem = unavailable() if unavailable is not None else None
    if problem:
        if os.environ.get("SKYRL_REQUIRE_SANDBOX") == "1":
            pytest.fail(f"SKYRL_REQUIRE_SANDBOX=1 but the sandbox is unavailable: {problem}")
        pytest.skip(problem)


def read_allowed_skips(path: Path) -> list[tuple[str, str, str]]:
    """``[(path glob, reason substring, why)]`` from an allow-list file; ``#`` starts a comment line. Raises
    ValueError naming the line when one lacks a field (an allow-list entry must say why)."""
    entries = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        parts = [p.strip() for p in line.split("|")]
        if len(parts) != 3 or not all(parts):
            raise ValueError(f"{path}:{n}: expected 'PATH-GLOB | REASON-SUBSTRING | why', got {line!r}")
        entries.append((parts[0], parts[1], parts[2]))
    return entries


def skip_allowed(relpath: str, reason: str, entries: list[tuple[str, str, str]]) -> bool:
    """Whether a skip of the test file ``relpath`` (repository-relative, ``/``-separated) for ``reason`` is on
    the allow-list."""
    return any(fnmatch.fnmatch(relpath, glob) and sub in reason for glob, sub, _why in entries)


def _allow_list() -> list[tuple[str, str, str]]:
    path = Path(os.environ.get("SKYRL_ALLOWED_SKIPS") or REPO / ".ci" / "allowed-skips.txt")
    return read_allowed_skips(path) if path.is_file() else []


def _relpath(fspath: Any) -> str:
    path = Path(str(fspath)).resolve()
    try:
        return path.relative_to(REPO).as_posix()
    except ValueError:
        return path.as_posix()


def _reason(longrepr: Any) -> str:
    text = str(longrepr[2]) if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
    return text.removeprefix("Skipped: ")


def _unallowed_skip(report: Any, fspath: Any) -> str | None:
    """The failure text for a skip CI does not allow, or None (not a skip, not in CI, or allowed)."""
    if os.environ.get("SKYRL_CI_NO_SKIPS") != "1" or not report.skipped or hasattr(report, "wasxfail"):
        return None
    reason = _reason(report.longrepr)
    relpath = _relpath(fspath)
    if skip_allowed(relpath, reason, _allow_list()):
        return None
    return (f"skipped in CI (SKYRL_CI_NO_SKIPS=1): {reason}\n{relpath} must run in CI: make it run, delete it, "
            f"or allow this skip with its reason in .ci/allowed-skips.txt")


_MODULE_SKIPS: list[str] = []  # modules skipped at collection, reported and failed at the end of the session


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: Any, call: Any):
    outcome = yield
    report = outcome.get_result()
    message = _unallowed_skip(report, item.path)
    if message:
        report.outcome = "failed"
        report.longrepr = message


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: Any):
    # a collection error would interrupt the whole suite: the skipped module is counted here, failed at the end
    outcome = yield
    message = _unallowed_skip(outcome.get_result(), getattr(collector, "path", ""))
    if message:
        _MODULE_SKIPS.append(message)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if _MODULE_SKIPS:
        terminalreporter.section("modules skipped at collection in CI", red=True)
        for message in _MODULE_SKIPS:
            terminalreporter.line(message)


def pytest_sessionfinish(session: Any, exitstatus: int) -> None:
    if _MODULE_SKIPS and exitstatus == 0:
        session.exitstatus = 1
