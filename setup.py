"""Build hook for the skyrl-core wheel; everything else is declared in pyproject.toml.

The plugin template's only copy is ``cookiecutter/skyrl-plugin/`` at the repository root (the design card's top
level). A wheel (or an sdist built into one) carries it as ``skyrl_core/_template/skyrl-plugin`` so that
``skyrl new plugin`` works from a non-editable install; an editable install copies nothing and
``skyrl_core.default_plugins.scaffold`` finds the checkout's ``cookiecutter/skyrl-plugin`` instead. A
``package-dir`` mapping of a subpackage onto ``cookiecutter/`` would need ``packages`` listed by hand instead of
found, so the copy happens here, at build time.
"""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

TEMPLATE = Path(__file__).resolve().parent / "cookiecutter" / "skyrl-plugin"


class BuildPyWithTemplate(build_py):
    """``build_py`` that also copies the template into the built package (not in editable mode)."""

    def run(self):
        super().run()
        if self.editable_mode:
            return
        if not (TEMPLATE / "cookiecutter.json").is_file():
            raise SystemExit(f"the plugin template is missing: {TEMPLATE} (an sdist needs MANIFEST.in's graft)")
        dest = Path(self.build_lib, "skyrl_core", "_template", "skyrl-plugin")
        shutil.rmtree(dest, ignore_errors=True)
        shutil.copytree(TEMPLATE, dest, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))


setup(cmdclass={"build_py": BuildPyWithTemplate})
