"""Fixtures: a real system Chromium (skipped where none is installed, unless SKYRL_REQUIRE_CHROMIUM=1, which
ci.sh sets so CI fails instead), the pools closed after each test, the bundled model's tokenizer."""

from __future__ import annotations

import os

import pytest


@pytest.fixture(scope="session")
def chromium() -> str:
    from skyrl_osworld.browser import find_chromium

    try:
        return find_chromium()
    except FileNotFoundError as exc:
        if os.environ.get("SKYRL_REQUIRE_CHROMIUM") == "1":
            raise
        pytest.skip(str(exc))


@pytest.fixture
async def pools(chromium):
    """Yields after the test's browsers are launched lazily; closes every pool of the test's loop after."""
    from skyrl_osworld.browser import close_pools

    yield chromium
    await close_pools()


@pytest.fixture(scope="session")
def tokenizer():
    from skyrl_core.default_plugins.engines.models import load_tokenizer

    return load_tokenizer("smollm2-135m-instruct")
