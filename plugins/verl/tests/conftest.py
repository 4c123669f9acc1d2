"""Fixtures for the verl plugin's tests. Only this plugin is loaded from entry points (other installed plugins
would make registry assertions depend on the machine)."""

from __future__ import annotations

import os

import pytest

os.environ["SKYRL_LOAD_PLUGINS"] = "verl"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("RAY_DISABLE_IMPORT_WARNING", "1")


@pytest.fixture(scope="session")
def tokenizer():
    from skyrl_core.default_plugins.engines.models import load_tokenizer

    return load_tokenizer("smollm2-135m-instruct")


@pytest.fixture
def plugins():
    """A fresh plugin manager (built-ins + this plugin); the process-wide one is reset afterwards."""
    from skyrl_core import plugins as plugins_mod

    plugins_mod.reset_plugins()
    try:
        yield plugins_mod.get_plugins()
    finally:
        plugins_mod.reset_plugins()
