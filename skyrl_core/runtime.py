"""Runtimes: where a trajectory's tools act. A runtime is started in the dispatcher's init stage and closed in
its eval stage (or when the trajectory fails); tools reach it through ``ToolContext.runtime``.

The default ``sandbox`` runtime runs commands under bubblewrap: no network, a read-only view of the system, a
writable temporary workspace, CPU-time and memory limits. Where bubblewrap is missing it falls back to a plain
subprocess with a loud warning (``isolation == "none"``).
"""

from __future__ import annotations

import abc
import asyncio
import logging
import os
import resource
import shutil
import signal
import sys
import tempfile
from pathlib import Path
from typing import Any

import attrs

log = logging.getLogger(__name__)


@attrs.define
class ExecResult:
    """A finished command: ``exit_code`` (None when killed by timeout), combined ``output`` (truncated to the
    runtime's limit with a note), ``timed_out``, ``truncated``, ``duration_s`` in seconds and ``output_bytes``,
    the bytes the command wrote before any truncation (None where the runtime does not count them)."""

    exit_code: int | None
    output: str
    timed_out: bool = False
    truncated: bool = False
    duration_s: float = 0.0
    output_bytes: int | None = None


@attrs.define
class RuntimeSpec:
    """Runtime settings from config. ``cpu_time_s`` and ``memory_mb`` bound each command; ``max_output_chars``
    caps what a command returns (head and tail kept); ``network`` allows network access (off by default);
    ``source`` is a directory copied into the workspace at start; ``workspace`` is a directory used in place
    (not copied, not deleted: how ``skyrl tools run --workspace`` acts on a user's files); ``options`` go to
    plugin runtimes."""

    type: str = "sandbox"
    cpu_time_s: int = 30
    memory_mb: int = 1024
    max_output_chars: int = 16000
    network: bool = False
    source: str | None = None
    workspace: str | None = None
    options: dict[str, Any] = attrs.Factory(dict)


class Runtime(abc.ABC):
    """A trajectory's environment. ``workspace`` is the writable directory tools act in."""

    name: str = "runtime"
    isolation: str = "none"

    def __init__(self, spec: RuntimeSpec | None = None, **kwargs: Any) -> None:
        self.spec = spec or RuntimeSpec(type=self.name)
        self.workspace: Path | None = None
        self.closed = False

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
        assert self.workspace is not None, "runtime not started"
        path = (self.workspace / relpath).resolve()
        if not str(path).startswith(str(self.workspace.resolve())):
            raise ValueError(f"path '{relpath}' leaves the workspace")
        return path

    async def __aenter__(self) -> "Runtime":
        await self.start()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()


def _write(path: Path, content: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(content)


def truncate_output(text: str, limit: int, produced_bytes: int | None = None) -> tuple[str, bool]:
    """Keep the head and tail of ``text`` within ``limit`` characters, with a note saying how much was cut.
    ``produced_bytes`` is the size the command really wrote when ``text`` is already a part of it; the note
    then states that size rather than the length of ``text``."""
    if len(text) <= limit:
        return text, False
    head = limit * 2 // 3
    tail = limit - head
    cut = len(text) - head - tail
    if produced_bytes is not None and produced_bytes > len(text):
        note = (f"[... output truncated: the command wrote {produced_bytes} bytes; its first {head} and last "
                f"{tail} characters are shown ...]")
    else:
        note = f"[... output truncated: {cut} characters omitted of {len(text)} ...]"
    return f"{text[:head]}\n{note}\n{text[len(text) - tail:]}", True


class _CappedBuffer:
    """Collects a stream keeping at most ``limit_bytes`` of head and of tail, so a 10 MB print costs little."""

    def __init__(self, limit_bytes: int) -> None:
        self.limit = limit_bytes
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    async def drain(self, stream: asyncio.StreamReader) -> None:
        while True:
            chunk = await stream.read(65536)
            if not chunk:
                return
            self.total += len(chunk)
            if len(self.head) < self.limit:
                take = self.limit - len(self.head)
                self.head += chunk[:take]
                chunk = chunk[take:]
            if chunk:
                self.tail += chunk
                if len(self.tail) > self.limit:
                    del self.tail[: len(self.tail) - self.limit]

    def text(self) -> str:
        sep = b"\n" if self.total > len(self.head) + len(self.tail) else b""
        return (bytes(self.head) + sep + bytes(self.tail)).decode("utf-8", errors="replace")


class LocalSandbox(Runtime):
    """Commands in a temporary workspace under bubblewrap (or a plain subprocess where it is missing)."""

    name = "sandbox"

    def __init__(self, spec: RuntimeSpec | None = None, **kwargs: Any) -> None:
        super().__init__(spec, **kwargs)
        self.bwrap = shutil.which("bwrap")
        self.isolation = "bubblewrap" if self.bwrap else "none"
        self._groups: set[int] = set()
        self._tmp: str | None = None

    async def start(self) -> None:
        if not self.bwrap:
            log.warning("bubblewrap (bwrap) not found: the sandbox runtime runs commands as PLAIN SUBPROCESSES with "
                        "no isolation. Install it (apt-get install bubblewrap) for network and filesystem isolation.")
        await self._make_workspace()

    async def _make_workspace(self) -> None:
        if self.spec.workspace:
            self.workspace = Path(self.spec.workspace).resolve()
            if not self.workspace.is_dir():
                raise FileNotFoundError(f"runtime workspace '{self.spec.workspace}' is not a directory")
            return
        self._tmp = await asyncio.to_thread(tempfile.mkdtemp, prefix="skyrl-ws-")
        self.workspace = Path(self._tmp)
        if self.spec.source:
            await asyncio.to_thread(shutil.copytree, self.spec.source, self.workspace, dirs_exist_ok=True,
                                    symlinks=True)

    def _argv(self, command: str | list[str]) -> list[str]:
        argv = ["bash", "-c", command] if isinstance(command, str) else list(command)
        if not self.bwrap:
            return argv
        ws = str(self.workspace)
        wrapped = [self.bwrap, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"]
        # The private /tmp hides whatever lives under the host's /tmp; keep the running interpreter (a venv
        # may live there, e.g. in a CI checkout) visible, read-only.
        for path in _interpreter_paths():
            if path == "/tmp" or path.startswith("/tmp/"):
                wrapped += ["--ro-bind", path, path]
        wrapped += ["--bind", ws, ws, "--chdir", ws, "--unshare-pid", "--unshare-ipc", "--unshare-uts",
                   "--die-with-parent", "--new-session", "--setenv", "HOME", ws]
        if not self.spec.network:
            wrapped.append("--unshare-net")
        return wrapped + ["--"] + argv

    def _limits(self) -> None:  # runs in the child before exec
        cpu = int(self.spec.cpu_time_s)
        mem = int(self.spec.memory_mb) * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
        resource.setrlimit(resource.RLIMIT_AS, (mem, mem))

    async def exec(self, command: str | list[str], timeout_s: float = 30.0, stdin: str | None = None,
                   env: dict[str, str] | None = None) -> ExecResult:
        if self.workspace is None or self.closed:
            raise RuntimeError("sandbox runtime is not started (or already closed)")
        loop = asyncio.get_running_loop()
        start = loop.time()
        full_env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(self.workspace), "LANG": "C.UTF-8",
                    "PAGER": "cat", "GIT_PAGER": "cat", "PYTHONDONTWRITEBYTECODE": "1", "TERM": "dumb"}
        full_env.update(env or {})
        proc = await asyncio.create_subprocess_exec(
            *self._argv(command), cwd=str(self.workspace), env=full_env,
            stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
            start_new_session=True, preexec_fn=self._limits)
        # the command's process group outlives it when it leaves background processes; they are killed at close()
        self._groups.add(proc.pid)
        limit = self.spec.max_output_chars
        buffer = _CappedBuffer(limit * 4)
        reader = asyncio.ensure_future(buffer.drain(proc.stdout))
        timed_out = False
        try:
            if stdin is not None:
                proc.stdin.write(stdin.encode())
                await proc.stdin.drain()
                proc.stdin.close()
            timed_out = not await _wait_exit(proc, timeout_s)
            if timed_out:
                _kill_group(proc.pid)
                await _wait_exit(proc, None)
        except BaseException:
            _kill_group(proc.pid)
            reader.cancel()
            raise
        # Process exit does not mean EOF: a background child may hold the pipe. Take what came, briefly.
        try:
            await asyncio.wait_for(asyncio.shield(reader), 0.5)
        except asyncio.TimeoutError:
            reader.cancel()
        text, truncated = truncate_output(buffer.text(), limit, buffer.total)
        if timed_out:
            text += f"\n[command timed out after {timeout_s:g} s and was killed]"
        return ExecResult(exit_code=None if timed_out else proc.returncode, output=text, timed_out=timed_out,
                          truncated=truncated, duration_s=loop.time() - start, output_bytes=buffer.total)

    async def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        for pgid in list(self._groups):
            _kill_group(pgid)
        self._groups.clear()
        if self._tmp:
            await asyncio.to_thread(shutil.rmtree, self._tmp, True)


def _interpreter_paths() -> list[str]:
    """Directories the current Python needs: its prefix, base prefix and the real location of its binary."""
    paths = {sys.prefix, sys.base_prefix, os.path.dirname(os.path.realpath(sys.executable))}
    return sorted(p for p in paths if p and os.path.isdir(p))


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


async def _wait_exit(proc: asyncio.subprocess.Process, timeout_s: float | None) -> bool:
    """Wait until the process has exited (not until its pipes close); False on timeout. Polls ``returncode``
    because ``Process.wait`` also waits for every pipe holder, which a background child can keep open forever."""
    loop = asyncio.get_running_loop()
    deadline = None if timeout_s is None else loop.time() + timeout_s
    delay = 0.001
    while proc.returncode is None:
        if deadline is not None and loop.time() >= deadline:
            return False
        await asyncio.sleep(delay)
        delay = min(delay * 2, 0.05)
    return True


class LocalRuntime(LocalSandbox):
    """The workspace without isolation (plain subprocesses), for trusted tools and debugging."""

    name = "local"

    def __init__(self, spec: RuntimeSpec | None = None, **kwargs: Any) -> None:
        super().__init__(spec, **kwargs)
        self.bwrap = None
        self.isolation = "none"

    async def start(self) -> None:
        await self._make_workspace()
