"""Test grading: per-test results read from a runner's report or output, and the dataset's test ids matched to
them under the dataset's own conventions.

Results (:class:`Results`, a dict of canonical test id -> status) come from:

- pytest's JUnit XML report (:func:`parse_junit`): canonical ids are pytest node ids
  (``tests/test_a.py::TestK::test_m[one two]``);
- Django's ``runtests.py --verbosity 2`` output (:func:`parse_django`): canonical ids are ``name (module.Class)``;
  the first docstring line a test prints under its name is kept as an alias; a result written on a later line
  than the test's name (the test printed output, or a warning, after `` ... ``) is found;
- pytest terminal output (:func:`parse_pytest_summary`: ``-v`` progress lines, ``-rA`` / ``-q`` short-summary
  lines, xdist lines), for runners given as a shell command.

How the datasets write test ids (read from their harnesses' log parsers; :data:`CONVENTIONS`):

- ``swe-bench`` (and ``swe-gym``, which grades with the SWE-bench harness): pytest ids as the summary line's
  first whitespace-separated word, so an id with a space is cut there (``test_p[one`` for ``test_p[one two]``);
  Django ids as ``name (module.Class)`` from Python < 3.11 environments, ``name (module.Class.name)`` from
  3.11+, or, for a test with a docstring, the docstring's first line; sometimes a path without its directory;
- ``r2e-gym``: the node id without its file, the rest joined by dots (``TestK.test_m``, ``test_p[one two]``);
- ``generated`` (rows made by ``skyrl swe generate``): exact node ids from the JUnit report.

Every listed id is matched by the first rule that finds anything (:func:`match_test`); when that rule finds more
than one test (two tests share a docstring, two files share ``TestK.test_m``, two parameter sets share the text
before a space) the match is *ambiguous*: the id passes only if every one of them passed, and the collision is
reported in the verifier's metrics (``ambiguous_tests``), as are ids listed twice (``duplicate_ids``) and the
rule each id matched by (``match_rules``).
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from typing import Any

import attrs

PASSED, FAILED, ERROR, SKIPPED, MISSING = "PASSED", "FAILED", "ERROR", "SKIPPED", "MISSING"
CONVENTIONS = ("swe-bench", "swe-gym", "r2e-gym", "generated")


class Results(dict):
    """``{canonical test id: status}`` from one run, plus ``aliases``: ``{other key: [canonical ids]}`` (the
    docstring lines Django prints; one line may belong to several tests)."""

    def __init__(self, statuses: dict[str, str] | None = None, aliases: dict[str, list[str]] | None = None):
        super().__init__(statuses or {})
        self.aliases: dict[str, list[str]] = aliases or {}


# -- reading results ---------------------------------------------------------------------------------------------
def parse_junit(xml_text: str) -> Results:
    """pytest JUnit XML (``junit_family=xunit1``: testcases carry ``file``) -> {pytest node id: status}.
    Raises ``xml.etree.ElementTree.ParseError`` on a malformed report."""
    root = ET.fromstring(xml_text)
    results = Results()
    for case in root.iter("testcase"):
        name = case.get("name", "")
        classname = case.get("classname", "")
        file = case.get("file")
        if file:
            module = file[:-3].replace("/", ".") if file.endswith(".py") else file
            rest = classname[len(module) + 1:] if classname.startswith(module) else ""
            node = "::".join([file] + ([p for p in rest.split(".") if p] if rest else []) + [name])
        else:
            node = f"{classname.replace('.', '/')}.py::{name}" if classname else name
        status = PASSED
        for child in case:
            if child.tag == "failure":
                status = FAILED
            elif child.tag == "error":
                status = ERROR
            elif child.tag == "skipped" and status == PASSED:
                # an expected failure is an expected outcome (SWE-bench counts XFAIL as passing)
                status = PASSED if child.get("type") == "pytest.xfail" else SKIPPED
        # a setup error after a pass is reported as a second testcase with the same id: the worse wins
        if results.get(node) in (FAILED, ERROR):
            continue
        results[node] = status
    return results


_DJANGO_HEAD = re.compile(r"^(?P<name>\w+) \((?P<where>[\w.]+)\)(?P<rest>.*)$")
_DJANGO_STATUS = {"ok": PASSED, "FAIL": FAILED, "ERROR": ERROR, "skipped": SKIPPED, "expected failure": PASSED,
                  "unexpected success": FAILED}
_STATUS_AT_END = re.compile(r"(?:^|(?<=\s))(?P<status>ok|FAIL|ERROR|expected failure|unexpected success|"
                            r"skipped(?: '.*'| \".*\")?)$")
_SEP = " ... "


def _django_status(text: str, whole: bool = False) -> str | None:
    """The status a line ends with (``whole``: the line is only the status), else None. Output a test printed
    without a final newline has the status written right after it, hence the ends-with reading."""
    m = (_STATUS_AT_END.fullmatch if whole else _STATUS_AT_END.search)(text.strip())
    if m is None:
        return None
    word = m.group("status")
    return _DJANGO_STATUS["skipped" if word.startswith("skipped") else word]


def parse_django(output: str) -> Results:
    """Django ``runtests.py --verbosity 2`` (unittest) output -> {"test_x (module.Class)": status}.

    Reads the Python 3.11+ form ``test_x (module.Class.test_x)`` as ``test_x (module.Class)``; keeps the
    docstring line printed between a test's name and its `` ... `` as an alias; when the test printed
    something after `` ... ``, its status is the first later line that ends with a status word (``ok``,
    ``FAIL``, ``ERROR``, ``skipped '...'``, ``expected failure``, ``unexpected success``) before the next
    test's name. A test whose status never appears is left out (graded MISSING)."""
    results = Results()
    lines = output.splitlines()
    i = 0
    while i < len(lines):
        head = _DJANGO_HEAD.match(lines[i])
        i += 1
        if head is None:
            continue
        name, where, rest = head.group("name"), head.group("where"), head.group("rest")
        if where.endswith("." + name):
            where = where[: -len(name) - 1]
        key = f"{name} ({where})"
        doc = None
        if rest.startswith(_SEP):
            after = rest[len(_SEP):]
        elif rest.strip() == "" and i < len(lines) and _SEP in lines[i] and not _DJANGO_HEAD.match(lines[i]):
            doc, after = lines[i].split(_SEP, 1)
            i += 1
        else:
            continue
        status = _django_status(after, whole=True)
        if status is None:  # the test printed after " ... ": its status follows the output
            tail = [after]
            while i < len(lines) and not _DJANGO_HEAD.match(lines[i]) and not lines[i].startswith("=" * 20):
                tail.append(lines[i])
                i += 1
                if _django_status(lines[i - 1], whole=True) is not None:
                    break
            status = _django_status(tail[-1], whole=True) or next(
                (s for s in map(_django_status, reversed(tail)) if s is not None), None)
        if status is None:
            continue
        if results.get(key) not in (FAILED, ERROR):
            results[key] = status
        if doc is not None and doc.strip():
            owners = results.aliases.setdefault(doc.strip(), [])
            if key not in owners:
                owners.append(key)
    return results


_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_PYTEST_WORDS = "PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS"
_PYTEST_MAP = {"XFAIL": PASSED, "XPASS": FAILED}
_SUMMARY_LINE = re.compile(rf"^(?P<status>{_PYTEST_WORDS}) (?P<rest>\S.*)$")
_XDIST_PREFIX = re.compile(r"^\[gw\d+\]\s+(?:\[\s*\d+%\]\s+)?")
# what pytest writes after a test's status in -v: a reason in brackets (skip, xfail) and the progress
_PYTEST_STATUS_AT_END = re.compile(rf"(?P<status>{_PYTEST_WORDS})(?: \(.*\))?\s*(?:\[\s*\d+%\]|\[\s*\d+/\d+\])?\s*$")
_SEPARATOR = re.compile(r"^={3,} .+ ={3,}$")  # pytest's section headers (a bare "=====" a test printed is not one)
_NODE_START = re.compile(r"^[^\s:]+::")


def _node_id(text: str) -> int:
    """Length of the pytest node id ``text`` starts with (0: none). The id runs to the first space, except
    inside the parameter brackets of its last part (``test_p[a[0] - b-2]``), which are matched by counting."""
    m = _NODE_START.match(text)
    if m is None:
        return 0
    i = m.end()
    while True:  # ``::Class::test`` parts
        stop = min((k for k in (text.find(" ", i), text.find("[", i)) if k != -1), default=len(text))
        nxt = text.find("::", i)
        if nxt == -1 or nxt > stop:
            break
        i = nxt + 2
    if stop == len(text) or text[stop] == " ":
        return stop
    depth = 0
    for k in range(stop, len(text)):
        depth += {"[": 1, "]": -1}.get(text[k], 0)
        if depth == 0:
            return k + 1
    return 0  # brackets never close: not an id


def _add(results: Results, node: str, word: str) -> None:
    status = _PYTEST_MAP.get(word, word)
    if results.get(node) not in (FAILED, ERROR):  # a teardown error after a pass: the worse wins
        results[node] = status


def _sections(lines: list[str]) -> tuple[list[str], list[str]]:
    """(progress lines, short-summary lines) of pytest terminal output. A progress section runs from the start
    of a session (after its header, or the start of the output) to the next section header; a short summary
    from its header to the next. Output holding several sessions (a runner that calls pytest twice) gives all
    of them; output without section headers is read whole as both."""
    seps = [i for i, line in enumerate(lines) if _SEPARATOR.match(line.strip())]
    if not seps:
        return lines, lines

    def until_next(i: int) -> list[str]:
        return lines[i + 1:next((k for k in seps if k > i), len(lines))]

    starts = [i for i in seps if "test session starts" in lines[i]]
    progress = [line for i in starts for line in until_next(i)] if starts else lines[:seps[0]]
    summary = [line for i in seps if "short test summary info" in lines[i] for line in until_next(i)]
    return progress, summary


def parse_pytest_summary(output: str) -> Results:
    """pytest terminal output -> {node id: status}, in every form pytest prints per-test results:

    - ``-v`` / ``-vv`` progress lines ``path::test_id[params] PASSED  [ 50%]`` (a skip or xfail reason in
      brackets after the status; ``-s`` output between the id and its status, up to the next test's line: the
      status is the one the last such line ends with);
    - ``pytest-xdist -v`` lines ``[gw0] [ 50%] PASSED path::test_id``;
    - the short summary of ``-rA`` (and of ``-q`` / the default ``-rfE``, which names failures and errors
      only: passes are then absent, graded MISSING) ``PASSED path::test_id`` / ``FAILED path::test_id - msg``.

    Parametrised ids keep their spaces and brackets (``test_p[a[0] - b-2]``; the `` - `` of a message is found
    after the brackets close). XFAIL counts as PASSED, XPASS as FAILED; a test reported twice (a teardown error
    after a pass) keeps the worse status. Progress lines are read only in the progress section and summary
    lines only in the short summary, so a result line a test printed into its captured output is not read.
    Text, so weaker than a report file; used only for runners given as a shell command. Colour codes and
    carriage returns are removed first."""
    lines = _ANSI.sub("", output).replace("\r\n", "\n").replace("\r", "\n").split("\n")
    progress, summary = _sections(lines)
    results = Results()
    pending: str | None = None
    pending_word: str | None = None
    for line in progress:
        line = _XDIST_PREFIX.sub("", line.rstrip())
        n = _node_id(line)
        if n:
            if pending is not None and pending_word is not None:
                _add(results, pending, pending_word)
            pending, pending_word = line[:n], None
            line = line[n:]
        elif _SUMMARY_LINE.match(line) and _node_id(line.split(" ", 1)[1]):  # xdist: status before the id
            word, rest = line.split(" ", 1)
            _add(results, rest[:_node_id(rest)], word)
            continue
        if pending is None:
            continue
        m = _PYTEST_STATUS_AT_END.search(line)
        if m is not None and (m.start() == 0 or not line[m.start() - 1].isalnum()):
            pending_word = m.group("status")
    if pending is not None and pending_word is not None:
        _add(results, pending, pending_word)
    for line in summary:
        m = _SUMMARY_LINE.match(line.rstrip())
        if m is None:
            continue
        rest = m.group("rest")
        n = _node_id(rest)
        if n and (n == len(rest) or rest.startswith(" - ", n) or rest[n:].strip() == ""):
            _add(results, rest[:n], m.group("status"))
        elif not n and re.fullmatch(r"\S+\.py( - .*)?", rest):  # a collection error names the file
            _add(results, rest.split(" - ")[0], m.group("status"))
    return results


# -- matching ids ------------------------------------------------------------------------------------------------
@attrs.define(frozen=True)
class Match:
    """How one listed test id was found: its ``status``, the canonical ids it ``matched`` and the ``rule``."""

    status: str
    matched: tuple[str, ...] = ()
    rule: str = "missing"


def convention_of(data: dict) -> str:
    """The test-id convention of an instance's row: ``generated`` for rows made by the generator, else the row's
    ``source_format`` (``swe-bench`` by default; SWE-Gym rows grade as SWE-bench rows)."""
    if data.get("mutation") or str(data.get("created_by", "")).startswith("skyrl swe generate"):
        return "generated"
    fmt = str(data.get("source_format") or "swe-bench")
    return fmt if fmt in CONVENTIONS else "swe-bench"


def _combined(statuses: list[str]) -> str:
    if any(s in (FAILED, ERROR) for s in statuses):
        return FAILED
    if all(s == PASSED for s in statuses):
        return PASSED
    return next(s for s in statuses if s != PASSED)


def _r2e_key(node: str) -> str:
    return ".".join(node.split("::")[1:])


def _django_key(test_id: str) -> str | None:
    m = re.fullmatch(r"(\w+) \(([\w.]+)\)", test_id.strip())
    if m is None:
        return None
    name, where = m.groups()
    return f"{name} ({where[: -len(name) - 1] if where.endswith('.' + name) else where})"


def match_test(results: dict[str, str], test_id: str, convention: str = "swe-bench") -> Match:
    """Find the listed ``test_id`` in ``results`` under the dataset's ``convention`` (see the module doc).

    Rules, in order (the first that finds anything decides): ``exact``; ``django`` (``name (module.Class)`` in
    either Python form); ``docstring`` (a Django docstring alias); ``cut at space`` (swe-bench/swe-gym: the id
    is the text of a result's id before its first space); ``r2e`` (r2e-gym: the id without its file, joined by
    dots); ``no directory`` (the id is a result's path without its leading directories); ``bare name`` (the
    id is just a test function's name). More than one test found: the id passes only if all passed."""
    def found(keys: list[str], rule: str) -> Match:
        keys = list(dict.fromkeys(keys))
        return Match(_combined([results[k] for k in keys]), tuple(keys), rule)

    if test_id in results:
        return Match(results[test_id], (test_id,), "exact")
    aliases = getattr(results, "aliases", {}) or {}
    django = _django_key(test_id)
    if django is not None and django in results:
        return found([django], "django")
    if test_id in aliases:
        return found([k for k in aliases[test_id] if k in results], "docstring")
    if convention in ("swe-bench", "swe-gym"):
        cut = [k for k in results if " " in k and k.split()[0] == test_id]
        if cut:
            return found(cut, "cut at space")
    if convention == "r2e-gym":
        r2e = [k for k in results if "::" in k and _r2e_key(k) == test_id]
        if r2e:
            return found(r2e, "r2e")
    tail = [k for k in results if k.endswith("/" + test_id)]
    if tail:
        return found(tail, "no directory")
    if "::" not in test_id and " " not in test_id:
        bare = [k for k in results if k.rsplit("::", 1)[-1] == test_id or k.split(" (")[0] == test_id]
        if bare:
            return found(bare, "bare name")
    return Match(MISSING)


def lookup(results: dict[str, str], test_id: str, convention: str = "swe-bench") -> str:
    """The status of one listed test id in ``results`` (:func:`match_test`), MISSING when absent."""
    return match_test(results, test_id, convention).status


@attrs.define
class Grade:
    """The listed tests graded: ``tests`` {id: status}, ``fail_to_pass``/``pass_to_pass`` as "passed/listed",
    ``resolved``, and what the verifier reports about keys (:meth:`metrics`)."""

    tests: dict[str, str]
    fail_to_pass: str
    pass_to_pass: str
    resolved: bool
    convention: str
    rules: dict[str, int]
    ambiguous: dict[str, list[str]]
    duplicates: list[str]

    def metrics(self) -> dict[str, Any]:
        out: dict[str, Any] = {"tests": self.tests, "fail_to_pass": self.fail_to_pass,
                               "pass_to_pass": self.pass_to_pass, "resolved": self.resolved,
                               "id_convention": self.convention, "match_rules": self.rules}
        if self.ambiguous:
            out["ambiguous_tests"] = self.ambiguous
        if self.duplicates:
            out["duplicate_ids"] = self.duplicates
        return out


def grade_tests(results: dict[str, str], fail_to_pass: list[str], pass_to_pass: list[str],
                convention: str = "swe-bench") -> Grade:
    """Grade an instance: every FAIL_TO_PASS and PASS_TO_PASS id must match PASSED (:func:`match_test`)."""
    listed = list(fail_to_pass) + list(pass_to_pass)
    matches = {t: match_test(results, t, convention) for t in listed}
    rules: dict[str, int] = {}
    for m in matches.values():
        rules[m.rule] = rules.get(m.rule, 0) + 1
    f2p_ok = sum(matches[t].status == PASSED for t in fail_to_pass)
    p2p_ok = sum(matches[t].status == PASSED for t in pass_to_pass)
    seen: set[str] = set()
    duplicates = sorted({t for t in listed if t in seen or seen.add(t)})
    return Grade(tests={t: m.status for t, m in matches.items()},
                 fail_to_pass=f"{f2p_ok}/{len(fail_to_pass)}", pass_to_pass=f"{p2p_ok}/{len(pass_to_pass)}",
                 resolved=f2p_ok == len(fail_to_pass) and p2p_ok == len(pass_to_pass), convention=convention,
                 rules=rules, ambiguous={t: list(m.matched) for t, m in matches.items() if len(m.matched) > 1},
                 duplicates=duplicates)


def django_labels(test_ids: list[str], test_patch: str = "") -> list[str]:
    """``runtests.py`` labels that run ``test_ids``: ``module.Class.name`` for ids written ``name (module.Class)``
    (either Python form); ids keyed by docstring name no test, so the test modules the instance's
    ``test_patch`` touches (``tests/apps/tests.py`` -> ``apps.tests``), else those of the other ids, are run
    whole. Labels inside a module that runs whole are dropped."""
    labels: list[str] = []
    modules: list[str] = []
    unnamed = False
    for test_id in test_ids:
        key = _django_key(test_id)
        if key is None:
            unnamed = True
            continue
        name, where = key[:-1].split(" (", 1)
        labels.append(f"{where}.{name}")
        modules.append(where.rsplit(".", 1)[0])
    if unnamed:
        touched = [m.group(1).replace("/", ".") for m in re.finditer(r"^\+\+\+ b/tests/(\S+)\.py$", test_patch, re.M)]
        wholes = list(dict.fromkeys(touched or modules))
        labels = wholes + [label for label in labels if not any(label.startswith(w + ".") for w in wholes)]
    return list(dict.fromkeys(labels))
