"""Fixtures for the Harbor docker path's tests, against a real Docker engine.

Without an engine (or skyrl-swe's Debian base image, or the network its apt-get needs to build the Harbor base)
the tests skip with the reason, unless ``SKYRL_REQUIRE_DOCKER=1`` (set by ``.ci/run`` once
``scripts/ensure-docker`` got an engine answering and the base image built), where they fail. Every test is
checked for leaks: no container with the ``skyrl.runtime`` label may remain.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

FIXTURE = Path(__file__).parents[1] / "fixtures" / "docker-tasks" / "sort-numbers"


def _unavailable(why: str) -> None:
    if os.environ.get("SKYRL_REQUIRE_DOCKER") == "1":
        pytest.fail(f"SKYRL_REQUIRE_DOCKER=1 but {why}")
    pytest.skip(why)


@pytest.fixture(scope="session")
def docker_engine():
    pytest.importorskip("skyrl_swe", reason="the docker path runs on skyrl-swe's docker runtime")
    from skyrl_swe.docker_client import docker_client

    try:
        return docker_client()
    except RuntimeError as exc:
        _unavailable(str(exc))


@pytest.fixture(scope="session")
def harbor_base(docker_engine) -> str:
    from skyrl_harbor.images import BASE_IMAGE, ImageBuildError, ensure_base_image

    try:
        ensure_base_image(docker_engine)
    except (ImageBuildError, RuntimeError) as exc:
        _unavailable(f"the harbor base image cannot be built: {str(exc)[:300]}")
    return BASE_IMAGE


@pytest.fixture(autouse=True)
def no_leaked_containers(request):
    yield
    if "docker_engine" not in request.fixturenames:
        return
    from skyrl_swe.docker_runtime import leaked_containers

    assert leaked_containers() == []


@pytest.fixture
def sort_task(harbor_base, tmp_path) -> Path:
    """A copy of the fixture task (a test may edit its copy)."""
    import shutil

    dest = tmp_path / "sort-numbers"
    shutil.copytree(FIXTURE, dest)
    return dest
