"""Shared fixtures. Tests never load installed third-party plugins by accident: SKYRL_LOAD_PLUGINS is set to
empty here, and tests that need a plugin load it explicitly."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import pytest

os.environ["SKYRL_LOAD_PLUGINS"] = ""
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO = Path(__file__).resolve().parents[1]


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



@contextlib.contextmanager
def _cpu_engine(**kwargs):
    """An HFEngine on the CPU with one intra-op thread while it lives (skipped without torch)."""
    pytest.importorskip("torch")
    from skyrl_core.default_plugins.engines.tiny_model import cpu_engine

    with cpu_engine(**kwargs) as eng:
        yield eng


@pytest.fixture(scope="module")
def hf_engine():
    """The real hf engine on SmolLM2-135M-Instruct (CPU, max_batch 8), one per test module."""
    with _cpu_engine(max_batch=8) as eng:
        yield eng


@pytest.fixture(scope="module")
def tiny_hf_engine(tiny_chat_model_dir):
    """The real hf engine on the tiny random model (:func:`tiny_chat_model_dir`; CPU, max_batch 4)."""
    with _cpu_engine(model=tiny_chat_model_dir, max_batch=4) as eng:
        yield eng


@pytest.fixture(scope="session")
def tiny_chat_model_dir(tmp_path_factory) -> str:
    """A randomly initialised 1-layer Llama (hidden 16) with SmolLM2's tokenizer and chat template, saved once
    per session: the real rollout and training paths in seconds, with nothing learned."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from skyrl_core.default_plugins.engines.tiny_model import save_tiny_chat_model

    return save_tiny_chat_model(tmp_path_factory.mktemp("tiny-chat-model"))
