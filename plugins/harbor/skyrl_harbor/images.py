"""Docker images for Harbor tasks, built here without a registry.

No container registry answers on the machines skyrl runs on, so a task's ``FROM`` image cannot be pulled. Each
``FROM`` is mapped to a **local base** built from what does answer — Debian's package archive and the Python package
index — and the rest of the task's Dockerfile runs as written on top of it:

- ``skyrl-harbor-base:bookworm``: skyrl-swe's debootstrap'd Debian 12 ``minbase`` (python3 3.11, git, patch; see
  :mod:`skyrl_swe.images`) plus ``python3-pip``, ``python3-venv``, ``curl``, ``ca-certificates`` (with the host's
  CA bundle added, so HTTPS through this machine's proxy verifies), ``python`` → ``python3``, and
  ``PIP_BREAK_SYSTEM_PACKAGES=1`` (a ``python:`` image's ``pip install`` installs system-wide), and ``uv``/``uvx``
  from PyPI (Harbor's task template fetches uv from astral.sh at test time, which does not answer here; with uv
  already on the PATH its ``uvx ... pytest`` runs, taking pytest from PyPI). It stands in for
  ``debian``, ``ubuntu``, ``python`` and ``buildpack-deps`` images (Docker Hub's or their ECR mirror's) and
  Terminal-Bench's ``t-bench/ubuntu-*`` / ``t-bench/python-*`` bases. **It is not the upstream image**: Ubuntu's
  package names mostly exist in Debian, but versions differ (python 3.11 whatever the tag says), and every run
  names the substitution (:attr:`TaskImage.substitution`).
- any other base (``node``, ``rust``, ``golang``, ``nvidia/cuda``, a private registry...) has no local equivalent:
  the build fails with reason class ``base-unmapped``.

A task image is tagged ``skyrl-harbor/<task>:<hash of the base id, the Dockerfile and the context>`` and reused
while those are unchanged. Builds run in the engine with one CPU (``cpuset 0``) and a low CPU share, and with the
network (``RUN apt-get`` and ``pip`` reach their archives; anything else a step downloads fails). A failed build
is an :class:`ImageBuildError` whose ``reason`` is one of :data:`REASONS`.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

import attrs

from .environment import _logical_lines
from .taskdir import HarborTask, HarborTaskError

BASE_IMAGE = "skyrl-harbor-base:bookworm"
LABEL = "skyrl.harbor"
UV_VERSION = "0.9.7"  # the version Harbor's task template installs
BASE_NOTE = "Debian 12 bookworm minbase + python3 3.11, pip, venv, curl, uv (built here; not the upstream image)"
# images the local base stands in for (the name without registry tag; a t-bench base by its path's last part)
MAPPED = re.compile(r"^(docker\.io/|public\.ecr\.aws/docker/)?(library/)?(debian|ubuntu|python|buildpack-deps)$|"
                    r"^ghcr\.io/laude-institute/t-bench/(ubuntu|python)-[0-9-]+$")
HOST_CA = Path("/etc/ssl/certs/ca-certificates.crt")
BUILD_CPUSET = os.environ.get("SKYRL_HARBOR_BUILD_CPUS", "0")  # builds load one core, not all of them
# why a build failed, read from the build's log (first match wins); "base-unmapped" is decided before building
REASONS = ("base-unmapped", "no-dockerfile", "apt-package-missing", "download-elsewhere", "pip-failed",
           "build-step-failed", "engine-error")
_LOG_CLASSES = (  # a host that does not answer first: pip says "no matching distribution" after failing to reach it
    ("download-elsewhere", re.compile(r"(Could not resolve host|Temporary failure in name resolution|"
                                      r"Failed to connect to|Connection refused|Network is unreachable|"
                                      r"curl: \(\d+\)|wget: unable|ERROR \d{3}|unable to resolve|NewConnectionError|"
                                      r"fatal: unable to access|Name or service not known)", re.I)),
    ("apt-package-missing", re.compile(r"E: (Unable to locate package|Package '[^']+' has no installation candidate|"
                                       r"Version '[^']+' for '[^']+' was not found)")),
    ("pip-failed", re.compile(r"(No matching distribution found|Could not find a version that satisfies|"
                              r"ResolutionImpossible|error: subprocess-exited-with-error)")),
)


class ImageBuildError(HarborTaskError):
    """A task image could not be built. ``reason``: one of :data:`REASONS`; the message names the Dockerfile
    line or the build step's own error."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


@attrs.define(frozen=True)
class TaskImage:
    """A built task image: ``tag``, ``status`` (``built`` or ``cached``), ``substitution`` (``"<FROM image> -> <local
    base> (<what it is>)"``, one per mapped ``FROM``, joined by ``; ``) and ``seconds`` the build took."""

    tag: str
    status: str
    substitution: str
    seconds: float


def swe_images() -> Any:
    """skyrl-swe's image module (its debootstrap base and the engine helpers this path reuses). Raises
    RuntimeError naming the fix when skyrl-swe is not installed."""
    try:
        from skyrl_swe import images
    except ImportError as exc:
        raise RuntimeError(f"the Harbor docker path builds on skyrl-swe's Debian base image and docker runtime, "
                           f"which are not installed ({exc}): pip install the skyrl checkout's plugins/swe") from None
    return images


def local_base_for(image: str) -> str | None:
    """The local base standing in for ``FROM image`` (:data:`BASE_IMAGE`), or None when there is none."""
    name = image.split("@")[0]
    name = name.rsplit(":", 1)[0] if ":" in name.rsplit("/", 1)[-1] else name
    return BASE_IMAGE if MAPPED.match(name) else None


def rewrite_dockerfile(task: HarborTask) -> tuple[str, list[str]]:
    """The task's Dockerfile with each ``FROM`` of a registry image replaced by its local base, and the
    substitutions made. ``FROM`` of an earlier stage's name stays. Raises ImageBuildError (``no-dockerfile``
    when the task has no Dockerfile, ``base-unmapped`` naming the line when a base has no local equivalent)."""
    dockerfile = task.dockerfile
    if not dockerfile.is_file():
        named = f"; [environment] docker_image '{task.docker_image}' names a prebuilt image" \
            if task.docker_image else ""
        raise ImageBuildError(f"{dockerfile}: missing{named}", "no-dockerfile")
    text = dockerfile.read_text(encoding="utf-8")
    stages: set[str] = set()
    subs: list[str] = []
    replaced = {}
    for number, line in _logical_lines(text):
        keyword, _, args = line.partition(" ")
        if keyword.upper() != "FROM":
            continue
        parts = [p for p in args.split() if not p.startswith("--platform")]
        image = parts[0] if parts else ""
        if len(parts) >= 3 and parts[1].upper() == "AS":
            stages.add(parts[2].lower())
        if image.lower() in stages - ({parts[2].lower()} if len(parts) >= 3 else set()):
            continue
        base = local_base_for(image)
        if base is None:
            raise ImageBuildError(f"{dockerfile}:{number}: FROM {image!r} — no local base stands in for it "
                                  f"(mapped here: debian, ubuntu, python, buildpack-deps and the t-bench ubuntu/python "
                                  f"bases, to {BASE_IMAGE}); no registry answers to pull it", "base-unmapped")
        replaced[number] = f"FROM {base}" + (f" AS {parts[2]}" if len(parts) >= 3 else "")
        subs.append(f"{image} -> {base} ({BASE_NOTE})")
    if not replaced:
        raise ImageBuildError(f"{dockerfile}: no FROM line (a Dockerfile names its base image)", "no-dockerfile")
    lines = text.splitlines()
    out, skip_continuation = [], False
    logical = dict(_logical_lines(text))
    for number, raw in enumerate(lines, 1):
        if skip_continuation:
            skip_continuation = raw.rstrip().endswith("\\")
            continue
        if number in replaced:
            out.append(replaced[number])
            skip_continuation = raw.rstrip().endswith("\\") and number in logical
            continue
        out.append(raw)
    return "\n".join(out) + "\n", list(dict.fromkeys(subs))


def classify(log_text: str) -> str:
    """The reason class of a failed build from its log: ``apt-package-missing``, ``pip-failed``,
    ``download-elsewhere`` (a step fetched from a host that does not answer here), else ``build-step-failed``."""
    for reason, pattern in _LOG_CLASSES:
        if pattern.search(log_text):
            return reason
    return "build-step-failed"


def _digest(*parts: str) -> str:
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]


def _tree_digest(root: Path) -> str:
    h = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        h.update(str(path.relative_to(root)).encode() + b"\0")
        if path.is_file() and not path.is_symlink():
            h.update(hashlib.sha256(path.read_bytes()).digest())
    return h.hexdigest()[:16]


def _slug(text: str) -> str:
    return ("".join(c if c.isalnum() or c in "-_." else "-" for c in text.lower()).strip("-.") or "task")[:100]


def _build(client: Any, context: Path, tag: str, labels: dict[str, str], timeout_s: float) -> None:
    """``docker build`` of ``context`` with one CPU and a low share; raises ImageBuildError with the log's class."""
    import docker

    try:
        client.images.build(path=str(context), tag=tag, rm=True, forcerm=True, labels=labels, network_mode="default",
                             timeout=int(timeout_s), container_limits={"cpusetcpus": BUILD_CPUSET, "cpushares": 256})
    except docker.errors.BuildError as exc:
        log = "".join(str(chunk.get("stream") or chunk.get("error") or "") for chunk in exc.build_log)
        raise ImageBuildError(f"docker build of {tag} failed: {exc.msg}\n{log[-2500:]}", classify(log)) from None
    except docker.errors.APIError as exc:
        raise ImageBuildError(f"docker build of {tag}: the engine refused it: {exc}", "engine-error") from None
    except Exception as exc:  # a read timeout of the engine's stream: the build outran its time
        raise ImageBuildError(f"docker build of {tag} did not finish: {type(exc).__name__}: {exc}",
                              "engine-error") from None


def ensure_base_image(client: Any, refresh: bool = False) -> str:
    """The id of :data:`BASE_IMAGE`, built on skyrl-swe's debootstrap base when the engine lacks it (about a
    minute once: ``apt-get`` from Debian's archive). Raises ImageBuildError naming what failed; RuntimeError
    when skyrl-swe (which makes the Debian root file system) is not installed."""
    swe = swe_images()
    if not refresh and swe.image_exists(client, BASE_IMAGE):
        return client.images.get(BASE_IMAGE).id
    swe.ensure_base_image(client)
    debian = swe.BASE_IMAGE
    with tempfile.TemporaryDirectory(prefix="skyrl-harbor-base-") as tmp:
        ctx = Path(tmp)
        ca = HOST_CA.read_bytes() if HOST_CA.is_file() else b""
        (ctx / "host-ca.crt").write_bytes(ca)
        (ctx / "Dockerfile").write_text(
            f"FROM {debian}\n"
            "COPY host-ca.crt /usr/local/share/ca-certificates/skyrl-host-ca.crt\n"
            "RUN apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "
            "ca-certificates python3-pip python3-venv curl procps >/dev/null && update-ca-certificates >/dev/null "
            "&& ln -sf /usr/bin/python3 /usr/local/bin/python && ln -sf /usr/bin/pip3 /usr/local/bin/pip "
            "&& rm -rf /var/lib/apt/lists/*\n"
            "ENV PIP_BREAK_SYSTEM_PACKAGES=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore "
            "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt REQUESTS_CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt "
            "CURL_CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt UV_NATIVE_TLS=1\n"
            # uv from PyPI: Harbor's test template installs it from astral.sh, which does not answer here
            f"RUN pip install -q --no-cache-dir 'uv=={UV_VERSION}'\n"
            'CMD ["/bin/bash"]\n')
        _build(client, ctx, BASE_IMAGE, {LABEL: "base"}, timeout_s=900)
    return client.images.get(BASE_IMAGE).id


def build_task_image(client: Any, task: HarborTask, rebuild: bool = False, timeout_s: float = 900) -> TaskImage:
    """Build (or reuse) the image of ``task``: its Dockerfile with each base mapped (:func:`rewrite_dockerfile`),
    ``environment/`` as the build context. Raises ImageBuildError with its reason class."""
    import time

    image_exists = swe_images().image_exists
    t0 = time.monotonic()
    dockerfile, subs = rewrite_dockerfile(task)
    base_id = ensure_base_image(client)
    context = task.path / "environment"
    tag = f"skyrl-harbor/{_slug(task.name)}:{_digest(base_id, dockerfile, _tree_digest(context))}"
    if image_exists(client, tag) and not rebuild:
        return TaskImage(tag, "cached", "; ".join(subs), round(time.monotonic() - t0, 1))
    with tempfile.TemporaryDirectory(prefix="skyrl-harbor-ctx-") as tmp:
        ctx = Path(tmp) / "ctx"
        shutil.copytree(context, ctx, symlinks=True)
        (ctx / "Dockerfile").write_text(dockerfile)
        _build(client, ctx, tag, {LABEL: "task", "skyrl.harbor.task": task.name,
                                  "skyrl.harbor.substitution": "; ".join(subs)}, timeout_s)
    return TaskImage(tag, "built", "; ".join(subs), round(time.monotonic() - t0, 1))
