"""Documentation stays true: every hook documented with its signature, and every hook has a test."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

from skyrl_core import hookspecs

REPO = Path(__file__).resolve().parents[1]


def hook_specs():
    return {name: fn for name, fn in inspect.getmembers(hookspecs, inspect.isfunction) if name.startswith("register_")}


def test_every_hook_is_documented_with_its_signature():
    text = (REPO / "docs" / "hooks.md").read_text()
    documented = set(re.findall(r"^## (\w+)\(", text, flags=re.M))
    specs = hook_specs()
    assert documented == set(specs), f"docs/hooks.md and hookspecs.py differ: {documented ^ set(specs)}"
    for name, fn in specs.items():
        assert f"## {name}{inspect.signature(fn)}" in text, f"signature of {name} in docs/hooks.md is out of date"


def test_every_hook_has_a_docstring_of_one_line():
    for name, fn in hook_specs().items():
        assert fn.__doc__ and "\n" not in fn.__doc__.strip(), name


def test_every_hook_has_a_test():
    sources = "\n".join(p.read_text() for p in (REPO / "tests").rglob("test_*.py"))
    missing = [name for name in hook_specs() if f"def test_hook_{name}(" not in sources]
    assert not missing, f"hooks without a test_hook_<name>: {missing}"
