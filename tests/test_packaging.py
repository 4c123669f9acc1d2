"""What a user gets from the packages as declared: each plugin's test extra carries what its tests import, the
deep-research plugin's HTML cleaner comes with any pip, and `skyrl tools run` prints tool output verbatim (#37)."""

from __future__ import annotations

import ast
import importlib.metadata as md
import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PLUGINS = sorted(p for p in (ROOT / "plugins").iterdir() if (p / "pyproject.toml").is_file())


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _req_name(req: str) -> tuple[str, set[str]]:
    """``'lxml[html_clean]>=4; python_version<"3"'`` -> ('lxml', {'html-clean'})."""
    m = re.match(r"\s*([A-Za-z0-9._-]+)\s*(?:\[([^\]]*)\])?", req)
    extras = {_norm(e) for e in (m.group(2) or "").split(",") if e.strip()}
    return _norm(m.group(1)), extras


def _closure(reqs: list[str]) -> set[str]:
    """Every distribution that installing ``reqs`` brings, as the installed metadata says (markers ignored: over-
    approximates, which only makes this test lenient, never wrong about a missing package)."""
    seen: set[str] = set()
    todo = list(reqs)
    while todo:
        name, extras = _req_name(todo.pop())
        key = name + "[" + ",".join(sorted(extras)) + "]"
        if key in seen:
            continue
        seen.add(key)
        try:
            sub = md.requires(name) or []
        except md.PackageNotFoundError:
            continue
        for r in sub:
            marker = r.split(";", 1)[1] if ";" in r else ""
            wanted = re.findall(r"extra\s*==\s*['\"]([^'\"]+)['\"]", marker)
            if wanted and not {_norm(w) for w in wanted} & extras:
                continue
            todo.append(r.split(";", 1)[0])
    return {k.split("[", 1)[0] for k in seen}


def _test_imports(plugin: Path) -> set[str]:
    mods: set[str] = set()
    for f in (plugin / "tests").rglob("*.py"):
        parts = f.relative_to(plugin / "tests").parts[:-1]
        if any(p.startswith(".") or p in ("fixtures", "fixture") for p in parts):  # caches and test data
            continue
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                mods |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                mods.add(node.module.split(".")[0])
    return mods


@pytest.mark.parametrize("plugin", [p for p in PLUGINS if (p / "tests").is_dir() and not (p / "ci.sh").exists()],
                         ids=lambda p: p.name)
def test_a_plugins_test_extra_brings_what_its_tests_import(plugin):
    """`pip install -e 'plugins/X[test]'` then `pytest plugins/X/tests`: every third-party module the tests import
    comes from the plugin's dependencies or its test extra (swe's tests import hypothesis; its extra lacked it)."""
    project = tomllib.loads((plugin / "pyproject.toml").read_text())["project"]
    reqs = project["dependencies"] + project.get("optional-dependencies", {}).get("test", [])
    have = _closure(reqs) | {_norm(project["name"])}
    by_module = md.packages_distributions()
    own = {d.name for d in plugin.iterdir() if d.is_dir()} | {"tests", "conftest"}
    # another in-repo plugin is on no index, so no extra can bring it: a test that needs one skips without it
    # (pytest.importorskip), and CI's shared venv, which has every plugin, runs it
    skipped = set(re.findall(r"importorskip\(\s*[\"']([\w.]+)[\"']",
                             "\n".join(f.read_text(encoding="utf-8") for f in (plugin / "tests").rglob("*.py"))))
    in_repo = {p.name for q in PLUGINS for p in q.glob("skyrl_*") if (p / "__init__.py").is_file()}
    own |= in_repo & skipped
    missing = {}
    for mod in sorted(_test_imports(plugin) - set(sys.stdlib_module_names) - own):
        dists = {_norm(d) for d in by_module.get(mod, [])}
        if dists and not dists & have:
            missing[mod] = sorted(dists)
    assert not missing, f"{plugin.name}: tests import modules its [test] extra does not install: {missing}"


def test_deep_research_names_the_html_cleaner_itself():
    """justext asks for lxml[html_clean]; lxml 6 declares html-clean, which pip 23 (a fresh venv's) does not match,
    so it warns and installs nothing, and every open_page then fails. The plugin requires lxml_html_clean by name."""
    deps = tomllib.loads((ROOT / "plugins/deep-research/pyproject.toml").read_text())["project"]["dependencies"]
    assert "lxml-html-clean" in {_req_name(d)[0] for d in deps}
    # and every plugin: no requirement leans on an extra that its package does not define today
    for plugin in PLUGINS:
        for req in tomllib.loads((plugin / "pyproject.toml").read_text())["project"]["dependencies"]:
            name, extras = _req_name(req)
            if extras and name != "skyrl-core":
                try:
                    provided = {_norm(e) for e in md.metadata(name).get_all("Provides-Extra") or []}
                except md.PackageNotFoundError:
                    continue
                assert extras <= provided, f"{plugin.name}: {req} asks for extras {name} does not provide"


def test_tools_run_prints_tool_output_verbatim(tmp_path):
    """Tool output is data, not rich markup: emoji codes, brackets and markup-like text come out unchanged."""
    text = "a:x:b :smile: [bold]kept[/bold] [red] x[/] \\[esc]"
    env = dict(os.environ, SKYRL_LOAD_PLUGINS="", COLUMNS="40")
    proc = subprocess.run([sys.executable, "-m", "skyrl_core.cli", "tools", "run", "python",
                           json.dumps({"code": f"print({text!r}); print('x' * 90)"}), "--workspace", str(tmp_path)],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == text + "\n" + "x" * 90 + "\n"


def _pip_installs(text: str) -> set[str]:
    """Distribution names (normalised, with ``==`` pins kept) that the ``pip install`` lines of a shell text or a
    README install; paths (``-e plugins/x``, ``.``) and options are left out; a trailing comment is dropped."""
    names: set[str] = set()
    for line in re.sub(r"\\\n\s*", " ", text).splitlines():
        line = line.split(" #", 1)[0]
        m = re.search(r"pip install (.*)", line)
        if not m:
            continue
        words = m.group(1).replace("'", " ").replace('"', " ").split()
        skip_next = False
        for w in words:
            if skip_next:
                skip_next = False
                continue
            if w in ("-c", "-r", "-e"):
                skip_next = True
                continue
            if w.startswith(("-", ".", "/", "$", "plugins/")):
                continue
            m2 = re.match(r"([A-Za-z0-9._-]+)(\[[^\]]*\])?(==[^\s,;]+)?", w)
            if m2:
                names.add(_norm(m2.group(1)) + (m2.group(3) or ""))
    return names


@pytest.mark.parametrize("plugin", [p for p in PLUGINS if (p / "ci.sh").exists()], ids=lambda p: p.name)
def test_a_plugins_readme_installs_what_its_ci_installs(plugin):
    """A plugin with its own environment: its README's commands must install every package its ci.sh installs
    (skyrl-train's README left skyrl-gym in a comment; verl's never installed the bundled model)."""
    # ci.sh upgrades pip first; a README must work with the pip a fresh venv ships (the README check runs so)
    ci = _pip_installs((plugin / "ci.sh").read_text()) - {"pip", "setuptools", "wheel"}
    readme = _pip_installs((plugin / "README.md").read_text())
    # the README may leave a version open where ci.sh pins it, but not the other way round
    readme_names = {r.split("==")[0] for r in readme}
    missing = sorted(c for c in ci if c.split("==")[0] not in readme_names)
    assert not missing, f"plugins/{plugin.name}/README.md does not install {missing} (its ci.sh does)"


def test_tinkers_documented_install_pins_the_sdk_its_local_server_speaks():
    """tinker 0.38 cannot sample from the local server (`asample promises always carry sample_sequence_ids`):
    the README's install takes the `local` extra, which pins 0.25.0, and ci.sh tests that same install."""
    project = tomllib.loads((ROOT / "plugins/tinker/pyproject.toml").read_text())["project"]
    assert project["optional-dependencies"]["local"] == ["tinker==0.25.0"]
    install = (ROOT / "plugins/tinker/README.md").read_text().split("## Install", 1)[1].split("\n## ", 1)[0]
    assert "pip install -e 'plugins/tinker[local]'" in install
    assert "plugins/tinker[local,test]" in (ROOT / "plugins/tinker/ci.sh").read_text()


def _wheel_plan(root: Path = ROOT) -> list[list[str]]:
    proc = subprocess.run(["bash", str(root / "scripts/wheel-check"), "--plan"], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    return [line.split("\t") for line in proc.stdout.splitlines()]


def test_the_wheel_check_runs_every_shipped_example_or_says_why_not():
    """scripts/wheel-check covers every plugin, ci.sh ones included, and runs each example a plugin ships
    (`skyrl eval PLUGIN:EXAMPLE`, shrunk to one instance, one sample, one short turn) unless
    .ci/wheel-examples.txt says why it cannot run on a CPU machine (it used to list and load them only)."""
    plan = _wheel_plan()
    shipped = {}
    for plugin in PLUGINS:
        dist = tomllib.loads((plugin / "pyproject.toml").read_text())["project"]["name"]
        for example in plugin.glob("skyrl_*/examples/*.yaml"):
            shipped[f"{dist.removeprefix('skyrl-')}:{example.stem}"] = plugin.name
    examples = {ref: (plugin, kind, text) for plugin, ref, kind, text in plan if ref != "-"}
    assert set(examples) == set(shipped), set(examples) ^ set(shipped)
    assert {plugin for plugin, *_ in examples.values()} == {p.name for p in PLUGINS if any(p.glob("skyrl_*/examples/*"))}
    assert {"verl", "tinker", "skyrl-train", "osworld"} <= {row[0] for row in plan}
    for ref, (plugin, kind, text) in examples.items():
        assert plugin == shipped[ref]
        assert kind in ("run", "skip"), (ref, kind)
        if kind == "run":
            words = text.split()
            assert {"sampling.n_samples=1", "agent.max_turns=1", "sampling.max_tokens=16"} <= set(words), ref
            assert {"data.limit=1", "eval_data.limit=1"} & set(words), ref
        else:
            assert len(text) > 20, f"{ref}: a skip names its reason"
    runs = [ref for ref, (_, kind, _) in examples.items() if kind == "run"]
    # the skips: two GPU recipes, the hosted Tinker service, a verifiers environment on no package index
    assert len(runs) >= len(examples) - 4, f"only {runs} run"
    # the eval split where the example has one: data.limit would not shrink an eval of it (#37 item 3)
    assert "eval_data.limit=1" in examples["deep-research:hotpotqa"][2].split()
    assert "data.limit=1" in examples["gymenvs:gsm8k"][2].split()


def test_the_wheel_checks_list_names_only_shipped_examples(tmp_path):
    """A line of .ci/wheel-examples.txt for an example no plugin ships (renamed, deleted) stops the check, naming
    it, rather than leaving a skip nobody can find."""
    (tmp_path / "scripts").mkdir()
    (tmp_path / ".ci").mkdir()
    (tmp_path / "scripts/wheel-check").write_text((ROOT / "scripts/wheel-check").read_text())
    (tmp_path / "plugins").symlink_to(ROOT / "plugins")
    listing = (ROOT / ".ci/wheel-examples.txt").read_text()
    (tmp_path / ".ci/wheel-examples.txt").write_text(listing + "swe:gone | skip: renamed long ago, still listed\n")
    proc = subprocess.run(["bash", str(tmp_path / "scripts/wheel-check"), "--plan"], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode != 0 and "swe:gone" in proc.stderr, proc.stderr
    (tmp_path / ".ci/wheel-examples.txt").write_text(listing + "swe:eval | maybe: later\n")
    proc = subprocess.run(["bash", str(tmp_path / "scripts/wheel-check"), "--plan"], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode != 0 and "wheel-examples.txt:" in proc.stderr and "swe:eval | maybe" in proc.stderr


def test_ci_runs_the_wheel_check_on_every_plugin():
    """.ci/run passes no plugin subset: the plugins with their own ci.sh are installed from their wheels too."""
    calls = [line.split() for line in (ROOT / ".ci/run").read_text().splitlines()
             if "scripts/wheel-check" in line and not line.lstrip().startswith("#")]
    steps = [words for words in calls if words[:2] == ["bg_step", "wheel-check"]]
    assert steps == [["bg_step", "wheel-check", "bash", "scripts/wheel-check"]], calls
