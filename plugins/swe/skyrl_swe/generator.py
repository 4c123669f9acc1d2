"""A task generator from real Python projects on the package index (in the spirit of SWE-smith / R2E-Gym's
procedural bugs): take a source distribution whose test suite passes, introduce a bug by an AST mutation — flip a
comparison, drop a branch, off-by-one, swap arguments — keep mutations that make some passing tests fail, and
write SWE-bench-style instances: the buggy tree as the repository, the failing tests as FAIL_TO_PASS, the tests
that still pass in those files as PASS_TO_PASS, the reverse diff as the gold patch, and a problem statement from
the failure (the test id and the assertion message, never the mutation).
"""

from __future__ import annotations

import ast
import asyncio
import difflib
import hashlib
import json
import logging
import os
import random
import re
import shutil
import subprocess
import sys
import tarfile
import xml.etree.ElementTree as ET
import zipfile
from pathlib import Path

import attrs

from skyrl_core import Instance
from skyrl_core.errors import SkyrlError
from skyrl_core.runtime import RuntimeSpec

from .paths import cache_dir
from .runtime import SweSandbox
from .verifiers import ERROR, FAILED, PASSED, is_test_file, parse_junit, rebuild

log = logging.getLogger(__name__)

FLIP = {ast.Lt: ast.GtE, ast.GtE: ast.Lt, ast.Gt: ast.LtE, ast.LtE: ast.Gt, ast.Eq: ast.NotEq, ast.NotEq: ast.Eq,
        ast.Is: ast.IsNot, ast.IsNot: ast.Is, ast.In: ast.NotIn, ast.NotIn: ast.In}
KINDS = ("flip_comparison", "drop_branch", "off_by_one", "swap_arguments")


class GeneratorError(SkyrlError):
    """The project cannot be used (download failed, tests do not pass before mutation, ...)."""


@attrs.frozen
class Mutation:
    """Replace bytes ``[start, end)`` of ``path`` with ``replacement``; ``line`` is 1-based, for reports."""

    path: str
    kind: str
    line: int
    start: int
    end: int
    replacement: bytes
    description: str

    def apply(self, source: bytes) -> bytes:
        return source[: self.start] + self.replacement + source[self.end:]


# -- finding mutations -------------------------------------------------------------------------------------------
def _offsets(source: bytes) -> list[int]:
    starts = [0]
    for i, b in enumerate(source):
        if b == 10:
            starts.append(i + 1)
    return starts


def find_mutations(source: bytes, path: str, rng: random.Random | None = None) -> list[Mutation]:
    """Every mutation site in one Python file (empty when it does not parse)."""
    rng = rng or random.Random(0)
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return []
    starts = _offsets(source)
    lines = source.split(b"\n")

    def pos(lineno: int, col: int) -> int:
        return starts[lineno - 1] + col

    def seg(node: ast.AST) -> bytes:
        return source[pos(node.lineno, node.col_offset): pos(node.end_lineno, node.end_col_offset)]

    parents: dict[ast.AST, ast.AST] = {}
    for node in ast.walk(tree):
        for child in ast.iter_child_nodes(node):
            parents[child] = node
    out: list[Mutation] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in FLIP \
                and node.lineno == node.end_lineno:
            flipped = ast.Compare(left=node.left, ops=[FLIP[type(node.ops[0])]()], comparators=node.comparators)
            new = ast.unparse(flipped).encode()
            if b"\n" not in seg(node):
                out.append(Mutation(path, "flip_comparison", node.lineno, pos(node.lineno, node.col_offset),
                                    pos(node.end_lineno, node.end_col_offset), new,
                                    f"flip comparison `{seg(node).decode(errors='replace')}` -> `{new.decode()}`"))
        elif isinstance(node, ast.If):
            head = lines[node.lineno - 1][: node.col_offset]
            if head.strip() or _guard(node):
                continue
            start = starts[node.lineno - 1]
            end = starts[node.end_lineno] if node.end_lineno < len(starts) else len(source)
            if node.orelse and not (len(node.orelse) == 1 and isinstance(node.orelse[0], ast.If)
                                    and lines[node.orelse[0].lineno - 1].lstrip().startswith(b"elif")):
                keep_end = starts[node.body[-1].end_lineno] if node.body[-1].end_lineno < len(starts) else len(source)
                out.append(Mutation(path, "drop_branch", node.lineno, start, end, source[start:keep_end],
                                    f"drop the else branch of the if at line {node.lineno}"))
            elif not node.orelse:
                out.append(Mutation(path, "drop_branch", node.lineno, start, end, head + b"pass\n",
                                    f"drop the if statement at line {node.lineno}"))
        elif isinstance(node, ast.Constant) and type(node.value) is int and node.lineno == node.end_lineno:
            parent = parents.get(node)
            if isinstance(parent, (ast.BinOp, ast.Compare, ast.Subscript, ast.Slice)) or (
                    isinstance(parent, ast.Call) and isinstance(parent.func, ast.Name) and parent.func.id == "range"):
                delta = rng.choice((-1, 1)) if node.value != 0 else 1
                new = str(node.value + delta).encode()
                out.append(Mutation(path, "off_by_one", node.lineno, pos(node.lineno, node.col_offset),
                                    pos(node.end_lineno, node.end_col_offset), new,
                                    f"off-by-one: {node.value} -> {node.value + delta} at line {node.lineno}"))
        elif isinstance(node, ast.Call) and len(node.args) >= 2 and not any(isinstance(a, ast.Starred)
                                                                              for a in node.args[:2]):
            a, b = node.args[0], node.args[1]
            sa, sb = seg(a), seg(b)
            if sa == sb:
                continue
            between = source[pos(a.end_lineno, a.end_col_offset): pos(b.lineno, b.col_offset)]
            out.append(Mutation(path, "swap_arguments", node.lineno, pos(a.lineno, a.col_offset),
                                pos(b.end_lineno, b.end_col_offset), sb + between + sa,
                                f"swap the first two arguments of the call at line {node.lineno}"))
    return out


def _guard(node: ast.If) -> bool:
    text = ast.unparse(node.test)
    return "__name__" in text or "TYPE_CHECKING" in text or "sys.version_info" in text


def source_files(root: Path) -> list[str]:
    """Non-test Python files of a project (relative paths), excluding setup/docs/build helpers."""
    out = []
    for p in sorted(root.rglob("*.py")):
        rel = p.relative_to(root).as_posix()
        parts = rel.split("/")
        if is_test_file(rel) or parts[0] in ("docs", "doc", "examples", "benchmarks", "build", "scripts") \
                or p.name in ("setup.py", "conftest.py", "noxfile.py", "__main__.py") or ".egg-info" in rel:
            continue
        out.append(rel)
    return out


COMPILED = (".c", ".h", ".cc", ".cpp", ".hpp", ".pyx", ".pxd")


def compiled_sources(root: Path) -> list[str]:
    """Non-test C, C++ and Cython sources of a project (relative paths), outside docs and build directories."""
    out = []
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root).as_posix()
        if p.suffix in COMPILED and p.is_file() and not is_test_file(rel) and rel.split("/")[0] not in (
                "docs", "doc", "examples", "benchmarks", "build") and ".egg-info" not in rel:
            out.append(rel)
    return out


# -- fetching projects -------------------------------------------------------------------------------------------
def fetch_sdist(requirement: str, dest: Path | None = None) -> tuple[Path, str, str]:
    """Download (once) and unpack the source distribution of ``NAME==VERSION``; returns (dir, name, version)."""
    if "==" not in requirement:
        raise GeneratorError(f"give the project as NAME==VERSION (got '{requirement}'), e.g. inflection==0.5.1")
    name, version = (s.strip() for s in requirement.split("==", 1))
    root = dest or cache_dir() / "projects"
    target = root / f"{name}-{version}"
    if (target / ".skyrl-unpacked").exists():
        return target, name, version
    downloads = cache_dir() / "sdists"
    downloads.mkdir(parents=True, exist_ok=True)
    found = [p for p in downloads.iterdir() if _is_sdist_of(p.name, name, version)]
    if not found:
        found = [download_sdist(name, version, downloads)]
    archive = found[0]
    if target.exists():
        shutil.rmtree(target)
    tmp = target.with_name(target.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    if archive.name.endswith(".zip"):
        with zipfile.ZipFile(archive) as zf:
            zf.extractall(tmp)
    else:
        with tarfile.open(archive) as tf:
            tf.extractall(tmp, filter="data")
    inner = [p for p in tmp.iterdir()]
    src = inner[0] if len(inner) == 1 and inner[0].is_dir() else tmp
    shutil.move(str(src), str(target))
    shutil.rmtree(tmp, ignore_errors=True)
    for junk in target.rglob("__pycache__"):
        shutil.rmtree(junk, ignore_errors=True)
    (target / ".skyrl-unpacked").write_text(requirement)
    return target, name, version


def _norm(text: str) -> str:
    return re.sub(r"[-_.]+", "-", text).lower()


def _is_sdist_of(filename: str, name: str, version: str) -> bool:
    for ext in (".tar.gz", ".zip", ".tgz"):
        if filename.endswith(ext):
            return _norm(filename[: -len(ext)]) == _norm(f"{name}-{version}")
    return False


def download_sdist(name: str, version: str, dest: Path) -> Path:
    """Download the source distribution of ``name`` ``version`` from the package index's JSON simple API
    (PEP 691; ``$PIP_INDEX_URL`` or PyPI) into ``dest``, checking its sha256. Nothing of it runs here: unlike
    ``pip download``, which prepares the sdist's metadata by running its build backend on the host. Raises
    GeneratorError naming what is missing."""
    import urllib.request

    index = os.environ.get("PIP_INDEX_URL", "https://pypi.org/simple").rstrip("/")
    request = urllib.request.Request(f"{index}/{_norm(name)}/",
                                     headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as resp:
            files = json.load(resp).get("files", [])
    except (OSError, ValueError) as exc:
        raise GeneratorError(f"could not list {name} on the package index {index}: {exc}") from None
    found = [f for f in files if _is_sdist_of(f.get("filename", ""), name, version)]
    if not found:
        raise GeneratorError(f"{name} {version} has no source distribution on {index} (a release with an sdist "
                             f"is needed: its source tree is the repository)")
    meta = found[0]
    target = dest / meta["filename"]
    tmp = target.with_name(target.name + ".part")
    try:
        with urllib.request.urlopen(meta["url"], timeout=300) as resp, open(tmp, "wb") as fh:
            shutil.copyfileobj(resp, fh)
    except OSError as exc:
        raise GeneratorError(f"could not download {meta['url']}: {exc}") from None
    want = (meta.get("hashes") or {}).get("sha256")
    if want and hashlib.sha256(tmp.read_bytes()).hexdigest() != want:
        tmp.unlink()
        raise GeneratorError(f"{meta['filename']}: sha256 differs from the index's ({want})")
    tmp.rename(target)
    return target


def default_install(root: Path) -> str:
    """The install step a generated instance gets: ``python -m pip install -e .`` for a project with a build
    definition (``setup.py``, ``pyproject.toml``), else none."""
    return "python -m pip install -e ." if (root / "setup.py").is_file() or (root / "pyproject.toml").is_file() \
        else ""


def environment_fields(root: Path, requirements: list[str] | None, install: str | None,
                       pytest_autoload: bool) -> dict:
    """What a generated row says about its environment: ``requirements``, ``install`` (when any) and
    ``pytest_autoload`` (when set)."""
    fields: dict = {"requirements": list(requirements or [])}
    step = default_install(root) if install is None else install
    if step:
        fields["install"] = step
    if pytest_autoload:
        fields["pytest_autoload"] = True
    return fields


# -- running a suite ---------------------------------------------------------------------------------------------
async def run_suite(runtime: SweSandbox, test_args: list[str], timeout_s: float) -> tuple[dict[str, str], dict[str, str]]:
    """Run pytest in ``runtime``, with the environment the verifier gives the instance's tests (plugin autoload
    as the row says); returns ({node id: status}, {node id: failure message})."""
    from .verifiers import runner_env

    data = runtime.instance.data if runtime.instance is not None else {}
    plugins = [a for p in data.get("pytest_plugins") or [] for a in ("-p", str(p))]
    report = ".skyrl-gen-report.xml"
    res = await runtime.exec(["python", "-m", "pytest", "-p", "no:cacheprovider", *plugins, "-q", "-o",
                              "junit_family=xunit1", f"--junitxml={report}", *test_args], timeout_s=timeout_s,
                             env=runner_env(data))
    path = Path(runtime.workspace) / report
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return {}, {"<suite>": res.output[-2000:]}
    finally:
        path.unlink(missing_ok=True)
    results = parse_junit(text)
    messages: dict[str, str] = {}
    for case in ET.fromstring(text).iter("testcase"):
        for child in case:
            if child.tag in ("failure", "error"):
                key = next((k for k in results if k.endswith("::" + case.get("name", ""))), case.get("name", ""))
                messages[key] = (child.get("message") or "") + "\n" + (child.text or "")
    return results, messages


_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def stable_test_id(test_id: str) -> bool:
    """Whether a test id names the same test in every run: not one parametrized by an object whose repr holds its
    memory address (``<FakeDate object at 0x7f...>``), which no later run can match."""
    return not _ADDRESS.search(test_id)


def problem_statement(name: str, failing: list[str], messages: dict[str, str]) -> str:
    """An issue-style report built only from what a user would see: failing test ids and their errors."""
    first = failing[0]
    message = messages.get(first, "").strip()
    e_lines = [line[1:].strip() for line in message.splitlines()[1:] if line.startswith("E ")]
    short = "\n".join([line for line in e_lines if line][:12] or message.splitlines()[:1])
    more = f" (and {len(failing) - 1} more)" if len(failing) > 1 else ""
    examples = "\n".join(f"- {t}" for t in failing[:5])
    return (f"{name}: `{first.split('::')[-1]}` fails{more}\n\n"
            f"After the latest changes some of {name}'s own tests fail. For example `{first}` reports:\n\n"
            f"```\n{short or 'the test fails'}\n```\n\nFailing tests:\n{examples}\n\n"
            f"The tests describe the intended behaviour; the library code is wrong, not the tests.")


def gold_patch(path: str, buggy: bytes, fixed: bytes) -> str:
    """A git-style unified diff turning ``buggy`` into ``fixed`` for ``path``."""
    a = buggy.decode("utf-8", "replace").splitlines(keepends=True)
    b = fixed.decode("utf-8", "replace").splitlines(keepends=True)
    body = "".join(difflib.unified_diff(a, b, f"a/{path}", f"b/{path}"))
    return f"diff --git a/{path} b/{path}\n{body}"


async def generate(project: str | Path, out_dir: str | Path, n: int = 3, seed: int = 0, max_tries: int = 40,
                   kinds: tuple[str, ...] = KINDS, timeout_s: float = 600.0, requirements: list[str] | None = None,
                   max_fail_to_pass: int = 50, install: str | None = None, pytest_autoload: bool = False) -> list[dict]:
    """Generate up to ``n`` instances from ``project`` (``NAME==VERSION`` from the package index, or a directory)
    into ``out_dir`` (``instances.jsonl`` plus ``repos/<instance_id>/``). Tries at most ``max_tries`` mutations,
    each running the test suite (seconds each for a small project). ``install``: the rows' install step (default
    :func:`default_install`; "" for none); ``pytest_autoload``: the rows let pytest autoload the environment's
    plugins (a pytest plugin's own tests). Raises GeneratorError when the unmutated suite has no passing test."""
    if Path(str(project)).is_dir():
        root, name, version = Path(project).resolve(), Path(project).name, "local"
    else:
        root, name, version = await asyncio.to_thread(fetch_sdist, str(project))
    out = Path(out_dir)
    (out / "repos").mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    fields = environment_fields(root, requirements, install, pytest_autoload)
    base_data = {"repo": name, "version": version, "repo_dir": str(root), **fields}
    spec = RuntimeSpec(type="swe_sandbox", cpu_time_s=int(timeout_s), memory_mb=4096)
    runtime = SweSandbox(spec, instance=Instance(id=f"{name}-{version}", data=base_data))
    instances: list[dict] = []
    await runtime.start()
    try:
        baseline, _ = await run_suite(runtime, [], timeout_s)
        passing = {t for t, s in baseline.items() if s == PASSED}
        if not passing:
            raise GeneratorError(f"{name} {version}: no test passes before mutation (collected {len(baseline)}); "
                                 f"it needs dependencies (--requirement) or is not a pytest project")
        log.info("%s %s: %d of %d tests pass before mutation", name, version, len(passing), len(baseline))
        candidates: list[Mutation] = []
        for rel in source_files(Path(runtime.workspace)):
            data = (Path(runtime.workspace) / rel).read_bytes()
            candidates += [m for m in find_mutations(data, rel, rng) if m.kind in kinds]
        rng.shuffle(candidates)
        # spread the tries over kinds: round-robin by kind in shuffled order
        by_kind: dict[str, list[Mutation]] = {}
        for m in candidates:
            by_kind.setdefault(m.kind, []).append(m)
        order: list[Mutation] = []
        while any(by_kind.values()):
            for k in list(by_kind):
                if by_kind[k]:
                    order.append(by_kind[k].pop())
        for tries, mutation in enumerate(order[:max_tries], start=1):
            if len(instances) >= n:
                break
            target = Path(runtime.workspace) / mutation.path
            original = target.read_bytes()
            mutated = mutation.apply(original)
            try:
                compile(mutated, mutation.path, "exec")
            except SyntaxError:
                continue
            target.write_bytes(mutated)
            try:
                results, messages = await run_suite(runtime, [], timeout_s)
            finally:
                target.write_bytes(original)
            failing = sorted(t for t in passing if results.get(t, FAILED) in (FAILED, ERROR) and stable_test_id(t))
            if not failing or len(failing) > max_fail_to_pass or not results:
                continue
            files = {t.split("::", 1)[0] for t in failing}
            still = sorted(t for t in passing if t not in failing and t.split("::", 1)[0] in files
                           and results.get(t) == PASSED and stable_test_id(t))
            digest = hashlib.sha1(mutated).hexdigest()[:8]
            iid = f"{name}__{name}-{version}-{mutation.kind}-{digest}"
            repo_dir = out / "repos" / iid
            if repo_dir.exists():
                shutil.rmtree(repo_dir)
            shutil.copytree(root, repo_dir, ignore=shutil.ignore_patterns("__pycache__", ".skyrl-unpacked"))
            (repo_dir / mutation.path).write_bytes(mutated)
            row = {
                "instance_id": iid, "repo": name, "version": version, "base_commit": digest,
                "problem_statement": problem_statement(name, failing, messages),
                "patch": gold_patch(mutation.path, mutated, original), "test_patch": "",
                "FAIL_TO_PASS": failing, "PASS_TO_PASS": still, "repo_dir": f"repos/{iid}",
                **fields, "test_cmd": "pytest",
                "mutation": {"kind": mutation.kind, "path": mutation.path, "line": mutation.line,
                             "description": mutation.description},
                "created_by": f"skyrl swe generate {name}=={version} seed={seed} try={tries}",
            }
            instances.append(row)
            log.info("kept %s: %s (%d fail, %d still pass)", iid, mutation.description, len(failing), len(still))
    finally:
        await runtime.close()
    with (out / "instances.jsonl").open("a", encoding="utf-8") as fh:
        for row in instances:
            fh.write(json.dumps(row) + "\n")
    return instances


# -- instances from a project's release history -----------------------------------------------------------------
def tree_patch(old_root: Path, new_root: Path, paths: list[str]) -> str:
    """A git-style patch turning ``paths`` of ``old_root`` into those of ``new_root`` (files may be new)."""
    out = []
    for rel in paths:
        a, b = old_root / rel, new_root / rel
        before = a.read_bytes() if a.is_file() else None
        after = b.read_bytes() if b.is_file() else None
        if before == after:
            continue
        if before is None:
            body = "".join(difflib.unified_diff([], after.decode("utf-8", "replace").splitlines(keepends=True),
                                                "/dev/null", f"b/{rel}"))
            out.append(f"diff --git a/{rel} b/{rel}\nnew file mode 100644\n{body}")
        elif after is None:
            body = "".join(difflib.unified_diff(before.decode("utf-8", "replace").splitlines(keepends=True), [],
                                                f"a/{rel}", "/dev/null"))
            out.append(f"diff --git a/{rel} b/{rel}\ndeleted file mode 100644\n{body}")
        else:
            out.append(gold_patch(rel, before, after))
    return "".join(out)


def _test_files(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*.py")
                  if is_test_file(p.relative_to(root).as_posix()) and ".egg-info" not in p.as_posix())


async def generate_from_releases(name: str, old: str, new: str, out_dir: str | Path, timeout_s: float = 600.0,
                                 requirements: list[str] | None = None, install: str | None = None,
                                 pytest_autoload: bool = False) -> dict:
    """One SWE-bench-style instance from two releases of a project on the package index (its real history): the
    repository is release ``old``'s source distribution; the gold ``patch`` is the change of its non-test Python
    files up to release ``new``; the ``test_patch`` the change of its test files. FAIL_TO_PASS are the tests that
    pass on ``new``'s source and not on ``old``'s (both with ``new``'s tests), PASS_TO_PASS those that pass on
    both. ``install`` and ``pytest_autoload`` as for :func:`generate`. Writes ``out_dir/instances.jsonl`` (appended) and ``out_dir/repos/<instance_id>/``; returns the row.
    Raises GeneratorError when the change fixes no test."""
    old_root, _, _ = await asyncio.to_thread(fetch_sdist, f"{name}=={old}")
    new_root, _, _ = await asyncio.to_thread(fetch_sdist, f"{name}=={new}")
    compiled = sorted(set(compiled_sources(old_root)) | set(compiled_sources(new_root)))
    source = sorted(set(source_files(old_root)) | set(source_files(new_root))) + compiled
    tests = sorted(set(_test_files(old_root)) | set(_test_files(new_root)))
    patch, test_patch = tree_patch(old_root, new_root, source), tree_patch(old_root, new_root, tests)
    if not patch:
        raise GeneratorError(f"{name} {old} -> {new}: no non-test source file changed")
    iid = f"{name}__{name}-{old}-to-{new}"
    out = Path(out_dir)
    repo_dir = out / "repos" / iid
    if repo_dir.exists():
        shutil.rmtree(repo_dir)
    shutil.copytree(old_root, repo_dir, ignore=shutil.ignore_patterns("__pycache__", ".skyrl-unpacked"))
    fields = environment_fields(old_root, requirements, install, pytest_autoload)
    if compiled and fields.get("install") and (old_root / "setup.py").is_file():
        # the fix may change C: the verifier recompiles in its sandbox after applying the patch (offline, so
        # setuptools must be in the environment)
        fields["rebuild"] = "python setup.py -q build_ext --inplace"
        fields["requirements"] = [*fields["requirements"], "setuptools"]
    base_data = {"repo": name, "version": old, "repo_dir": str(repo_dir), **fields}
    spec = RuntimeSpec(type="swe_sandbox", cpu_time_s=int(timeout_s), memory_mb=4096)
    from .verifiers import apply_patch

    results = []
    for fix in ("", patch):  # before and after the fix, both with the new tests
        runtime = SweSandbox(spec, instance=Instance(id=iid, data=base_data))
        await runtime.start()
        try:
            for p in (fix, test_patch):
                ok, how = await apply_patch(runtime, p)
                if not ok:
                    raise GeneratorError(f"{name} {old} -> {new}: a release diff does not apply: {how}")
            ok, how = await rebuild(runtime, base_data)
            if not ok:
                raise GeneratorError(f"{name} {old} -> {new}: the rebuild step failed: {how}")
            results.append(await run_suite(runtime, [], timeout_s))
        finally:
            await runtime.close()
    (before, messages), (after, _) = results
    after = {t: s for t, s in after.items() if stable_test_id(t)}
    f2p = sorted(t for t, s in after.items() if s == PASSED and before.get(t) != PASSED)
    p2p = sorted(t for t, s in after.items() if s == PASSED and before.get(t) == PASSED)
    if not f2p:
        raise GeneratorError(f"{name} {old} -> {new}: no test passes after the change that failed before it")
    row = {"instance_id": iid, "repo": name, "version": old, "base_commit": f"{name}-{old}",
           "problem_statement": problem_statement(name, f2p, messages), "patch": patch, "test_patch": test_patch,
           "FAIL_TO_PASS": f2p, "PASS_TO_PASS": p2p, "repo_dir": f"repos/{iid}", **fields,
           "test_cmd": "pytest", "created_by": f"skyrl swe generate {name}=={old} --to {new}"}
    with (out / "instances.jsonl").open("a", encoding="utf-8") as fh:
        fh.write(json.dumps(row) + "\n")
    return row
