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
    missing = {}
    for mod in sorted(_test_imports(plugin) - set(sys.stdlib_module_names) - own):
        dists = {_norm(d) for d in by_module.get(mod, [])}
        if dists and not dists & have:
            missing[mod] = sorted(dists)
    assert not missing, f"{plugin.name}: tests import modules its [test] extra does not install: {missing}"


def test_deep_research_names_the_html_cleaner_itself():
    """justext asks for lxml[html_clean], an extra lxml 6 no longer defines: pip 23 (a fresh venv's) warns and
    installs nothing, and every open_page then fails. The plugin must require lxml_html_clean by name."""
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
