"""The host's end of the verifier's result channel (the sandbox's end is :mod:`skyrl_swe.result_channel`, a pytest
plugin copied into a directory the sandbox or container mounts read-only): writing that plugin and the runner
launcher out, collecting the JSON lines a test run streams through a pipe or FIFO, and reading them into per-test
statuses with every cross-check a faithful pytest run passes (docs/runtimes.md, "Verifier outcomes").

A leaf module (the grading statuses only), shared by the ``swe_tests`` verifier and the docker runtime."""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from .grading import ERROR, FAILED, PASSED, SKIPPED

_CHANNEL_DIR: list[str] = []
# what a channel directory holds: {name there: source module}: the result-channel plugin and the launcher
CHANNEL_FILES = {"skyrl_result_channel.py": "result_channel.py", "skyrl_launcher.py": "launcher.py"}


def write_channel_files(directory: Path) -> None:
    """Write the result-channel plugin and the runner launcher (:mod:`skyrl_swe.launcher`) into ``directory``
    (a host directory a sandbox or container mounts read-only), world-readable."""
    for name, source in CHANNEL_FILES.items():
        target = directory / name
        target.write_text((Path(__file__).parent / source).read_text())
        target.chmod(0o644)


def channel_dir() -> str:
    """A host directory (one per process, mounted read-only in the sandbox) holding only the result-channel
    plugin, importable as ``skyrl_result_channel``."""
    if not _CHANNEL_DIR:
        path = tempfile.mkdtemp(prefix="skyrl-channel-")
        os.chmod(path, 0o755)
        write_channel_files(Path(path))
        _CHANNEL_DIR.append(path)
    return _CHANNEL_DIR[0]


def read_channel(lines: list[str], exit_code: int | None) -> tuple[dict[str, str], list[str]]:
    """Results streamed by :mod:`skyrl_swe.result_channel` -> ({node id: status}, problems). A problem is
    anything a faithful pytest run would not produce: no or several collections, results for tests never
    collected, a test phase reported twice, no or a different exit status, an exit status that disagrees with
    the results, a collected test without a result."""
    problems: list[str] = []
    collected: list[str] | None = None
    phases: dict[tuple[str, str], dict] = {}
    finish: list[int] = []
    failed_subtests: set[str] = set()
    for line in lines:
        try:
            event = json.loads(line)
            kind = event["event"]
        except (ValueError, KeyError, TypeError):
            problems.append(f"an unreadable line on the result channel: {line[:120]!r}")
            continue
        if kind == "collected":
            if collected is not None:
                problems.append("the collection was reported twice")
            collected = list(event.get("ids") or [])
        elif kind == "report":
            key = (str(event.get("id")), str(event.get("when")))
            if event.get("subtest"):  # several per test (pytest 9 subTest): any failure fails the test
                if event.get("outcome") == "failed":
                    failed_subtests.add(key[0])
                continue
            if key in phases:  # the first report stands; a second one can only be injected
                problems.append(f"the {key[1]} phase of {key[0]} was reported twice")
                continue
            phases[key] = event
        elif kind == "finish":
            finish.append(event.get("exitstatus"))
    if collected is None:
        problems.append("pytest never reported its collection (the run ended early: an exit at import?)")
        collected = []
    known = set(collected)
    results: dict[str, str] = {}
    for (test_id, when), event in phases.items():
        if test_id not in known:
            problems.append(f"a result for {test_id}, which was not collected")
            continue
        outcome, xfail = event.get("outcome"), event.get("xfail")
        if when == "call":
            status = PASSED if outcome == "passed" or (xfail and outcome == "skipped") else (
                SKIPPED if outcome == "skipped" else FAILED)
        elif outcome == "failed":
            status = ERROR
        elif outcome == "skipped":
            status = PASSED if xfail else SKIPPED
        else:
            continue
        if when == "call" and test_id in failed_subtests and status != ERROR:
            status = FAILED  # the test's own call report passes although a subtest failed
        previous = results.get(test_id)
        if previous in (FAILED, ERROR) or (previous == SKIPPED and status == PASSED):
            continue
        results[test_id] = status
    missing = [t for t in collected if t not in results]
    if missing and exit_code not in (2, 3, 4, None):  # interrupted, internal or usage error: a plain failure
        problems.append(f"{len(missing)} collected test(s) have no result (the run stopped early), e.g. {missing[0]}")
    if len(finish) != 1:
        problems.append(f"pytest reported its exit status {len(finish)} times")
    elif finish[0] != exit_code:
        problems.append(f"pytest reported exit status {finish[0]} but the process exited {exit_code}")
    failed = any(v in (FAILED, ERROR) for v in results.values())
    if exit_code == 0 and failed:
        problems.append("the process exited 0 although tests failed")
    if exit_code not in (0, None) and collected and not failed and not missing:
        problems.append(f"the process exited {exit_code} although every collected test passed")
    return results, problems


async def read_channel_while(read_fd: int, write_fd: int, run: Any) -> tuple[Any, list[str]]:
    """Collect the lines arriving on ``read_fd`` (a pipe or FIFO, non-blocking) while ``await run()`` runs; then
    close the host's ``write_fd`` and wait up to 2 s for EOF (a background process of the tests may still hold
    the other end: what came is taken). Closes both descriptors. Returns (run's result, lines)."""
    loop = asyncio.get_running_loop()
    chunks: list[bytes] = []
    eof = loop.create_future()

    def on_readable() -> None:
        try:
            data = os.read(read_fd, 65536)
        except BlockingIOError:
            return
        if data:
            chunks.append(data)
        elif not eof.done():
            eof.set_result(None)

    loop.add_reader(read_fd, on_readable)
    try:
        res = await run()
        os.close(write_fd)
        write_fd = -1
        try:
            await asyncio.wait_for(eof, 2.0)
        except asyncio.TimeoutError:
            pass
    finally:
        loop.remove_reader(read_fd)
        os.close(read_fd)
        if write_fd >= 0:
            os.close(write_fd)
    return res, b"".join(chunks).decode("utf-8", "replace").splitlines()
