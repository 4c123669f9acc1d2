"""Fixtures for the docker runtime's tests, against a real Docker engine.

Without an engine the tests skip with the reason, unless ``SKYRL_REQUIRE_DOCKER=1`` (set by ``.ci/run`` once
``scripts/ensure-docker`` got one answering), where they fail: CI never passes this suite by skipping it.

Images: ``busybox`` (a few MB, from the host's busybox-static: fast runtime and attack tests) and the Debian base
image of :mod:`skyrl_swe.images` (python3, git; debootstrap once) for everything that runs tests. Every test is
checked for leaks: no container with the ``skyrl.runtime`` label and no new dangling image may remain.
"""

from __future__ import annotations

import io
import os
import shutil
import tarfile
from pathlib import Path

import pytest

BUSYBOX_IMAGE = "skyrl-test-busybox:latest"


@pytest.fixture(scope="session")
def docker_engine():
    from skyrl_swe.docker_client import docker_client

    try:
        return docker_client()
    except RuntimeError as exc:
        if os.environ.get("SKYRL_REQUIRE_DOCKER") == "1":
            pytest.fail(f"SKYRL_REQUIRE_DOCKER=1 but {exc}")
        pytest.skip(str(exc))


def _busybox_rootfs() -> bytes:
    """A root file system of the host's static busybox with one symlink per applet, and a /testbed."""
    import subprocess

    busybox = shutil.which("busybox")
    if busybox is None or "static" not in subprocess.run(["file", "-L", busybox], capture_output=True,
                                                         text=True).stdout:
        busybox = "/bin/busybox"
    if not Path(busybox).exists():
        pytest.skip("busybox-static is not installed (apt-get install busybox-static)")
    applets = subprocess.run([busybox, "--list"], capture_output=True, text=True, check=True).stdout.split()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        def add_dir(name: str, mode: int = 0o755) -> None:
            info = tarfile.TarInfo(name)
            info.type, info.mode = tarfile.DIRTYPE, mode
            tar.addfile(info)

        for d in ("bin", "etc", "tmp", "testbed", "proc", "dev", "sys"):
            add_dir(d, 0o1777 if d == "tmp" else 0o755)
        tar.add(busybox, "bin/busybox")
        for applet in applets:
            if applet != "busybox":
                info = tarfile.TarInfo(f"bin/{applet}")
                info.type, info.linkname = tarfile.SYMTYPE, "busybox"
                tar.addfile(info)
        for name, text in {"testbed/README": "hello from the image\n", "etc/passwd": "root:x:0:0::/root:/bin/sh\n"
                           "agent:x:1000:1000::/tmp:/bin/sh\n"}.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


@pytest.fixture(scope="session")
def busybox_image(docker_engine) -> str:
    from skyrl_swe.images import image_exists

    if not image_exists(docker_engine, BUSYBOX_IMAGE):
        repo, tag = BUSYBOX_IMAGE.split(":")
        docker_engine.api.import_image_from_data(_busybox_rootfs(), repository=repo, tag=tag,
                                                 changes=["LABEL skyrl.swe=test"])
    return BUSYBOX_IMAGE


@pytest.fixture(scope="session")
def base_image(docker_engine) -> str:
    from skyrl_swe.images import ImageBuildError, ensure_base_image

    try:
        ensure_base_image(docker_engine)
    except ImageBuildError as exc:
        if os.environ.get("SKYRL_REQUIRE_DOCKER") == "1":
            pytest.fail(f"SKYRL_REQUIRE_DOCKER=1 but the base image cannot be built: {exc}")
        pytest.skip(f"the docker base image cannot be built: {exc}")
    from skyrl_swe.images import BASE_IMAGE

    return BASE_IMAGE


def _dangling(client) -> set[str]:
    return {i.id for i in client.images.list(filters={"dangling": True})}


@pytest.fixture(autouse=True)
def no_leaks(request, docker_engine):
    """Counts what a test leaves behind: containers labelled skyrl.runtime, and dangling images it made."""
    from skyrl_swe.docker_runtime import leaked_containers

    before_containers = set(leaked_containers(docker_engine))
    before_images = _dangling(docker_engine)
    yield
    left = set(leaked_containers(docker_engine)) - before_containers
    new_images = _dangling(docker_engine) - before_images
    for name in left:  # clean up so one leak does not fail every later test
        docker_engine.api.remove_container(name, force=True)
    assert not left, f"containers leaked: {sorted(left)}"
    assert not new_images, f"dangling images leaked: {sorted(new_images)}"
