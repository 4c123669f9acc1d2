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


@pytest.fixture(scope="module")
def hf_engine():
    """The real hf engine on SmolLM2-135M-Instruct (CPU, max_batch 8), one per test module.

    One intra-op thread while it lives: on a shared CI host torch's default threads spin and crawl
    (docs/engines.md); the previous setting is restored afterwards."""
    import asyncio

    torch = pytest.importorskip("torch")
    from skyrl_core.inference.hf import HFEngine

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    eng = HFEngine(max_batch=8, device="cpu")
    try:
        yield eng
    finally:
        asyncio.run(eng.close())
        torch.set_num_threads(threads)
