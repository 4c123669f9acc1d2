"""Every plugin in plugins/ follows the layout `skyrl new plugin` generates (docs/plugins.md): distribution
`skyrl-<dir>`, entry point `<dir_underscored>` -> package `skyrl_<dir_underscored>` with an `__init__.py`, a
`tests/` folder, a README with the standard sections, and a page in the docs site."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PLUGINS = sorted(p for p in (ROOT / "plugins").iterdir() if (p / "pyproject.toml").is_file())
SECTIONS = ("What it registers", "Install", "Use", "Measured", "Tests")


def test_there_are_plugins():
    assert {"swe", "verl"} <= {p.name for p in PLUGINS}


@pytest.mark.parametrize("plugin", PLUGINS, ids=lambda p: p.name)
def test_plugin_follows_the_template_layout(plugin: Path):
    meta = tomllib.loads((plugin / "pyproject.toml").read_text())
    under = plugin.name.replace("-", "_")
    assert meta["project"]["name"] == f"skyrl-{plugin.name}"
    assert meta["project"]["entry-points"]["skyrl"] == {under: f"skyrl_{under}"}
    assert (plugin / f"skyrl_{under}" / "__init__.py").is_file()
    assert any((plugin / "tests").glob("test_*.py"))


@pytest.mark.parametrize("plugin", PLUGINS, ids=lambda p: p.name)
def test_plugin_readme_has_the_standard_sections(plugin: Path):
    headings = re.findall(r"^## (.+)$", (plugin / "README.md").read_text(), flags=re.M)
    missing = [s for s in SECTIONS if not any(h.startswith(s) for h in headings)]
    assert not missing, f"plugins/{plugin.name}/README.md lacks sections {missing}; has {headings}"


@pytest.mark.parametrize("plugin", PLUGINS, ids=lambda p: p.name)
def test_plugin_has_a_docs_page_in_the_nav(plugin: Path):
    page = ROOT / "docs" / "plugins" / f"{plugin.name}.md"
    assert page.is_file(), f"add docs/plugins/{plugin.name}.md (include-markdown of the plugin README)"
    assert f"plugins/{plugin.name}/README.md" in page.read_text()
    assert f"plugins/{plugin.name}.md" in (ROOT / "mkdocs.yml").read_text()
