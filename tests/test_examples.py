"""Example configs ship inside their plugin's distribution and are taken by name (#37): ``skyrl eval
deep-research:hotpotqa``; ``skyrl plugins`` and ``skyrl tasks`` list them; the root examples/ keeps only the
core's (configs whose tasks are all one plugin's live in that plugin)."""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

from skyrl_core.config import load_config
from skyrl_core.errors import ConfigError
from skyrl_core.default_plugins.example_configs.shipped import find_examples, plugin_prefix, resolve_example

ROOT = Path(__file__).resolve().parents[1]
PLUGINS = sorted(p for p in (ROOT / "plugins").iterdir() if (p / "pyproject.toml").is_file())
CORE_TASKS = {"gsm8k", "gsm8k_steps"}


def _package(plugin: Path) -> Path:
    return next(d for d in plugin.iterdir() if d.is_dir() and d.name.startswith("skyrl_") and (d / "__init__.py").exists())


def _installed(plugin: Path) -> bool:
    name = tomllib.loads((plugin / "pyproject.toml").read_text())["project"]["name"]
    try:
        importlib.metadata.distribution(name)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


@pytest.mark.parametrize("plugin", PLUGINS, ids=lambda p: p.name)
def test_a_plugins_examples_are_package_data(plugin):
    """The wheel carries them: each plugin's examples/ is inside its package and declared as package data."""
    assert not (plugin / "examples").exists(), f"{plugin}/examples is outside the package: no wheel ships it"
    package = _package(plugin)
    shipped = sorted((package / "examples").glob("*.yaml"))
    assert shipped, f"{plugin.name} ships no example config"
    data = tomllib.loads((plugin / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    assert "examples/*.yaml" in data[package.name]
    for path in shipped:
        load_config(path)  # each is a valid config


def test_the_root_examples_are_the_cores_only():
    for path in sorted((ROOT / "examples").glob("*.yaml")):
        tasks = {t["name"] for t in yaml.safe_load(path.read_text())["tasks"]}
        assert tasks & CORE_TASKS, f"{path.name} runs only plugin tasks {sorted(tasks)}: it belongs in that plugin"


@pytest.mark.parametrize("plugin", [p for p in PLUGINS if _installed(p)], ids=lambda p: p.name)
def test_an_installed_plugins_examples_resolve_by_name(plugin):
    package = _package(plugin)
    dist = tomllib.loads((plugin / "pyproject.toml").read_text())["project"]["name"]
    refs = {ex.ref: ex for ex in find_examples()}
    for path in sorted((package / "examples").glob("*.yaml")):
        ref = f"{plugin_prefix(dist)}:{path.stem}"
        assert ref in refs and refs[ref].path.read_bytes() == path.read_bytes()
        assert load_config(ref).to_dict() == load_config(path).to_dict()
        # the entry-point name works too, with _ or -
        ep = refs[ref].entry_point
        assert resolve_example(f"{ep.replace('_', '-')}:{path.stem}").read_bytes() == path.read_bytes()


def test_an_unknown_example_names_what_is_shipped():
    if not find_examples():
        pytest.skip("no plugin with examples installed")
    first = find_examples()[0].ref
    plugin = first.split(":")[0]
    with pytest.raises(ConfigError, match=rf"'{plugin}:nope' is neither a file nor an example .* that plugin ships: "
                                          rf".*{re.escape(first)}"):
        load_config(f"{plugin}:nope")
    with pytest.raises(ConfigError, match="installed examples: "):
        load_config("no-such-plugin:x")
    with pytest.raises(ConfigError, match="config file 'no/such.yaml' does not exist"):
        load_config("no/such.yaml")


def test_hook_register_config_sources(plugins, tmp_path):
    """A registered config source resolves a name that is no file; the first that knows it wins, one that returns
    None passes; a name no source knows is a missing file; the built-in source is registered by the examples
    built-in, not by the core's config loader."""
    from skyrl_core.hookspecs import hookimpl

    recipe = tmp_path / "small.yaml"
    recipe.write_text("train: {steps: 7}\n")

    class Recipes:
        @hookimpl
        def register_config_sources(self, register):
            register(lambda name: recipe if name == "recipe:small" else None, name="recipes")

    plugins.register_plugin(Recipes(), "recipes")
    assert {r.name: r.plugin for r in plugins.registry.items("config_sources")} == {
        "recipes": "recipes", "shipped_examples": "builtin:example_configs"}
    assert load_config("recipe:small").train.steps == 7
    with pytest.raises(ConfigError, match="config file 'recipe/none.yaml' does not exist"):
        load_config("recipe/none.yaml")


def test_plugins_and_tasks_list_the_examples():
    examples = find_examples()
    if not examples:
        pytest.skip("no plugin with examples installed")
    env = dict(os.environ, COLUMNS="200")
    env.pop("SKYRL_LOAD_PLUGINS", None)
    run = lambda *a: subprocess.run([sys.executable, "-m", "skyrl_core.cli", *a], capture_output=True, text=True,
                                    env=env, timeout=300)
    listing = {p["name"]: p for p in json.loads(run("plugins", "--json").stdout)}
    for ex in examples:
        assert ex.ref in listing[ex.entry_point]["examples"]
    tasks = {t["name"]: t for t in json.loads(run("tasks", "--json").stdout)}
    for ex in examples:
        for task in ex.tasks:
            if task in tasks:
                assert ex.ref in tasks[task]["examples"]
    assert "example configs: " in run("plugins").stdout


def test_no_document_points_at_a_moved_example():
    """Every root-examples path a README, doc, test or script mentions (`examples/X.yaml`) exists."""
    stale = []
    for path in ROOT.rglob("*"):
        if path.suffix not in (".md", ".py", ".sh", ".yaml", ".yml") and path.name not in ("run", "ci.sh"):
            continue
        rel = path.relative_to(ROOT)
        if rel.parts[0].startswith(".") or "templates" in rel.parts or rel.parts[0] in ("site", "runs") \
                or any(p.startswith(".") for p in rel.parts) or rel.name in ("CHANGELOG.md", Path(__file__).name):
            continue
        for m in re.finditer(r"(?<![\w/.-])examples/([\w-]+\.yaml)", path.read_text(errors="replace")):
            if not (ROOT / "examples" / m.group(1)).exists() and not m.group(1).startswith("letter"):
                stale.append(f"{rel}: examples/{m.group(1)}")
    assert not stale, stale
