"""Fixtures for skyrl-deep-research: the plugin loaded explicitly, the shipped HotpotQA corpus, a real local web
on 127.0.0.1 (uvicorn in a thread) and a web cache in a temporary directory."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ["SKYRL_LOAD_PLUGINS"] = "skyrl-deep-research"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="session")
def corpus():
    from skyrl_deep_research.corpus import load_corpus

    return load_corpus("hotpotqa")


@pytest.fixture(scope="session")
def rows():
    from skyrl_deep_research.corpus import hotpotqa_rows

    return hotpotqa_rows()


@pytest.fixture
def web(corpus):
    """A fresh local web (its own port, no faults queued), stopped afterwards."""
    from skyrl_deep_research.server import LocalWeb

    server = LocalWeb(corpus, api_key="test-key")
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def cache_path(tmp_path) -> Path:
    return tmp_path / "web-cache.sqlite"


@pytest.fixture
def fast_retry():
    """Retries that back off in milliseconds, with a short per-request timeout."""
    from skyrl_deep_research.providers import RetryPolicy

    return RetryPolicy(timeout_s=0.5, max_retries=2, backoff_s=0.01, max_backoff_s=0.05)
