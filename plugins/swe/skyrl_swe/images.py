"""Docker images for repository tasks, built here without a registry (``skyrl swe build-images``).

Three layers, each cached by content:

- **the base image** ``skyrl-swe-base:bookworm``: a Debian bookworm ``minbase`` root file system made with
  ``debootstrap`` (python3, git, patch), kept as a tarball (``$SKYRL_SWE_BASE_DIR``, else ``<cache>/base/``) and imported with
  ``docker import``. Building it takes about 40 s and 260 MB once; an engine that keeps its images reuses it, and
  an engine that lost it re-imports the tarball in seconds.
- **an environment image** per repository version: the base plus a venv at ``/opt/skyrl-env`` holding the row's
  test packages (its ``pytest`` pin, ``requirements``, ``pip_packages``), downloaded on the host with pip (the
  image build itself runs without network) — tag ``skyrl-swe-env:<hash of base id and packages>``.
- **an instance image**: the environment image plus the repository at its base commit in ``/testbed`` (a fresh
  git repository with one commit: history cut at the base commit, no remotes), the row's ``install`` command run
  there (without network unless ``--network``), everything readable by the unprivileged runtime user — tag
  ``skyrl-swe/<instance id>:<hash of env id and repository content>``, also tagged ``:latest``.

An instance whose row names an ``image``, or whose SWE-bench harness image
(``swebench/sweb.eval.x86_64.<id>:latest``) exists locally, is not built: that image is used as it is.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterable

from .data import docker_image_for, resolve_repository
from .docker_client import docker_client
from .environments import RepoEnvironments, tree_digest  # the same content hash keys the sandbox's install layers
from .paths import cache_dir

log = logging.getLogger(__name__)

BASE_IMAGE = "skyrl-swe-base:bookworm"
BASE_PACKAGES = ("python3", "git", "patch")
ENV_PREFIX = "/opt/skyrl-env"
LABEL = "skyrl.swe"  # every image built here carries it (value: base / env / instance)
DEFAULT_MIRROR = "http://deb.debian.org/debian"


class ImageBuildError(RuntimeError):
    """An image could not be built; the message names the step and the tool's own error."""


def _cache() -> Path:
    return cache_dir()


_TAG_LOCKS: dict[str, threading.Lock] = {}
_TAG_GUARD = threading.Lock()


@contextmanager
def tag_lock(tag: str):
    """Held while one image tag is checked and built: by one thread of this process, and by one process on this
    host (an ``fcntl`` lock on a file under the cache). Two trajectories of one repository version (two instances,
    or samples of one) would otherwise build the same tag at once, and the second ``tag`` would leave the first
    image dangling. Blocks until the other builder is done, then the caller sees its image."""
    import fcntl

    with _TAG_GUARD:
        lock = _TAG_LOCKS.setdefault(tag, threading.Lock())
    locks = _cache() / "build-locks"
    locks.mkdir(parents=True, exist_ok=True)
    with lock, open(locks / (hashlib.sha256(tag.encode()).hexdigest()[:32] + ".lock"), "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def apt_mirror() -> str:
    """The Debian mirror apt already uses on this host (its first ``URIs:`` / ``deb`` line), else deb.debian.org."""
    for path in [Path("/etc/apt/sources.list"), *sorted(Path("/etc/apt/sources.list.d").glob("*"))]:
        try:
            text = path.read_text()
        except OSError:
            continue
        for line in text.splitlines():
            parts = line.split()
            if parts[:1] == ["URIs:"] and len(parts) > 1 and "security" not in parts[1]:
                return parts[1]
            if parts[:1] == ["deb"]:
                urls = [p for p in parts[1:] if p.startswith("http")]
                if urls and "security" not in urls[0]:
                    return urls[0]
    return DEFAULT_MIRROR


def image_exists(client: Any, name: str) -> bool:
    import docker

    try:
        client.images.get(name)
        return True
    except docker.errors.NotFound:
        return False
    except docker.errors.APIError as exc:
        if exc.status_code == 400:  # not a valid reference (a row's odd id): no such image here
            return False
        raise


# -- the base image -----------------------------------------------------------------------------------------------
def base_rootfs(refresh: bool = False) -> Path:
    """The bookworm minbase root file system as a tarball (``<cache>/base/bookworm-minbase.tar``), made with
    debootstrap on first use (root only; about 40 s). ``$SKYRL_SWE_BASE_DIR`` moves it out of the cache (CI keeps it
    in ``/var/cache/skyrl-swe``, which outlives a checkout). Raises ImageBuildError naming what is missing."""
    out = Path(os.environ.get("SKYRL_SWE_BASE_DIR") or _cache() / "base") / "bookworm-minbase.tar"
    if out.exists() and not refresh:
        return out
    if shutil.which("debootstrap") is None:
        raise ImageBuildError("building the base image needs debootstrap: apt-get install -y debootstrap")
    if os.geteuid() != 0:
        raise ImageBuildError("debootstrap needs root to build the base image; run `skyrl swe build-images --base` "
                              "as root once (the image is then kept by the engine)")
    out.parent.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="skyrl-rootfs-", dir=out.parent))
    try:
        proc = subprocess.run(["debootstrap", "--variant=minbase", f"--include={','.join(BASE_PACKAGES)}",
                               "bookworm", str(root), apt_mirror()], capture_output=True, text=True)
        if proc.returncode != 0:
            raise ImageBuildError(f"debootstrap failed (exit {proc.returncode}): {proc.stdout[-1500:]}"
                                  f"{proc.stderr[-1500:]}")
        for cache in ("var/cache/apt/archives", "var/lib/apt/lists"):
            for child in (root / cache).glob("*"):
                if child.is_file():
                    child.unlink()
        part = out.with_suffix(".part")
        subprocess.run(["tar", "-C", str(root), "--numeric-owner", "-cf", str(part), "."], check=True)
        part.replace(out)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return out


def ensure_base_image(client: Any, refresh: bool = False) -> str:
    """The id of :data:`BASE_IMAGE`, imported from :func:`base_rootfs` when the engine lacks it."""
    if not refresh and image_exists(client, BASE_IMAGE):
        return client.images.get(BASE_IMAGE).id
    tar = base_rootfs(refresh=refresh)
    repo, tag = BASE_IMAGE.split(":")
    client.api.import_image_from_file(str(tar), repository=repo, tag=tag,
                                      changes=[f"LABEL {LABEL}=base", 'CMD ["/bin/bash"]'])
    return client.images.get(BASE_IMAGE).id


# -- what an instance needs ----------------------------------------------------------------------------------------
def test_packages(data: dict) -> list[str]:
    """The packages a row's tests need: its ``pytest`` pin (else pytest), ``requirements``, ``pip_packages``.
    (Read here rather than from ``RepoEnvironments`` so the two runtimes' builders can change independently.)"""
    extra = data.get("pip_packages") or []
    if isinstance(extra, str):
        extra = extra.split()
    return [str(data.get("pytest") or "pytest"), *[str(r) for r in data.get("requirements") or []],
            *[str(p) for p in extra]]


def _digest(*parts: str) -> str:
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]


def _slug(text: str) -> str:
    out = "".join(c if c.isalnum() or c in "-_." else "-" for c in text.lower()).strip("-.")
    return out[:120] or "instance"


def instance_image_name(data: dict) -> str:
    """The ``:latest`` tag :func:`build_instance_image` gives an instance's image."""
    return f"skyrl-swe/{_slug(data['instance_id'])}:latest"


def swebench_image_name(data: dict) -> str:
    return docker_image_for({k: v for k, v in data.items() if k != "image"})


def local_image_for(client: Any, data: dict) -> str | None:
    """The image an instance runs in when one exists locally: the row's ``image``, the one built here, else the
    SWE-bench harness image; None when none is present."""
    for name in filter(None, [data.get("image"), instance_image_name(data), swebench_image_name(data)]):
        if image_exists(client, name):
            return name
    return None


# -- building --------------------------------------------------------------------------------------------------------
def _build(client: Any, context: Path, tag: str, labels: dict[str, str], network: bool) -> None:
    import docker

    try:
        client.images.build(path=str(context), tag=tag, rm=True, forcerm=True, labels=labels,
                            network_mode="default" if network else "none")
    except docker.errors.BuildError as exc:
        tail = "".join(str(chunk.get("stream") or chunk.get("error") or "") for chunk in exc.build_log)[-3000:]
        raise ImageBuildError(f"docker build of {tag} failed: {exc.msg}\n{tail}") from None


def _download(packages: list[str], dest: Path) -> None:
    """Install ``packages`` for the image's Python (CPython 3.11, manylinux x86-64) into ``dest`` with the host's
    pip and its index settings; wheels only, so nothing is built on the host."""
    argv = [sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--target", str(dest),
            "--only-binary=:all:", "--implementation", "cp", "--python-version", "3.11",
            "--platform", "manylinux2014_x86_64", "--platform", "manylinux_2_28_x86_64", "--platform", "any",
            *packages]
    proc = subprocess.run(argv, capture_output=True, text=True)
    if proc.returncode != 0:
        raise ImageBuildError(f"pip could not fetch the test packages {' '.join(packages)}: {proc.stderr[-2000:]}")


def ensure_env_image(client: Any, data: dict, base_id: str | None = None) -> str:
    """The environment image of a row's repository version (built when missing); returns its tag."""
    base_id = base_id or ensure_base_image(client)
    # pip, setuptools and wheel too: a row's install step (`python -m pip install -e .`) runs in the offline
    # instance build, without an index or build isolation (the instance Dockerfile sets both)
    packages = sorted(set(test_packages(data)) | {"pip", "setuptools", "wheel"})
    tag = f"skyrl-swe-env:{_digest(base_id, *sorted(packages))}"
    with tag_lock(tag):
        if not image_exists(client, tag):
            _build_env_image(client, tag, packages)
    return tag


def _build_env_image(client: Any, tag: str, packages: list[str]) -> None:
    with tempfile.TemporaryDirectory(prefix="skyrl-envctx-") as tmp:
        ctx = Path(tmp)
        _download(packages, ctx / "site")
        (ctx / "Dockerfile").write_text(
            f"FROM {BASE_IMAGE}\n"
            f"RUN python3 -m venv --without-pip {ENV_PREFIX} && ln -s {ENV_PREFIX}/bin/python /usr/local/bin/python\n"
            f"COPY site/ {ENV_PREFIX}/lib/python3.11/site-packages/\n"
            f"RUN chmod -R a+rX {ENV_PREFIX}\n"
            f"ENV PATH={ENV_PREFIX}/bin:/usr/local/bin:/usr/bin:/bin VIRTUAL_ENV={ENV_PREFIX}\n")
        _build(client, ctx, tag, {LABEL: "env", "skyrl.packages": json.dumps(packages)}, network=False)


def build_instance_image(client: Any, data: dict, network: bool = False, rebuild: bool = False,
                         base_id: str | None = None) -> tuple[str, str]:
    """Build (or find) the image of one instance; returns ``(image name, what happened)`` where what happened
    is ``exists`` (the row's or a SWE-bench image is present), ``cached`` (the same content was built before)
    or ``built``. Raises ImageBuildError / RepoUnavailable naming the cause."""
    for name in filter(None, [data.get("image"), swebench_image_name(data)]):
        if image_exists(client, name):
            return name, "exists"
    source = resolve_repository(data, data.get("repo_options"))
    env = ensure_env_image(client, data, base_id)
    env_id = client.images.get(env).id
    # the row's environment_setup, pre_install and install commands, in the repository (as the sandbox runs them)
    commands = RepoEnvironments.setup_for(data) + RepoEnvironments.install_for(data)
    digest = _digest(env_id, tree_digest(source), *commands)
    tag = f"skyrl-swe/{_slug(data['instance_id'])}:{digest}"
    latest = instance_image_name(data)
    with tag_lock(tag):  # two samples of one instance must not build its tag twice
        if image_exists(client, tag) and not rebuild:
            client.images.get(tag).tag(latest.split(":")[0], "latest")
            return latest, "cached"
        with tempfile.TemporaryDirectory(prefix="skyrl-instctx-") as tmp:
            ctx = Path(tmp)
            shutil.copytree(source, ctx / "repo", symlinks=True, ignore=shutil.ignore_patterns(".git"))
            git = "git -c user.name=skyrl -c user.email=skyrl@localhost -c commit.gpgsign=false"
            steps = [f"COPY repo/ /testbed/",
                     f"RUN cd /testbed && {git} init -q && {git} add -A -f . && "
                     f"{git} commit -q --no-verify -m 'base commit {data.get('base_commit') or ''}'".rstrip()]
            offline = "" if network else " PIP_NO_INDEX=1 PIP_NO_BUILD_ISOLATION=0"
            if commands:  # rows say `pip install ...`: the environment's venv has pip as a module, give it a command
                steps.append(f"RUN [ -x {ENV_PREFIX}/bin/pip ] || {{ printf '#!/bin/sh\\nexec {ENV_PREFIX}/bin/python "
                             f"-m pip \"$@\"\\n' > {ENV_PREFIX}/bin/pip && chmod 755 {ENV_PREFIX}/bin/pip; }}")
            for command in commands:
                steps.append(f"RUN cd /testbed && export PIP_DISABLE_PIP_VERSION_CHECK=1{offline} && {command}")
            steps.append("RUN chmod -R a+rX /testbed")
            (ctx / "Dockerfile").write_text(f"FROM {env}\n" + "\n".join(steps) + "\nWORKDIR /testbed\n")
            _build(client, ctx, tag, {LABEL: "instance", "skyrl.instance_id": data["instance_id"]}, network=network)
        client.images.get(tag).tag(latest.split(":")[0], "latest")
    return latest, "built"


def build_images(rows: Iterable[dict], network: bool = False, rebuild: bool = False,
                 progress: Any = None) -> list[dict]:
    """Build every row's image; returns ``[{instance_id, image, status, seconds, error}]`` (a failure ends only
    its row). ``progress(row_result)`` is called after each."""
    import time

    client = docker_client()
    base_id = ensure_base_image(client)
    out = []
    for data in rows:
        t0 = time.monotonic()
        entry: dict[str, Any] = {"instance_id": data["instance_id"], "image": None, "status": "failed", "error": None}
        try:
            entry["image"], entry["status"] = build_instance_image(client, data, network, rebuild, base_id)
        except Exception as exc:  # one broken row does not stop the others
            entry["error"] = f"{type(exc).__name__}: {exc}"
        entry["seconds"] = round(time.monotonic() - t0, 1)
        out.append(entry)
        if progress is not None:
            progress(entry)
    return out


def image_archive(client: Any, image: str, path: str) -> io.BytesIO:
    """The tar stream of ``path`` in ``image`` (read from a created, never started container, removed after)."""
    probe = client.containers.create(image, command=["true"], network_disabled=True,
                                     labels={"skyrl.runtime": "probe", "skyrl.pid": str(os.getpid())})
    try:
        stream, _ = probe.get_archive(path)
        return io.BytesIO(b"".join(stream))
    finally:
        probe.remove(force=True)


def extract_tree(buf: io.BytesIO, prefix: str, dest: Path) -> None:
    """Unpack the members under ``prefix/`` of a ``get_archive`` tar into ``dest`` (tar filter: no absolute
    paths, no links out, no device files)."""
    with tarfile.open(fileobj=buf) as tar:
        members = []
        for m in tar.getmembers():
            if m.name.startswith(prefix + "/"):
                m.name = m.name[len(prefix) + 1:]
                members.append(m)
        tar.extractall(dest, members=members, filter="tar")
