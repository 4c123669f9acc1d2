"""The ``swe_tests`` verifier: reward 1 when the agent's patch makes every FAIL_TO_PASS and PASS_TO_PASS test pass,
under the outcome contract (scored / tampered / unverifiable; docs/runtimes.md, "Verifier outcomes").

Procedure (the SWE-bench harness's, with the agent's ways around it closed; docs/runtimes.md):

1. the agent's patch is the diff of its workspace against the pristine commit, computed on the host against a
   git directory outside the workspace (``SweSandbox.diff``);
2. from it, drop every file the test run would load that is not the fix — test files, files the instance's test
   patch touches, ``conftest.py``, ``sitecustomize``/``usercustomize`` (file or package), ``.pth`` files, and the
   files that hold test-runner configuration (``pytest.ini``, ``.pytest.ini``, ``tox.ini``, ``setup.cfg``,
   ``pyproject.toml``, ``noxfile.py``) — and record them in the metrics: every test and test-configuration file
   is therefore the pristine one; then scan the rest for tampering (:func:`tamper_findings`: compiled files,
   runner shadows, reaches for test internals, the channel, ``/proc``, ``builtins``, exits at import);
3. apply the rest, inside a fresh sandbox holding a pristine copy, then the instance's test patch, then plant
   canary tests beside the real ones (:func:`plant_canaries`);
4. run the tests named by FAIL_TO_PASS and PASS_TO_PASS (their files) with the repository's runner, started by
   :mod:`skyrl_swe.launcher` so the workspace cannot replace it, host pytest plugins off
   (``PYTEST_DISABLE_PLUGIN_AUTOLOAD``, unless the row sets ``pytest_autoload``), and read per-test results from a
   pipe the sandbox has no file for (:mod:`skyrl_swe.result_channel`), cross-checked against the collected test
   ids, pytest's exit status and the canaries' expected statuses; Django's ``runtests.py`` result lines are
   cross-checked against its ``Ran N tests`` count and exit code, a shell runner's ``-rA`` lines for one status per
   id and the exit code;
5. anything inconsistent is re-run as a control on the pristine tree: sound, the agent is blamed (*tampered*);
   broken too, the infrastructure (*unverifiable*).
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

from .channel import channel_dir, read_channel, read_channel_while
from .git_safety import MAX_PATCH_BYTES, PatchTooLarge
from .grading import (ERROR, FAILED, MISSING, PASSED, SKIPPED, convention_of, django_labels, grade_tests,  # noqa: F401
                      lookup, parse_django, parse_junit, parse_pytest_summary)
from .runtime import SweSandbox, ensure_prepared

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


async def _exec_with_channel(runtime: Any, argv: list[str], env: dict[str, str], timeout_s: float):
    """Run ``argv`` with a pipe's write end inherited as ``SKYRL_RESULT_FD``; returns (ExecResult, lines)."""
    import os

    read_fd, write_fd = os.pipe()
    os.set_blocking(read_fd, False)
    return await read_channel_while(read_fd, write_fd, lambda: runtime.exec(
        argv, timeout_s=timeout_s, env={**env, "SKYRL_RESULT_FD": str(write_fd)}, pass_fds=(write_fd,)))


def _launcher_dir(runtime: Any) -> str:
    """Where the channel plugin and the launcher are inside ``runtime`` (mounted read-only for this run)."""
    if hasattr(runtime, "exec_with_channel"):
        return runtime.channel_path
    if channel_dir() not in runtime.ro_paths:
        runtime.ro_paths.append(channel_dir())
    return channel_dir()


def launched(python: str, where: str, mode: str, args: list[str]) -> list[str]:
    """``python`` started so that the workspace cannot replace the runner (:mod:`skyrl_swe.launcher`)."""
    return [python, "-E", "-s", "-S", f"{where}/skyrl_launcher.py", mode, *args]


async def run_tests(runtime: Any, data: dict, tests: list[str], timeout_s: float = TEST_TIMEOUT_S) -> TestRun:
    """Run ``tests`` in ``runtime`` (whose workspace holds the patched repository) and collect per-test results
    with the cross-checks of :func:`read_channel` / :func:`django_problems` / :func:`command_problems`. pytest
    and Django's runner start through the launcher (the workspace is not importable until the runner is loaded)."""
    kind = runner_kind(data)
    env = runner_env(data)
    if kind == "django":
        labels = django_labels(tests, data.get("test_patch") or "")
        where = _launcher_dir(runtime)
        res = await runtime.exec(launched("python", where, "--script", [
            "tests/runtests.py", "--verbosity", "2", "--settings=test_sqlite", "--parallel", "1", *labels]),
            timeout_s=timeout_s, env=env)
        results = parse_django(res.output)
        return TestRun(results, "django", res.exit_code, res.output[-4000:],
                       django_problems(res.output, results, res.exit_code) + _limit_problems(res))
    if kind == "command":
        res = await runtime.exec(data["test_cmd"], timeout_s=timeout_s, env=env)
        results = parse_pytest_summary(res.output)
        return TestRun(results, "text", res.exit_code, res.output[-4000:],
                       command_problems(res.output, results, res.exit_code) + _limit_problems(res))
    files = list(dict.fromkeys(t.split("::", 1)[0] for t in tests if "::" in t or t.endswith(".py")))
    base = (data.get("test_cmd") or "python -m pytest").split()
    options = base[1:] if base[0] == "pytest" else base[3:]
    plugins = [a for p in data.get("pytest_plugins") or [] for a in ("-p", str(p))]
    args = [*options, "-p", "no:cacheprovider", *plugins, "-q", *files]  # the launcher registers the channel
    python = "python" if base[0] == "pytest" else base[0]
    where = _launcher_dir(runtime)
    argv = launched(python, where, "--pytest", args)
    if hasattr(runtime, "exec_with_channel"):  # docker: a FIFO only the container's root shell can open
        env["PYTHONPATH"] = ":".join(filter(None, [runtime.tool_env.get("PYTHONPATH")]))
        res, lines = await runtime.exec_with_channel(argv, env, timeout_s)
    else:
        env["PYTHONPATH"] = ":".join(filter(None, [getattr(runtime, "tool_env", {}).get("PYTHONPATH")]))
        res, lines = await _exec_with_channel(runtime, argv, env, timeout_s)
    results, problems = read_channel(lines, res.exit_code)
    return TestRun(results, "channel", res.exit_code, res.output[-4000:], problems + _limit_problems(res))


def _limit_problems(res: Any) -> list[str]:
    # a cut printed output loses nothing the channel carries; every other limit makes the run untrustworthy
    hit = [name for name in getattr(res, "limits", []) if name != "output"]
    return [f"the test run hit the sandbox's {', '.join(hit)} limit"] if hit else []


def command_problems(output: str, results: dict[str, str], exit_code: int | None) -> list[str]:
    """Cross-checks of a shell ``test_cmd``'s printed ``-rA`` lines: one status per test id (a ``PASSED`` line
    printed at exit beside the real ``FAILED`` one is a forgery) and an exit status that agrees with them."""
    from .grading import _ANSI, _SUMMARY_LINE, _node_id

    # every `STATUS id` line anywhere in the output, not only in pytest's short summary (which the grading
    # parser reads): a line the tested code prints at exit is exactly what this looks for
    seen: dict[str, set[str]] = {}
    for line in _ANSI.sub("", output).splitlines():
        m = _SUMMARY_LINE.match(line.rstrip())
        if m is None:
            continue
        rest = m.group("rest")
        n = _node_id(rest)
        seen.setdefault(rest[:n] if n else rest.split(" - ")[0].strip(), set()).add(m.group("status"))
    problems = [f"{test_id} was reported {' and '.join(sorted(kinds))}"
                for test_id, kinds in seen.items() if len(kinds) > 1][:5]
    failed = any(v in (FAILED, ERROR) for v in results.values())
    if exit_code == 0 and failed:
        problems.append("the test command exited 0 although tests failed")
    if exit_code not in (0, None) and results and not failed:
        problems.append(f"the test command exited {exit_code} although every reported test passed")
    if exit_code is None:
        problems.append("the test command gave no exit status")
    return problems


# -- evidence the tested code cannot fake (docs/runtimes.md, "Verifier outcomes") -----------------------------------
RUNNER_MODULES = {"pytest", "_pytest", "pluggy", "py", "sitecustomize", "usercustomize"}
COMPILED_SUFFIXES = (".pyc", ".pyo", ".so", ".pyd", ".dll", ".dylib")
FRAMEWORK_PARTS = {"_pytest", "pytest", "pluggy"}  # a test framework's own source may name its internals
# (pattern on an added line of a non-test Python file, what it reaches for, framework-internal?)
REACHES = [
    (re.compile(r"\b_pytest\b|\bpytest_runtest_|\bruntest\b|\bpluginmanager\b|\bwasxfail\b|"
                r"sys\.modules\s*\[\s*['\"](?:_?pytest|unittest)"), "test-framework internals", True),
    (re.compile(r"\bTestCase\s*\.\s*\w+\s*=(?!=)|\bAssertionError\s*=(?!=)"), "the test framework's classes", False),
    (re.compile(r"SKYRL_|skyrl_result_channel|skyrl_launcher"), "the verifier's result channel", False),
    (re.compile(r"/proc/(?:self|thread-self|\d+|\{[^}]*\})/(?:environ|fd|mem|maps|cmdline)|/proc/['\"]\s*[+,%]"),
     "the test process's /proc files (its environment, descriptors, memory)", False),
    (re.compile(r"\b(?:builtins|__builtins__)\s*(?:\.\s*\w+\s*=(?!=)|\[[^\]]*\]\s*=(?!=))|"
                r"setattr\(\s*(?:builtins|__builtins__)\b"), "builtins", False),
    (re.compile(r"^(?:@?atexit\.register|os\._exit\s*\(|_exit\s*\(|sys\.exit\s*\(|exit\s*\(|quit\s*\()"),
     "an exit or exit hook at import", False),
    (re.compile(r"\bgc\.get_(?:objects|referrers)\b|\bsys\.set(?:trace|profile)\b"), "the interpreter's objects",
     False),
]


def tamper_findings(patch: str) -> list[str]:
    """Evidence of tampering in the agent's (filtered) patch, one sentence per finding: compiled files (no
    reader can tell what they do; ``sitecustomize.pyc`` runs at interpreter start), new top-level modules named
    like the runner (``pytest.py`` at the root would be ``python -m pytest``), and added lines of non-test Python
    files reaching for the test framework's internals, the result channel, ``/proc``, ``builtins``, exit hooks at
    import, or the interpreter's object graph (:data:`REACHES`). A test framework's own package may name its
    internals. Comment lines are ignored."""
    findings: list[str] = []
    for path, chunk in split_patch(patch):
        pure = PurePosixPath(path)
        if pure.name.endswith(COMPILED_SUFFIXES) or "__pycache__" in pure.parts:
            findings.append(f"{path}: a compiled file")
            continue
        if not pure.parts:
            continue
        new_file = "\nnew file mode" in chunk[:500] or "\n--- /dev/null" in chunk[:500]
        parts = pure.parts[1:] if len(pure.parts) > 1 and pure.parts[0] == "src" else pure.parts
        # a module that can shadow one: ``name.py`` or a regular package ``name/__init__.py`` at the top (a file
        # added inside an existing package, as a fix to pytest itself does, shadows nothing)
        module = (parts[0][:-3] if len(parts) == 1 and parts[0].endswith(".py") else
                  parts[0] if len(parts) == 2 and parts[1] == "__init__.py" else None)
        if new_file and module and (module in RUNNER_MODULES or module.startswith("skyrl_")):
            findings.append(f"{path}: a new module that shadows the test runner ({module})")
            continue
        if not path.endswith(".py"):
            continue
        framework = bool(FRAMEWORK_PARTS & set(pure.parts[:-1]))
        for line in chunk.splitlines():
            if not line.startswith("+") or line.startswith("+++"):
                continue
            code = line[1:]
            if code.lstrip().startswith("#"):
                continue
            for pattern, what, internal in REACHES:
                if internal and framework:
                    continue
                if pattern.search(code):
                    findings.append(f"{path}: reaches for {what}: {code.strip()[:100]!r}")
                    break
    return findings[:10]


# words canary tests are named from when a test file offers too few of its own
CANARY_WORDS = ("value", "default", "empty", "order", "keys", "items", "repr", "format", "parse", "round_trip",
                "unicode", "none", "nested", "copy", "compare", "length", "merge", "update", "sort", "limit")


@attrs.define
class Canaries:
    """Tests the verifier appends to the run's test files at verification time: ``sources`` {file: appended
    source}, ``expect`` {test function name: PASSED or FAILED}. A faithful runner reports every expected status;
    a neutered runner, a rewritten report or a forged stream does not (it cannot tell them from real tests)."""

    sources: dict[str, str]
    expect: dict[str, str]
    blocks: dict[str, list[str]] = attrs.Factory(dict)  # {file: each canary's source}


def _canary_body(rng: Any, passes: bool) -> str:
    a, b, c = rng.sample(range(2, 97), 3)
    word = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(4, 9)))
    kind = rng.randrange(4)
    if kind == 0:
        right, wrong = a * b + c, a * b + c + rng.randint(1, 9)
        return f"    total = {a} * {b} + {c}\n    assert total == {right if passes else wrong}\n"
    if kind == 1:
        items = [a, b, c]
        good = sorted(items)
        bad = [good[0], good[2], good[1]]
        return f"    items = {items!r}\n    assert sorted(items) == {good if passes else bad!r}\n"
    if kind == 2:
        other = word[:-1] + ("x" if word[-1] != "x" else "y")
        return f"    text = {word!r}\n    assert text.upper() == {(word if passes else other).upper()!r}\n"
    expected = len(word) if passes else len(word) + rng.randint(1, 3)
    return f"    name = {word!r}\n    assert len(name) == {expected}\n"


def _module_names(tree: Any) -> list[str]:
    """Names a module binds at its top level by importing (what its tests use of the code under test)."""
    import ast

    names: list[str] = []
    for node in getattr(tree, "body", []):
        if isinstance(node, ast.Import):
            names += [a.asname or a.name.split(".")[0] for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module != "__future__":
            names += [a.asname or a.name for a in node.names if a.name != "*"]
    return [n for n in dict.fromkeys(names) if n.isidentifier() and n not in ("pytest", "unittest")]


def _parse(text: str) -> Any:
    import ast

    try:
        return ast.parse(text)
    except (SyntaxError, ValueError):  # another Python's syntax: the canaries are appended, untouched by ast
        return None


def make_canaries(files: dict[str, str], rng: Any = None, failing: int = 2, passing: int = 2) -> Canaries:
    """Canary tests for test ``files`` ({path: current source}): ``failing`` that must fail and ``passing`` that
    must pass, each named like its neighbours (words of the file's own test names), touching a name the file
    imports (as its real tests touch the code under test), and put in a random file.
    ``rng``: a ``random.Random`` (default: the system's, so nothing in the tree predicts them)."""
    import random

    rng = rng or random.SystemRandom()
    sources: dict[str, list[str]] = {path: [] for path in files}
    expect: dict[str, str] = {}
    taken = {name for text in files.values() for name in re.findall(r"def (test\w*)", text)}
    imported = {path: _module_names(_parse(text)) for path, text in files.items()}
    for passes in [False] * failing + [True] * passing:
        path = rng.choice(sorted(files))
        words = [w for name in re.findall(r"def test_(\w+)", files[path]) for w in name.split("_") if w.isalpha()]
        pool = list(dict.fromkeys(words)) if len(set(words)) >= 6 else list(CANARY_WORDS)
        while True:
            name = "test_" + "_".join(rng.sample(pool, rng.randint(2, 3)))
            if name not in taken:
                break
        taken.add(name)
        expect[name] = PASSED if passes else FAILED
        touch = f"    subject = {rng.choice(imported[path])}\n" if imported[path] else ""
        sources[path].append(f"def {name}():\n{touch}{_canary_body(rng, passes)}")
    return Canaries({p: "".join(f"\n\n{b}" for b in blocks) for p, blocks in sources.items() if blocks}, expect,
                    {p: blocks for p, blocks in sources.items() if blocks})


def placed(text: str, blocks: list[str], rng: Any) -> str | None:
    """``text`` with each canary ``block`` put before a random top-level statement after the imports (so it sits
    among the real tests, not after them); None when that cannot be done safely (the file does not parse here,
    holds undecodable bytes, or the result would not parse with the same top-level names plus the canaries)."""
    import ast

    tree = _parse(text)
    if tree is None or "\ufffd" in text or not blocks:
        return None
    lines = text.splitlines(keepends=True)
    starts = sorted({min([n.lineno] + [d.lineno for d in getattr(n, "decorator_list", [])]) for n in tree.body
                     if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))})
    if not starts:
        return None
    chosen: dict[int, list[str]] = {}
    for block in blocks:
        chosen.setdefault(rng.choice(starts + [len(lines) + 1]), []).append(block)
    out: list[str] = []
    for number, line in enumerate(lines + [""], start=1):
        for block in chosen.get(number, []):
            out.append(("\n" if out and not out[-1].endswith("\n") else "") + block + "\n\n")
        out.append(line)
    result = "".join(out)
    new = _parse(result)
    top = lambda t: [getattr(n, "name", None) for n in t.body]  # noqa: E731
    if new is None or sorted(filter(None, top(new))) != sorted(filter(None, top(tree))) + [] and sorted(
            filter(None, top(new))) != sorted(list(filter(None, top(tree))) + [b.split("(")[0][4:] for b in blocks]):
        return None
    return result


async def plant_canaries(runtime: Any, data: dict, tests: list[str], rng: Any = None) -> Canaries | None:
    """Put canaries (:func:`make_canaries`) among the tests of the pytest files of ``tests`` inside ``runtime``
    (never on the host: the tree holds the agent's patch) — placed between the file's own top-level definitions
    where :func:`placed` can, else appended; None when the run is not a pytest run or no file takes them."""
    import random

    if runner_kind(data) != "pytest":
        return None
    rng = rng or random.SystemRandom()
    paths = list(dict.fromkeys(t.split("::", 1)[0] for t in tests if "::" in t))
    files = {path: text for path in paths[:20] if path.endswith(".py")
             and (text := await _test_file_text(runtime, path)) is not None}
    if not files:
        return None
    canaries = make_canaries(files, rng)
    for path, text in canaries.sources.items():
        whole = placed(files[path], canaries.blocks[path], rng)
        await write_canaries(runtime, path, text if whole is None else whole, append=whole is None)
    return canaries


async def write_canaries(runtime: Any, path: str, text: str, append: bool = True) -> None:
    """Append ``text`` to ``path`` (or replace the file's content with it) inside ``runtime``."""
    script = 'printf "\\n" >> "$1" && cat >> "$1"' if append else 'cat > "$1"'
    res = await runtime.exec(["sh", "-c", script, "skyrl", path], stdin=text, timeout_s=30)
    if res.exit_code != 0:
        raise RuntimeError(f"writing canary tests to {path} failed: {res.output[-500:]}")


async def _test_file_text(runtime: Any, path: str) -> str | None:
    """A test file's whole text: read on the host when the runtime's workspace is here, else (a runtime on
    another node) with ``cat`` inside it — None when it is cut short (output limit) or unreadable."""
    workspace = getattr(runtime, "workspace", None)
    if workspace is not None and Path(workspace).is_dir():
        return await asyncio.to_thread(_read_test_file, workspace, path)
    res = await runtime.exec(["cat", "--", path], timeout_s=30)
    return res.output if res.exit_code == 0 and not res.truncated else None


def _read_test_file(workspace: Path, path: str) -> str | None:
    """A test file's text read on the host, whole (a canary must never reuse a test's name: a second ``def``
    would replace the real test), only when it is a regular file inside the workspace: None otherwise."""
    import os

    root = Path(workspace).resolve()
    target = (root / path).resolve()
    if root not in target.parents:
        return None
    try:
        fd = os.open(target, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as handle:
        import stat

        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            return None
        return handle.read(8 << 20).decode("utf-8", "replace")


def canary_problems(results: dict[str, str], canaries: Canaries | None) -> list[str]:
    """How the run's ``results`` betray a neutered runner or a forged report: a canary without a result, or with
    another status than its own (a failing canary passed, a passing one failed)."""
    if canaries is None:
        return []
    problems = []
    for name, want in canaries.expect.items():
        got = [status for test_id, status in results.items() if test_id.endswith("::" + name)]
        if not got:
            problems.append(f"canary test {name} has no result")
        elif got[0] != want:
            problems.append(f"canary test {name} {'must fail' if want == FAILED else 'must pass'} but was "
                            f"{got[0]}")
    return problems


def without_canaries(results: dict[str, str], canaries: Canaries | None) -> dict[str, str]:
    if canaries is None:
        return results
    return {k: v for k, v in results.items() if k.rsplit("::", 1)[-1] not in canaries.expect}


def _verification_spec(spec: RuntimeSpec | None, runtime_type: str) -> RuntimeSpec:
    base = spec or RuntimeSpec(type=runtime_type)
    return attrs.evolve(base, cpu_time_s=max(base.cpu_time_s, int(TEST_TIMEOUT_S)),
                        memory_mb=max(base.memory_mb, 4096), workspace=None, source=None, network=False,
                        max_files=max(base.max_files, 1 << 20))  # the patch is bounded by MAX_PATCH_BYTES


@attrs.define
class Attempt:
    """One pass of the verification procedure on one tree: ``stage`` reached (``apply``, ``test_patch``,
    ``rebuild``, ``tests``), the run (None before the tests), the canaries planted, and ``failure``: why the
    tests could not be run to the end (an exception's text), if so."""

    stage: str
    run: TestRun | None = None
    canaries: Canaries | None = None
    failure: str | None = None
    note: str = ""

    def suspicious(self) -> list[str]:
        """What makes this attempt's outcome untrustworthy: a failure, the run's problems, canary problems."""
        if self.failure:
            return [self.failure]
        if self.run is None:
            return []
        return self.run.problems + canary_problems(self.run.results, self.canaries)


async def attempt(instance: Instance, kept: str | None, cls: type, spec: RuntimeSpec | None,
                  canaries: Canaries | None = None, rng: Any = None) -> Attempt:
    """Apply ``kept`` (None: the control run, the pristine tree) and the test patch to a fresh runtime, rebuild,
    plant canaries (``canaries`` again, or new ones), run the instance's tests. Raises only when the runtime
    cannot be started or prepared (no patch of the agent's was applied yet: never the agent's doing)."""
    data = instance.data
    check = cls(_verification_spec(spec, getattr(cls, "name", "swe_sandbox")), instance=instance)
    if hasattr(check, "result_channel"):  # docker: mount the channel into this fresh container
        check.result_channel = True
    tests = list(data.get("FAIL_TO_PASS") or []) + list(data.get("PASS_TO_PASS") or [])
    try:
        await check.start()
        await ensure_prepared(check, instance)
        out = Attempt("apply")
        try:
            if kept is not None:
                ok, how = await apply_patch(check, kept)
                if not ok:
                    out.note = f"the agent's patch does not apply: {how}"
                    return out
            out.stage = "test_patch"
            ok, how = await apply_patch(check, data.get("test_patch") or "")
            if not ok:
                after = " after the agent's patch" if kept is not None else ""
                out.note = f"the instance's test patch does not apply{after}: {how}"
                return out
            out.stage = "rebuild"
            ok, how = await rebuild(check, data)
            if not ok:
                out.note = f"the rebuild step failed{' after the patches' if kept is not None else ''}: {how}"
                return out
            out.stage = "tests"
            if canaries is None:
                out.canaries = await plant_canaries(check, data, tests, rng)
            else:
                out.canaries = canaries
                for path, text in canaries.sources.items():  # the control only shows they behave: appended
                    await write_canaries(check, path, text)
            out.run = await run_tests(check, data, tests)
        except Exception as exc:  # the runtime died or a step raised with the tree in place
            log.warning("instance %s: verification step %s failed: %s: %s", instance.id, out.stage,
                        type(exc).__name__, exc)
            out.failure = f"{out.stage}: {type(exc).__name__}: {exc}"
        return out
    finally:
        await check.close()


def control_sound(control: Attempt) -> tuple[bool, str]:
    """Whether the control run (the pristine tree, the test patch, the same canaries) shows the verification
    works for this instance: it got to the tests, its run is consistent and every canary behaved."""
    problems = control.suspicious() if control.run is not None else [
        control.failure or control.note or f"it stopped at {control.stage}"]
    if problems:
        return False, "the control run without the agent's patch: " + "; ".join(problems)
    return True, "a control run without the agent's patch was consistent and its canaries behaved"


async def verify_patch(instance: Instance, patch: str, runtime_cls: type | None = None,
                       spec: RuntimeSpec | None = None, rng: Any = None) -> VerifierResult:
    """Apply ``patch`` (filtered) and the test patch to a fresh pristine copy and score the instance's tests,
    under the outcome contract (docs/runtimes.md, "Verifier outcomes"):

    - *tampered* (reward 0, ``reason``): the patch carries evidence of tampering (:func:`tamper_findings`), or the
      run with it was inconsistent or its canaries misbehaved (:func:`canary_problems`) while a control run on
      the pristine tree with the same canaries was sound;
    - *unverifiable* (``reason``): the row lists no tests, the runtime or environment could not be made, or the
      control run was not sound either (the infrastructure, not the agent, broke the check);
    - *scored*: reward 1 when every FAIL_TO_PASS and PASS_TO_PASS test passed in a consistent run whose canaries
      behaved, else 0 (also a patch that does not apply or does not build when the pristine tree does).

    ``metrics``: ``model_patch``, ``dropped_files``, ``patch_applied``, the grade's, ``canaries`` (how many),
    ``error_eval`` (the problems found), ``control`` (the control run's verdict, when one ran). Raises nothing
    for a failing runtime: that is *unverifiable*."""
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
        return VerifierResult.unverifiable(metrics["error"], metrics)
    findings = tamper_findings(kept)
    if findings:
        metrics["error"] = "tampered: " + "; ".join(findings)
        return VerifierResult.tampered("; ".join(findings), metrics)
    try:
        main = await attempt(instance, kept, cls, spec, rng=rng)
    except Exception as exc:
        metrics["error"] = f"the verification runtime could not be made: {type(exc).__name__}: {exc}"
        return VerifierResult.unverifiable(metrics["error"], metrics)
    metrics["patch_applied"] = main.stage != "apply"
    if main.canaries is not None:
        metrics["canaries"] = len(main.canaries.expect)
    suspicious = main.suspicious()
    if suspicious and _stopped_early_and_failing(main, f2p, p2p, data):
        suspicious = []  # a collection error stopped it before the canaries: a plain failure, no claim to refute
    if main.run is None and not main.failure:  # the patch does not apply or build: blame it only if pristine does
        metrics["error"] = main.note
        if main.stage == "apply":
            return VerifierResult(reward=0.0, metrics=metrics)
        suspicious = [main.note]
    control = None
    if suspicious:
        metrics["error_eval"] = "; ".join(suspicious)
        try:
            control = await attempt(instance, None, cls, spec, canaries=main.canaries)
            sound, verdict = control_sound(control)
        except Exception as exc:
            sound, verdict = False, f"the control run could not be made: {type(exc).__name__}: {exc}"
        metrics["control"] = verdict
        if not sound:
            metrics["error"] = f"unverifiable: {metrics['error_eval']}; {verdict}"
            return VerifierResult.unverifiable(f"{metrics['error_eval']} ({verdict})", metrics)
        if main.run is None and not main.failure:
            return VerifierResult(reward=0.0, metrics=metrics)  # the patch breaks the build: a plain failure
    if main.run is not None:
        run = main.run
        grade = grade_tests(without_canaries(run.results, main.canaries), f2p, p2p, convention_of(data))
        metrics.update({**grade.metrics(), "report": run.report, "test_exit_code": run.exit_code})
        if not run.results or suspicious:
            metrics["test_output"] = run.output
    if suspicious:
        metrics["resolved"] = False
        metrics["error"] = f"tampered: {metrics['error_eval']}"
        return VerifierResult.tampered(f"{metrics['error_eval']} ({metrics['control']})", metrics)
    missing = [t for t, status in metrics["tests"].items() if status == MISSING]
    if missing:  # never run: the agent's code broke their collection, or the row names tests the tree lacks
        unrun = await _missing_in_control(instance, cls, spec, main.canaries, missing)
        if unrun:
            metrics["control"] = f"the control run did not run {len(unrun)} listed test(s) either, e.g. {unrun[0]}"
            metrics["error"] = f"unverifiable: {metrics['control']}"
            return VerifierResult.unverifiable(metrics["control"], metrics)
    return VerifierResult(reward=1.0 if metrics["resolved"] else 0.0, metrics=metrics)


def _stopped_early_and_failing(main: Attempt, f2p: list[str], p2p: list[str], data: dict) -> bool:
    """True when the run's only problems are canaries without a result, pytest itself says it stopped early
    (exit status 2-4: collection errors, interrupted, usage), and the instance is not resolved anyway: what a
    patch that breaks an import does. A forged stream that claims success is never excused (it is resolved)."""
    run = main.run
    if run is None or run.problems or run.exit_code not in (2, 3, 4):
        return False
    if not all(p.endswith(" has no result") for p in canary_problems(run.results, main.canaries)):
        return False
    return not grade_tests(without_canaries(run.results, main.canaries), f2p, p2p, convention_of(data)).resolved


async def _missing_in_control(instance: Instance, cls: type, spec: RuntimeSpec | None, canaries: Canaries | None,
                              missing: list[str]) -> list[str]:
    """Which of the ``missing`` listed tests a control run on the pristine tree does not run either (every one of
    them when the control cannot be made or is not sound: no verdict can then rest on them)."""
    try:
        control = await attempt(instance, None, cls, spec, canaries=canaries)
    except Exception:
        return missing
    if not control_sound(control)[0] or control.run is None:
        return missing
    grade = grade_tests(without_canaries(control.run.results, canaries), missing, [], convention_of(instance.data))
    return [t for t, status in grade.tests.items() if status == MISSING]


async def swe_tests(trajectory: Any, runtime: Any, instance: Instance) -> VerifierResult:
    """The registered verifier ``(trajectory, runtime, instance) -> VerifierResult`` (see the module doc and
    :func:`verify_patch` for the outcomes). A trajectory whose runtime was lost, or whose container is gone
    when its patch is read, is *unverifiable*; a workspace that cannot be diffed while its runtime lives is the
    agent's doing (*tampered*)."""
    from skyrl_core.errors import RuntimeLost

    patch = ""
    if getattr(trajectory, "finish_reason", None) == "error_runtime":  # its container is gone: nothing to score
        return VerifierResult.unverifiable(f"the trajectory's runtime was lost: {trajectory.error}",
                                           {"model_patch": "", "patch_applied": False})
    if runtime is not None and getattr(runtime, "prepared", False) and hasattr(runtime, "diff"):
        try:
            patch = await runtime.diff()
        except PatchTooLarge as exc:  # the agent's own changes: scored 0, with the reason
            return VerifierResult(reward=0.0, metrics={"model_patch": "", "patch_applied": False, "error": str(exc)})
        except RuntimeLost as exc:
            return VerifierResult.unverifiable(f"the runtime was lost before its patch was read: {exc}",
                                               {"model_patch": "", "patch_applied": False})
        except Exception as exc:
            reason = f"the workspace could not be diffed: {type(exc).__name__}: {exc}"
            return VerifierResult.tampered(reason, {"model_patch": "", "patch_applied": False, "error": reason})
    elif isinstance(getattr(trajectory, "answer", None), str):
        patch = trajectory.answer
    runtime_cls = type(runtime) if runtime is not None and hasattr(runtime, "prepare") else None
    try:
        result = await verify_patch(instance, patch, runtime_cls, getattr(runtime, "spec", None))
    except Exception as exc:  # a verifier bug, not the agent's doing: no verdict (the patch is kept)
        log.warning("instance %s: verification failed: %s: %s", instance.id, type(exc).__name__, exc)
        reason = f"verification failed: {type(exc).__name__}: {exc}"
        result = VerifierResult.unverifiable(reason, {"model_patch": patch, "patch_applied": False, "error": reason})
    hits = getattr(runtime, "limit_hits", None)
    if hits:
        result.metrics["runtime_limits"] = dict(hits)
    return result
