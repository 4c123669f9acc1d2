"""Runtimes: where a trajectory's tools act. A runtime is started in the dispatcher's init stage and closed in
its eval stage (or when the trajectory fails); tools reach it through ``ToolContext.runtime``.

This module holds what every runtime shares: :class:`Runtime` (the base a plugin subclasses), :class:`ExecResult`,
:class:`RuntimeSpec` and :func:`truncate_output`. The built-in ``sandbox`` and ``local`` runtimes (the trust
boundary, docs/runtimes.md) live in :mod:`skyrl_core.default_plugins.runtimes.sandbox`.
"""

from __future__ import annotations

import abc
import asyncio
import collections
import re
from pathlib import Path
from typing import Any

import attrs

from .errors import RuntimeLost  # noqa: F401  (raised by runtimes' exec; re-exported for plugins)


@attrs.define
class ExecResult:
    """A finished command: ``exit_code`` (None when killed by timeout or a limit), combined ``output``
    (truncated to the runtime's limit with a note), ``timed_out``, ``truncated``, ``duration_s`` in seconds,
    ``limits``: the names of the limits the command hit (``wall_time``, ``output``, ``disk``, ``file_size``,
    ``processes``, ``memory``, ``cpu_time``), each also explained in ``output``, and ``output_bytes``, the bytes
    the command wrote before any truncation (None where the runtime does not count them)."""

    exit_code: int | None
    output: str
    timed_out: bool = False
    truncated: bool = False
    duration_s: float = 0.0
    limits: list[str] = attrs.Factory(list)
    output_bytes: int | None = None


@attrs.define
class RuntimeSpec:
    """Runtime settings from config. ``cpu_time_s`` (seconds) and ``memory_mb`` (address space, MiB) bound each
    process of a command; ``max_processes`` bounds the processes and threads alive in the sandbox at once;
    ``max_file_mb`` the size of any one file written; ``disk_mb`` the workspace's disk use (measured every 0.2 s
    while a command runs, less often on a large workspace; the command is killed when over); ``max_files`` the
    files and directories a sandbox's commands may add to the workspace (inodes, counted the same way);
    ``memory_mb`` also bounds the anonymous memory of a command's processes together (polled every 0.2 s);
    ``tmp_mb`` the private ``/tmp`` (RAM-backed);
    ``max_output_chars`` caps what a command returns (head and tail kept); ``network`` allows network access (off
    by default); ``isolation`` is ``bubblewrap`` (refuse to start without it) or ``none`` (plain host
    subprocesses, logged once per process); ``source`` is a directory copied into the workspace at start;
    ``workspace`` is a directory used in place (not copied, not deleted: how ``skyrl tools run --workspace`` acts
    on a user's files); ``options`` go to plugin runtimes.

    ``placement`` names the registered placement the runtime, its tools and its verifier run in: ``local`` (this
    process) or a plugin's, such as ``ray`` (skyrl-ray: a Ray actor asking for ``resources``, at most
    ``max_actors`` of them); ``resources`` and ``max_actors`` are read and checked by that placement. See
    docs/scale-out.md and :mod:`skyrl_core.placement`."""

    type: str = "sandbox"
    cpu_time_s: int = 30
    memory_mb: int = 1024
    max_processes: int = 256
    max_file_mb: int = 256
    disk_mb: int = 2048
    max_files: int = 20000
    tmp_mb: int = 256
    max_output_chars: int = 16000
    network: bool = False
    isolation: str = "bubblewrap"
    source: str | None = None
    workspace: str | None = None
    options: dict[str, Any] = attrs.Factory(dict)
    placement: str = "local"
    resources: dict[str, Any] = attrs.Factory(dict)
    max_actors: int | None = None


class Runtime(abc.ABC):
    """A trajectory's environment. ``workspace`` is the writable directory tools act in; ``limit_hits`` counts
    the limits its commands hit, by name (see :class:`ExecResult`)."""

    name: str = "runtime"
    isolation: str = "none"

    def __init__(self, spec: RuntimeSpec | None = None, **kwargs: Any) -> None:
        self.spec = spec or RuntimeSpec(type=self.name)
        self.workspace: Path | None = None
        self.closed = False
        self.limit_hits: collections.Counter[str] = collections.Counter()

    @abc.abstractmethod
    async def start(self) -> None:
        """Create the environment (seconds to minutes for containers). Raises on failure."""

    async def prepare(self, instance: Any) -> None:
        """Set the started runtime up for one task instance (copy its repository, build its environment).
        Called in the dispatcher's init stage right after ``start``; the default does nothing."""

    @abc.abstractmethod
    async def exec(self, command: str | list[str], timeout_s: float = 30.0, stdin: str | None = None,
                   env: dict[str, str] | None = None) -> ExecResult:
        """Run a command in the workspace. A str runs through ``bash -c``. Never raises on non-zero exit or
        timeout; those are reported in the ExecResult."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Stop every process the runtime started and delete its workspace. Safe to call twice."""

    async def write_file(self, relpath: str, content: str) -> None:
        path = self._path(relpath)
        await asyncio.to_thread(_write, path, content)

    async def read_file(self, relpath: str) -> str:
        return await asyncio.to_thread(self._path(relpath).read_text)

    def _path(self, relpath: str) -> Path:
        """The host path of ``relpath`` inside the workspace, symlinks resolved. Raises ValueError when it
        leaves the workspace (``..``, an absolute path, or a symlink pointing out)."""
        assert self.workspace is not None, "runtime not started"
        root = self.workspace.resolve()
        path = (root / relpath).resolve()
        if path != root and not path.is_relative_to(root):
            raise ValueError(f"path '{relpath}' leaves the workspace {root}; give a path inside it")
        return path

    async def __aenter__(self) -> "Runtime":
        await self.start()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()


def _write(path: Path, content: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(content)


_NOTE = re.compile(r"\n?\[\.\.\. output truncated: (?:the command wrote (?P<bytes>\d+) bytes|(?P<cut>\d+) characters "
                   r"omitted of (?P<chars>\d+))[^\]\n]*\.\.\.\]\n?")


def truncate_output(text: str, limit: int, produced_bytes: int | None = None) -> tuple[str, bool]:
    """Keep the head and tail of ``text`` within ``limit`` characters, with a note saying how much was cut.
    ``produced_bytes`` is the size the command really wrote when ``text`` is already a part of it; the note
    then states that size rather than the length of ``text``. When ``text`` already holds such a note (a
    second cut, e.g. the agent loop's cap over a runtime's), the note is kept and still states the size first
    produced: its head and tail come from the text before and after the old note."""
    if len(text) <= limit:
        return text, False
    head = limit * 2 // 3
    tail = limit - head
    first = _NOTE.search(text)
    if first is not None:  # a second cut: keep the true size the first note states
        before, after = text[:first.start()], text[first.end():]
        if first.group("bytes"):
            produced_bytes = int(first.group("bytes"))
            total = None
        else:
            total = int(first.group("chars"))
        head, tail = min(head, len(before)), min(tail + max(0, head - len(before)), len(after))
        kept_head, kept_tail = before[:head], after[len(after) - tail:]
        if produced_bytes is not None:
            note = (f"[... output truncated: the command wrote {produced_bytes} bytes; its first {head} and last "
                    f"{tail} characters are shown ...]")
        else:
            note = f"[... output truncated: {total - head - tail} characters omitted of {total} ...]"
        return f"{kept_head}\n{note}\n{kept_tail}", True
    cut = len(text) - head - tail
    if produced_bytes is not None and produced_bytes > len(text):
        note = (f"[... output truncated: the command wrote {produced_bytes} bytes; its first {head} and last "
                f"{tail} characters are shown ...]")
    else:
        note = f"[... output truncated: {cut} characters omitted of {len(text)} ...]"
    return f"{text[:head]}\n{note}\n{text[len(text) - tail:]}", True
