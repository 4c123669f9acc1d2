"""The ``swe_tests`` verifier: reward 1 when the agent's patch makes every FAIL_TO_PASS and PASS_TO_PASS test pass.

Procedure (the SWE-bench harness's, with the agent's ways around it closed; docs/runtimes.md):

1. the agent's patch is the diff of its workspace against the pristine commit, computed on the host against a
   git directory outside the workspace (``SweSandbox.diff``);
2. from it, drop every file the test run would load that is not the fix — test files, files the instance's test
   patch touches, ``conftest.py``, ``sitecustomize``/``usercustomize`` (file or package), ``.pth`` files, and the
   files that hold test-runner configuration (``pytest.ini``, ``.pytest.ini``, ``tox.ini``, ``setup.cfg``,
   ``pyproject.toml``, ``noxfile.py``) — and record them in the metrics: every test and test-configuration file
   is therefore the pristine one;
3. apply the rest, inside a fresh sandbox holding a pristine copy, then the instance's test patch;
4. run the tests named by FAIL_TO_PASS and PASS_TO_PASS (their files) with the repository's runner, host pytest
   plugins off (``PYTEST_DISABLE_PLUGIN_AUTOLOAD``, unless the row sets ``pytest_autoload``), and read per-test
   results from a pipe the sandbox has no file for (:mod:`skyrl_swe.result_channel`), cross-checked against the
   collected test ids and pytest's exit status; Django's ``runtests.py`` result lines are cross-checked against
   its ``Ran N tests`` count and exit code. Any inconsistency is ``error_eval`` with the reason, reward 0.
"""

from __future__ import annotations

import asyncio
import logging
import re
import uuid
from pathlib import Path, PurePosixPath
from typing import Any

import attrs

from skyrl_core import Instance, VerifierResult
from skyrl_core.runtime import RuntimeSpec

from .grading import (ERROR, FAILED, MISSING, PASSED, SKIPPED, convention_of, django_labels, grade_tests,  # noqa: F401
                      lookup, parse_django, parse_junit, parse_pytest_summary)
from .runtime import (MAX_PATCH_BYTES, EnvironmentBuildError, PatchTooLarge, RepoUnavailable, SweSandbox,
                      ensure_prepared)

log = logging.getLogger(__name__)

# files the test runner reads besides the code under test (configuration, start-up hooks): never taken from the agent
RUNNER_LOADED = {"conftest.py", "sitecustomize.py", "usercustomize.py", "pytest.ini", ".pytest.ini", "tox.ini",
                 "noxfile.py", "setup.cfg", "pyproject.toml", "pytest.toml", ".pytest.toml"}
STARTUP_PACKAGES = {"sitecustomize", "usercustomize"}
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


_C_ESCAPES = {"a": 7, "b": 8, "t": 9, "n": 10, "v": 11, "f": 12, "r": 13, '"': 34, "\\": 92}


def _git_token(text: str) -> tuple[str, str]:
    """The first path token of ``text`` as git writes it -> (path, rest). A name git quotes (a tab, a quote, a
    backslash, a newline; non-ASCII bytes unless ``core.quotepath=off``) is ``"..."`` with C escapes and octal
    bytes; any other name runs to the end (the caller splits unquoted pairs)."""
    if not text.startswith('"'):
        return text, ""
    out, i = bytearray(), 1
    while i < len(text) and text[i] != '"':
        if text[i] == "\\" and i + 1 < len(text):
            nxt = text[i + 1]
            if nxt in "01234567":
                out.append(int(text[i + 1:i + 4], 8) & 0xFF)
                i += 4
                continue
            out.append(_C_ESCAPES.get(nxt, ord(nxt) & 0xFF))
            i += 2
            continue
        out += text[i].encode()
        i += 1
    return out.decode("utf-8", "replace"), text[i + 1:].lstrip(" ")


def _strip_side(path: str) -> str:
    return path[2:] if path[:2] in ("a/", "b/") else path


def _header_path(header: str) -> str:
    """The (new) path of a ``diff --git a/X b/Y`` header, quoted names included; for two unquoted names with
    spaces, the split where both sides name the same file."""
    rest = header[len("diff --git "):]
    if rest.startswith('"'):
        first, rest = _git_token(rest)
        return _strip_side(_git_token(rest)[0]) if rest else _strip_side(first)
    if rest.endswith('"') and ' "' in rest:
        return _strip_side(_git_token(rest[rest.index(' "') + 1:])[0])
    half = (len(rest) - 1) // 2
    if rest[:half][2:] == rest[half + 1:][2:] and rest[half] == " ":
        return rest[half + 1:][2:]
    m = re.match(r"a/(.*) b/(.*)$", rest)
    return m.group(2) if m else rest


def _chunk(lines: list[str]) -> tuple[str, str]:
    header = lines[0].rstrip("\n")
    path = ""
    for line in lines[1:8]:
        line = line.rstrip("\n")
        if line.startswith(("+++ b/", '+++ "b/')):
            # git ends a name holding a space with a tab on these lines; a quoted name is unquoted
            path = _strip_side(_git_token(line[4:])[0]) if line[4] == '"' else line[6:].rstrip("\t")
        elif line.startswith(("--- a/", '--- "a/')) and not path:
            path = _strip_side(_git_token(line[4:])[0]) if line[4] == '"' else line[6:].rstrip("\t")
        elif line.startswith(("rename to ", "copy to ")):
            path = _git_token(line.split(" to ", 1)[1])[0]
        elif line.startswith("@@"):
            break
    return path or _header_path(header), "".join(lines)


def is_test_file(path: str) -> bool:
    p = PurePosixPath(path)
    name = p.name
    return (name.startswith("test_") or name.endswith(("_test.py", "_tests.py")) or name == "tests.py"
            or any(part in ("tests", "test", "testing") for part in p.parts[:-1]))


_GITLINK = re.compile(r"^(?:new file |deleted file |old |new )?mode 160000$|^index \w+\.\.\w+ 160000$", re.M)


def filter_patch(patch: str, protected: set[str]) -> tuple[str, list[str]]:
    """The agent's patch without files the test run would load besides the fix; returns (patch, dropped paths)."""
    kept, dropped = [], []
    for path, chunk in split_patch(patch):
        name = PurePosixPath(path).name
        parts = set(PurePosixPath(path).parts[:-1])
        if (path in protected or name in RUNNER_LOADED or name.endswith(".pth") or is_test_file(path)
                or parts & STARTUP_PACKAGES or ".git" in parts
                or name == ".gitmodules" or _GITLINK.search(chunk[:1000])):  # submodules: never the fix
            dropped.append(path)
        else:
            kept.append(chunk)
    return "".join(kept), dropped


async def apply_patch(runtime: Any, patch: str) -> tuple[bool, str]:
    """Apply ``patch`` inside ``runtime`` (never on the host: the patch is agent-written) with ``git apply``,
    falling back to ``patch -p1 --fuzz 3``; returns (ok, message)."""
    if not patch.strip():
        return True, "empty patch"
    if not patch.endswith("\n"):
        patch += "\n"
    name = f".skyrl-{uuid.uuid4().hex[:8]}.patch"
    await runtime.write_file(name, patch)
    try:
        res = await runtime.exec(["git", "apply", "--whitespace=nowarn", name], timeout_s=120)
        if res.exit_code == 0:
            return True, "git apply"
        fallback = await runtime.exec(["patch", "-p1", "--batch", "--fuzz=3", "-f", "-i", name], timeout_s=120)
        if fallback.exit_code == 0:
            return True, "patch --fuzz"
        return False, res.output.strip()[:2000]
    finally:
        await runtime.exec(["rm", "-f", name], timeout_s=30)


async def rebuild(runtime: Any, data: dict) -> tuple[bool, str]:
    """Run the row's ``rebuild`` step (e.g. ``python setup.py build_ext --inplace``: recompile extensions from the
    patched sources) inside ``runtime``, after the patches and before the tests; (ok, message). The step compiles
    and runs agent-written code, so it only ever runs in the sandbox, offline."""
    step = data.get("rebuild")
    if not step:
        return True, "no rebuild step"
    res = await runtime.exec(step, timeout_s=TEST_TIMEOUT_S, env=getattr(runtime, "tool_env", None) or {})
    if res.exit_code == 0:
        return True, "rebuilt"
    return False, f"exit {res.exit_code}: {res.output.strip()[-2000:]}"


# -- reports: parsing and test-id matching live in grading.py (re-exported here for existing importers) ------------
# -- running tests ---------------------------------------------------------------------------------------------
@attrs.define
class TestRun:
    """Per-test ``results``, which report they came from, the command's exit code, an output excerpt, and
    ``problems``: inconsistencies between the results, the collection and the exit status (any one makes the
    run ``error_eval``)."""

    results: dict[str, str]
    report: str
    exit_code: int | None
    output: str
    problems: list[str] = attrs.Factory(list)


def runner_kind(data: dict) -> str:
    cmd = (data.get("test_cmd") or "").strip()
    if "runtests.py" in cmd or (not cmd and data.get("repo") == "django/django"):
        return "django"
    if not cmd or cmd.startswith(("pytest", "python -m pytest")):
        return "pytest"
    return "command"


def runner_env(data: dict) -> dict[str, str]:
    """Environment for the test command: no plugins autoloaded from the environment (unless the row sets
    ``pytest_autoload``), no options from the environment, no user site-packages."""
    env = {"PYTEST_ADDOPTS": "", "PYTHONNOUSERSITE": "1", "PYTHONDONTWRITEBYTECODE": "1"}
    if not data.get("pytest_autoload"):
        env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    return env


_CHANNEL_DIR: list[str] = []


def channel_dir() -> str:
    """A host directory (one per process, mounted read-only in the sandbox) holding only the result-channel
    plugin, importable as ``skyrl_result_channel``."""
    if not _CHANNEL_DIR:
        import os
        import tempfile

        path = tempfile.mkdtemp(prefix="skyrl-channel-")
        os.chmod(path, 0o755)
        target = Path(path) / "skyrl_result_channel.py"
        target.write_text((Path(__file__).parent / "result_channel.py").read_text())
        target.chmod(0o644)
        _CHANNEL_DIR.append(path)
    return _CHANNEL_DIR[0]


def read_channel(lines: list[str], exit_code: int | None) -> tuple[dict[str, str], list[str]]:
    """Results streamed by :mod:`skyrl_swe.result_channel` -> ({node id: status}, problems). A problem is
    anything a faithful pytest run would not produce: no or several collections, results for tests never
    collected, a test phase reported twice, no or a different exit status, an exit status that disagrees with
    the results, a collected test without a result."""
    import json

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


_DJANGO_RESULT = re.compile(r" \.\.\. (ok|FAIL|ERROR|skipped.*|expected failure|unexpected success)$", re.MULTILINE)
_DJANGO_RAN = re.compile(r"^Ran (\d+) tests? in ", re.MULTILINE)


def django_problems(output: str, results: dict[str, str], exit_code: int | None) -> list[str]:
    """Cross-checks of a Django runner's text: one ``Ran N tests`` line, at most N result lines, and an exit code
    that agrees with them (printed forgeries add lines or a second count)."""
    problems = []
    ran = _DJANGO_RAN.findall(output)
    if len(ran) != 1:
        problems.append(f"the runner printed {len(ran)} 'Ran N tests' lines (expected one)")
    elif len(_DJANGO_RESULT.findall(output)) > int(ran[0]):  # fewer is a docstring or subtest layout, more forged
        problems.append(f"the runner says it ran {ran[0]} tests but printed "
                        f"{len(_DJANGO_RESULT.findall(output))} result lines")
    failed = any(v in (FAILED, ERROR) for v in results.values())
    if exit_code == 0 and failed:
        problems.append("the runner exited 0 although tests failed")
    if exit_code not in (0, None) and results and not failed:
        problems.append(f"the runner exited {exit_code} although every test passed")
    return problems


async def read_channel_while(read_fd: int, write_fd: int, run: Any) -> tuple[Any, list[str]]:
    """Collect the lines arriving on ``read_fd`` (a pipe or FIFO, non-blocking) while ``await run()`` runs; then
    close the host's ``write_fd`` and wait up to 2 s for EOF (a background process of the tests may still hold
    the other end: what came is taken). Closes both descriptors. Returns (run's result, lines)."""
    import os

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


async def _exec_with_channel(runtime: Any, argv: list[str], env: dict[str, str], timeout_s: float):
    """Run ``argv`` with a pipe's write end inherited as ``SKYRL_RESULT_FD``; returns (ExecResult, lines)."""
    import os

    read_fd, write_fd = os.pipe()
    os.set_blocking(read_fd, False)
    return await read_channel_while(read_fd, write_fd, lambda: runtime.exec(
        argv, timeout_s=timeout_s, env={**env, "SKYRL_RESULT_FD": str(write_fd)}, pass_fds=(write_fd,)))


async def run_tests(runtime: Any, data: dict, tests: list[str], timeout_s: float = TEST_TIMEOUT_S) -> TestRun:
    """Run ``tests`` in ``runtime`` (whose workspace holds the patched repository) and collect per-test results
    with the cross-checks of :func:`read_channel` / :func:`django_problems`."""
    kind = runner_kind(data)
    env = runner_env(data)
    if kind == "django":
        labels = django_labels(tests, data.get("test_patch") or "")
        res = await runtime.exec(["python", "tests/runtests.py", "--verbosity", "2", "--settings=test_sqlite",
                                  "--parallel", "1", *labels], timeout_s=timeout_s, env=env)
        results = parse_django(res.output)
        return TestRun(results, "django", res.exit_code, res.output[-4000:],
                       django_problems(res.output, results, res.exit_code))
    if kind == "command":
        res = await runtime.exec(data["test_cmd"], timeout_s=timeout_s, env=env)
        return TestRun(parse_pytest_summary(res.output), "text", res.exit_code, res.output[-4000:])
    files = list(dict.fromkeys(t.split("::", 1)[0] for t in tests if "::" in t or t.endswith(".py")))
    base = (data.get("test_cmd") or "python -m pytest").split()
    if base[0] == "pytest":
        base = ["python", "-m", "pytest", *base[1:]]
    plugins = [a for p in data.get("pytest_plugins") or [] for a in ("-p", str(p))]
    argv = [*base, "-p", "no:cacheprovider", *plugins, "-q", *files]
    channel_argv = [*argv[:len(base)], "-p", "skyrl_result_channel", *argv[len(base):]]
    if hasattr(runtime, "exec_with_channel"):  # docker: a FIFO only the container's root shell can open
        env["PYTHONPATH"] = ":".join(filter(None, [runtime.channel_path, runtime.tool_env.get("PYTHONPATH")]))
        res, lines = await runtime.exec_with_channel(channel_argv, env, timeout_s)
    else:
        if channel_dir() not in runtime.ro_paths:
            runtime.ro_paths.append(channel_dir())
        env["PYTHONPATH"] = ":".join(filter(None, [channel_dir(), getattr(runtime, "tool_env", {}).get("PYTHONPATH")]))
        res, lines = await _exec_with_channel(runtime, channel_argv, env, timeout_s)
    results, problems = read_channel(lines, res.exit_code)
    # a cut printed output loses nothing (the results come through the channel); every other limit makes the
    # run untrustworthy
    hit = [name for name in res.limits if name != "output"]
    if hit:
        problems.append(f"the test run hit the sandbox's {', '.join(hit)} limit")
    return TestRun(results, "channel", res.exit_code, res.output[-4000:], problems)


def _verification_spec(spec: RuntimeSpec | None, runtime_type: str) -> RuntimeSpec:
    base = spec or RuntimeSpec(type=runtime_type)
    return attrs.evolve(base, cpu_time_s=max(base.cpu_time_s, int(TEST_TIMEOUT_S)),
                        memory_mb=max(base.memory_mb, 4096), workspace=None, source=None, network=False,
                        max_files=max(base.max_files, 1 << 20))  # the patch is bounded by MAX_PATCH_BYTES


async def verify_patch(instance: Instance, patch: str, runtime_cls: type | None = None,
                       spec: RuntimeSpec | None = None) -> VerifierResult:
    """Apply ``patch`` (filtered) and the test patch to a fresh pristine copy and score the instance's tests.
    ``metrics["error_eval"]`` names why a run could not be trusted (reward 0)."""
    data = instance.data
    cls = runtime_cls or SweSandbox
    protected = {p for p, _ in split_patch(data.get("test_patch") or "")}
    if data.get("rebuild"):  # the rebuild step runs setup.py before the tests: it must be the pristine one
        protected |= {"setup.py"}
    if len(patch or "") > MAX_PATCH_BYTES:  # a patch handed in as text (an answer, a predictions file)
        return VerifierResult(reward=0.0, metrics={"model_patch": "", "patch_applied": False, "error": (
            f"the patch has {len(patch)} characters, over the bound of {MAX_PATCH_BYTES}")})
    kept, dropped = filter_patch(patch or "", protected)
    metrics: dict[str, Any] = {"model_patch": patch or "", "dropped_files": dropped, "patch_applied": False}
    f2p, p2p = list(data.get("FAIL_TO_PASS") or []), list(data.get("PASS_TO_PASS") or [])
    if not f2p and not p2p:
        metrics["error"] = "the instance lists no FAIL_TO_PASS or PASS_TO_PASS tests"
        return VerifierResult(reward=0.0, metrics=metrics)
    check = cls(_verification_spec(spec, getattr(cls, "name", "swe_sandbox")), instance=instance)
    if hasattr(check, "result_channel"):  # docker: mount the channel into this fresh container
        check.result_channel = True
    try:
        try:
            await check.start()
            await ensure_prepared(check, instance)
        except (EnvironmentBuildError, RepoUnavailable) as exc:  # the row's environment, not the agent: no verdict
            metrics["error"] = f"unverifiable: {exc}"
            return VerifierResult.unverifiable(f"the instance's environment could not be built: {exc}", metrics)
        ok, how = await apply_patch(check, kept)
        metrics["patch_applied"] = ok
        if not ok:
            metrics["error"] = f"the agent's patch does not apply: {how}"
            return VerifierResult(reward=0.0, metrics=metrics)
        ok, how = await apply_patch(check, data.get("test_patch") or "")
        if not ok:
            metrics["error"] = f"the instance's test patch does not apply after the agent's patch: {how}"
            return VerifierResult(reward=0.0, metrics=metrics)
        ok, how = await rebuild(check, data)
        if not ok:
            metrics["error"] = f"the rebuild step failed after the patches: {how}"
            return VerifierResult(reward=0.0, metrics=metrics)
        run = await run_tests(check, data, f2p + p2p)
    finally:
        await check.close()
    grade = grade_tests(run.results, f2p, p2p, convention_of(data))
    metrics.update({**grade.metrics(), "report": run.report, "test_exit_code": run.exit_code})
    metrics["resolved"] = bool(metrics["resolved"]) and not run.problems
    if run.problems:
        metrics["error_eval"] = "; ".join(run.problems)
        metrics["error"] = f"error_eval: {metrics['error_eval']}"
    if not run.results or run.problems:
        metrics["test_output"] = run.output
    return VerifierResult(reward=1.0 if metrics["resolved"] else 0.0, metrics=metrics)


async def swe_tests(trajectory: Any, runtime: Any, instance: Instance) -> VerifierResult:
    """The registered verifier ``(trajectory, runtime, instance) -> VerifierResult`` (see the module doc)."""
    patch = ""
    if getattr(trajectory, "finish_reason", None) == "error_runtime":  # its container is gone: nothing to score
        return VerifierResult(reward=0.0, metrics={"model_patch": "", "patch_applied": False,
                                                   "error": f"error_runtime: {trajectory.error}"})
    if runtime is not None and getattr(runtime, "prepared", False) and hasattr(runtime, "diff"):
        try:
            patch = await runtime.diff()
        except PatchTooLarge as exc:  # the agent's own changes: scored 0, with the reason
            return VerifierResult(reward=0.0, metrics={"model_patch": "", "patch_applied": False, "error": str(exc)})
    elif isinstance(getattr(trajectory, "answer", None), str):
        patch = trajectory.answer
    runtime_cls = type(runtime) if runtime is not None and hasattr(runtime, "prepare") else None
    try:
        result = await verify_patch(instance, patch, runtime_cls, getattr(runtime, "spec", None))
    except Exception as exc:  # a broken test run scores 0 but keeps the patch (the predictions file needs it)
        log.warning("instance %s: verification failed: %s: %s", instance.id, type(exc).__name__, exc)
        result = VerifierResult(reward=0.0, metrics={"model_patch": patch, "patch_applied": False,
                                                     "error": f"verification failed: {type(exc).__name__}: {exc}"})
    hits = getattr(runtime, "limit_hits", None)
    if hits:
        result.metrics["runtime_limits"] = dict(hits)
    return result
