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
import tempfile
from pathlib import Path
from typing import Any

import attrs

log = logging.getLogger(__name__)


@attrs.define
class ExecResult:
    """A finished command: ``exit_code`` (None when killed by timeout), combined ``output`` (truncated to the
    runtime's limit with a note), ``timed_out``, ``truncated`` and ``duration_s`` in seconds."""

    exit_code: int | None
    output: str
    timed_out: bool = False
    truncated: bool = False
    duration_s: float = 0.0


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


def truncate_output(text: str, limit: int) -> tuple[str, bool]:
    """Keep the head and tail of ``text`` within ``limit`` characters, with a note saying how much was cut."""
    if len(text) <= limit:
        return text, False
    head = limit * 2 // 3
    tail = limit - head
    cut = len(text) - head - tail
    return (f"{text[:head]}\n[... output truncated: {cut} characters omitted of {len(text)} ...]\n"
            f"{text[len(text) - tail:]}"), True


async def _read_capped(stream: asyncio.StreamReader, limit_bytes: int) -> tuple[bytes, int]:
    """Read a stream to EOF keeping at most ``limit_bytes`` of head and the same of tail; return total size."""
    head = bytearray()
    tail = bytearray()
    total = 0
    while True:
        chunk = await stream.read(65536)
        if not chunk:
            break
        total += len(chunk)
        if len(head) < limit_bytes:
            take = limit_bytes - len(head)
            head += chunk[:take]
            chunk = chunk[take:]
        if chunk:
            tail += chunk
            if len(tail) > limit_bytes:
                del tail[: len(tail) - limit_bytes]
    if total > len(head) + len(tail):
        return bytes(head) + b"\n" + bytes(tail), total
    return bytes(head) + bytes(tail), total


class LocalSandbox(Runtime):
    """Commands in a temporary workspace under bubblewrap (or a plain subprocess where it is missing)."""

    name = "sandbox"

    def __init__(self, spec: RuntimeSpec | None = None, **kwargs: Any) -> None:
        super().__init__(spec, **kwargs)
        self.bwrap = shutil.which("bwrap")
        self.isolation = "bubblewrap" if self.bwrap else "none"
        self._procs: set[asyncio.subprocess.Process] = set()
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
        wrapped = [self.bwrap, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp",
                   "--bind", ws, ws, "--chdir", ws, "--unshare-pid", "--unshare-ipc", "--unshare-uts",
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
        self._procs.add(proc)
        limit = self.spec.max_output_chars
        reader = asyncio.ensure_future(_read_capped(proc.stdout, limit * 4))
        timed_out = False
        try:
            if stdin is not None:
                proc.stdin.write(stdin.encode())
                await proc.stdin.drain()
                proc.stdin.close()
            await asyncio.wait_for(proc.wait(), timeout_s)
        except asyncio.TimeoutError:
            timed_out = True
            _kill_group(proc)
            await proc.wait()
        except BaseException:
            _kill_group(proc)
            raise
        finally:
            self._procs.discard(proc)
        try:
            raw, _total = await asyncio.wait_for(reader, 5.0)
        except asyncio.TimeoutError:  # a grandchild kept the pipe open
            reader.cancel()
            raw = b""
        # the command's group may have left background processes: end them with the command
        _kill_group(proc)
        text, truncated = truncate_output(raw.decode("utf-8", errors="replace"), limit)
        if timed_out:
            text += f"\n[command timed out after {timeout_s:g} s and was killed]"
        return ExecResult(exit_code=None if timed_out else proc.returncode, output=text, timed_out=timed_out,
                          truncated=truncated, duration_s=loop.time() - start)

    async def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        for proc in list(self._procs):
            _kill_group(proc)
        if self._tmp:
            await asyncio.to_thread(shutil.rmtree, self._tmp, True)


def _kill_group(proc: asyncio.subprocess.Process) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


class LocalRuntime(LocalSandbox):
    """The workspace without isolation (plain subprocesses), for trusted tools and debugging."""

    name = "local"

    def __init__(self, spec: RuntimeSpec | None = None, **kwargs: Any) -> None:
        super().__init__(spec, **kwargs)
        self.bwrap = None
        self.isolation = "none"

    async def start(self) -> None:
        await self._make_workspace()
