"""Shared fixtures. Tests never load installed third-party plugins by accident: SKYRL_LOAD_PLUGINS is set to
empty here, and tests that need a plugin load it explicitly."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ["SKYRL_LOAD_PLUGINS"] = ""
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"


@pytest.fixture
def plugins():
    """A fresh plugin manager with only the built-ins; the process-wide one is reset afterwards."""
    from skyrl_core import plugins as plugins_mod

    plugins_mod.reset_plugins()
    pm = plugins_mod.get_plugins()
    try:
        yield pm
    finally:
        plugins_mod.reset_plugins()


@pytest.fixture
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.skip(f"shared data folder {SHARED_DATA} is absent")
    return SHARED_DATA
