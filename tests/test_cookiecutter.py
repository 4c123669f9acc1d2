"""The plugin template: generate, check the exact tree, pip-install, and find it through `skyrl plugins`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

TEMPLATE = Path(__file__).resolve().parents[1] / "cookiecutter" / "skyrl-plugin"


def test_template_generates_the_documented_layout(tmp_path):
    cookiecutter = pytest.importorskip("cookiecutter.main")
    out = Path(cookiecutter.cookiecutter(str(TEMPLATE), no_input=True, output_dir=str(tmp_path),
                                         extra_context={"plugin_name": "letter-count"}))
    assert out.name == "skyrl-letter-count"
    files = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
    assert files == ["README.md", "pyproject.toml", "skyrl_letter_count/__init__.py",
                     "skyrl_letter_count/tasks.py", "skyrl_letter_count/tools.py",
                     "skyrl_letter_count/verifiers.py", "tests/test_plugin.py"]
    assert 'letter_count = "skyrl_letter_count"' in (out / "pyproject.toml").read_text()


@pytest.mark.slow
def test_generated_plugin_installs_lists_and_passes_its_tests(tmp_path):
    cookiecutter = pytest.importorskip("cookiecutter.main")
    out = Path(cookiecutter.cookiecutter(str(TEMPLATE), no_input=True, output_dir=str(tmp_path),
                                         extra_context={"plugin_name": "tmpl-check"}))
    pip = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", str(out)],
                         capture_output=True, text=True)
    assert pip.returncode == 0, pip.stderr
    try:
        env = {k: v for k, v in os.environ.items() if k != "SKYRL_LOAD_PLUGINS"}
        listing = subprocess.run([sys.executable, "-m", "skyrl_core.cli", "plugins", "--json"], capture_output=True,
                                 text=True, env=env, check=True)
        names = [p["name"] for p in json.loads(listing.stdout)]
        assert "tmpl_check" in names
        tests = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(out / "tests")],
                               capture_output=True, text=True, env=env, cwd=str(out))
        assert tests.returncode == 0, tests.stdout[-3000:]
        assert "3 passed" in tests.stdout
    finally:
        subprocess.run([sys.executable, "-m", "pip", "uninstall", "-y", "-q", "skyrl-tmpl-check"], capture_output=True)
