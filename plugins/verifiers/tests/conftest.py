"""Load only this plugin from the installed third-party plugins, so other installed plugins never change what
these tests see; datasets are read from the shipped files only (no hub access)."""

import os

import pytest

os.environ["SKYRL_LOAD_PLUGINS"] = "skyrl-verifiers"
os.environ["HF_DATASETS_OFFLINE"] = "1"
os.environ["HF_HUB_OFFLINE"] = "1"


@pytest.fixture(scope="session")
def tiny_chat_model_dir(tmp_path_factory) -> str:
    """A randomly initialised 1-layer Llama (hidden 16) with SmolLM2's tokenizer and chat template, saved once:
    the real engine and gateway in seconds, with nothing learned."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from skyrl_core.default_plugins.engines.tiny_model import save_tiny_chat_model

    return save_tiny_chat_model(tmp_path_factory.mktemp("tiny-chat-model"))
