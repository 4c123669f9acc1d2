"""Which Harbor environments run in the bubblewrap sandbox, read from the task's ``environment/Dockerfile``.

The rule: a task runs in the sandbox when its Dockerfile only names a plain base image and lays files out —
``FROM`` a ``python``, ``debian`` or ``ubuntu`` image (no registry host, no build stage), then only ``WORKDIR``,
``ENV``, ``COPY``/``ADD`` of files from ``environment/`` (no ``--from``, no URL), and the instructions that change
nothing on disk (``CMD``, ``ENTRYPOINT``, ``LABEL``, ``EXPOSE``, ``USER``, ``SHELL``, ``ARG``). The sandbox then
gives the host's system (``/usr``, read-only) and the host's Python in place of the image's: close enough for a
task that installs nothing. Anything else (a ``RUN`` step, another base) needs the image built — the docker path
(task ``harbor_docker``, :mod:`skyrl_harbor.images`): :func:`sandbox_plan` refuses it with
:class:`HarborEnvironmentError` naming the Dockerfile line.
So does a ``tests/test.sh`` that installs its own tools when it runs (``apt-get``, ``curl``, ``uvx``, ``pip``...:
Harbor's task template does), since the sandbox has neither root nor, by default, the network.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path, PurePosixPath

import attrs

from .taskdir import HarborTask, HarborTaskError

BASES = ("python", "debian", "ubuntu")
HARMLESS = {"CMD", "ENTRYPOINT", "LABEL", "EXPOSE", "USER", "SHELL", "ARG", "MAINTAINER", "STOPSIGNAL",
            "HEALTHCHECK", "VOLUME"}
DEFAULT_WORKDIR = "/app"


class HarborEnvironmentError(HarborTaskError):
    """A task whose environment the sandbox cannot stand in for (the Dockerfile line is named)."""


@attrs.define(frozen=True)
class SandboxPlan:
    """How the sandbox stands in for the image: ``workdir`` (absolute, where the workspace is mounted and
    commands start), ``env`` (from ``ENV``), ``copies`` ((source under environment/, destination relative to
    the workdir)), ``base`` (the ``FROM`` image)."""

    base: str
    workdir: str
    env: dict[str, str]
    copies: tuple[tuple[Path, str], ...]


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """(line number, instruction) with comments dropped and backslash continuations joined."""
    out: list[tuple[int, str]] = []
    pending, start = "", 0
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if not pending:
            start = number
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        out.append((start, pending + line))
        pending = ""
    if pending:
        out.append((start, pending))
    return out


def _env_pairs(args: str) -> dict[str, str]:
    parts = shlex.split(args)
    if len(parts) >= 2 and "=" not in parts[0]:  # legacy `ENV KEY value words`
        return {parts[0]: " ".join(parts[1:])}
    return dict(p.split("=", 1) for p in parts if "=" in p)


# commands a test.sh runs to install its own tools at verification time: they need root and the network, which
# the sandbox gives neither (Harbor's task template does this: apt-get curl, the uv installer, uvx pytest)
INSTALLERS = re.compile(r"(^|[\s;&|(])(apt-get|apt|apk|yum|dnf|curl|wget|uvx|uv|pip|pip3|npm|conda)\s")


def _check_test_script(task: HarborTask) -> None:
    test_sh = task.tests_dir / "test.sh"
    for number, line in enumerate(test_sh.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
        code = line.split("#", 1)[0]
        found = INSTALLERS.search(code)
        if found:
            raise HarborEnvironmentError(
                f"{test_sh}:{number}: {line.strip()[:120]!r} — the tests install their tools when they run "
                f"({found.group(2)}), which needs root and the network; the sandbox runs tests that use what the "
                f"system and the Python environment already hold")


def sandbox_plan(task: HarborTask) -> SandboxPlan:
    """Read the task's Dockerfile into a :class:`SandboxPlan`. Raises HarborEnvironmentError naming the file
    and line of the first instruction the sandbox cannot stand in for, and what would run here."""
    dockerfile = task.dockerfile
    if not dockerfile.is_file():
        named = f" ([environment] docker_image '{task.docker_image}' names a prebuilt image)" \
            if task.docker_image else ""
        raise HarborEnvironmentError(f"{dockerfile}: missing{named}; the sandbox runs tasks whose Dockerfile is "
                                     f"FROM a plain {'/'.join(BASES)} image with only WORKDIR, ENV and COPY")
    base, workdir, env, copies = None, DEFAULT_WORKDIR, {}, []

    def refuse(number: int, line: str, why: str) -> HarborEnvironmentError:
        return HarborEnvironmentError(
            f"{dockerfile}:{number}: {line[:120]!r} — {why}. This task needs its image built: use the task "
            f"'harbor_docker' (or `skyrl harbor verify --docker`); the sandbox runs tasks whose Dockerfile is FROM "
            f"a plain {'/'.join(BASES)} image with only WORKDIR, ENV and COPY of files from environment/")

    for number, line in _logical_lines(dockerfile.read_text(encoding="utf-8")):
        keyword, _, args = line.partition(" ")
        keyword, args = keyword.upper(), args.strip()
        if keyword == "FROM":
            if base is not None:
                raise refuse(number, line, "a second FROM (a multi-stage build)")
            image = args.split()[0] if args else ""
            name = image.split(":")[0].split("@")[0]
            if " AS " in f" {args.upper()} " or "/" in name or name not in BASES:
                raise refuse(number, line, f"base image '{image}' is not a plain {'/'.join(BASES)} image")
            base = image
        elif keyword == "WORKDIR":
            path = PurePosixPath(args) if args.startswith("/") else PurePosixPath(workdir) / args
            if "$" in args or ".." in path.parts or str(path) == "/":
                raise refuse(number, line, "a WORKDIR that is not a plain absolute directory")
            workdir = str(path)
        elif keyword == "ENV":
            env.update(_env_pairs(args))
        elif keyword in ("COPY", "ADD"):
            parts = shlex.split(args)
            if not parts or parts[0].startswith("[") or any(p.startswith("--from") for p in parts) or \
                    any(re.match(r"^[a-z]+://", p) for p in parts):
                raise refuse(number, line, f"a {keyword} from another stage, a URL or in JSON form")
            parts = [p for p in parts if not p.startswith("--")]
            if len(parts) < 2:
                raise refuse(number, line, f"a {keyword} without a source and a destination")
            *sources, dest = parts
            for source in sources:
                src = (task.path / "environment" / source).resolve()
                if not src.is_relative_to((task.path / "environment").resolve()) or not src.exists():
                    raise refuse(number, line, f"source '{source}' is not a file under environment/")
                target = PurePosixPath(dest) if dest.startswith("/") else PurePosixPath(workdir) / dest
                if not str(target).startswith(workdir.rstrip("/") + "/") and str(target) != workdir:
                    raise refuse(number, line, f"destination '{dest}' lies outside the WORKDIR {workdir}")
                rel = str(target.relative_to(workdir))
                if dest.endswith("/") or len(sources) > 1 or src.is_dir() and rel == ".":
                    rel = rel if src.is_dir() else str(PurePosixPath(rel) / src.name)
                copies.append((src, rel))
        elif keyword == "RUN":
            raise refuse(number, line, "a RUN step (it installs or changes the image)")
        elif keyword not in HARMLESS:
            raise refuse(number, line, f"instruction {keyword} is not one the sandbox stands in for")
    if base is None:
        raise HarborEnvironmentError(f"{dockerfile}: no FROM line (a Dockerfile names its base image)")
    _check_test_script(task)
    # [environment] workdir overrides the Dockerfile's WORKDIR for commands (the files stay where COPY put them)
    if task.workdir and task.workdir != workdir:
        raise HarborEnvironmentError(f"{task.path / 'task.toml'}: [environment] workdir '{task.workdir}' differs "
                                     f"from the Dockerfile's WORKDIR '{workdir}'; the sandbox mounts one "
                                     f"workspace, so it runs tasks where they agree")
    return SandboxPlan(base=base, workdir=workdir, env=env, copies=tuple(copies))
