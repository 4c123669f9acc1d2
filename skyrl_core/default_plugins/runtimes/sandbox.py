"""The built-in runtimes ``sandbox`` (:class:`LocalSandbox`) and ``local`` (:class:`LocalRuntime`); the base
types (:class:`~skyrl_core.runtime.Runtime`, :class:`~skyrl_core.runtime.ExecResult`,
:class:`~skyrl_core.runtime.RuntimeSpec`) stay in :mod:`skyrl_core.runtime`.

The default ``sandbox`` runtime is the trust boundary (docs/runtimes.md): every command runs under bubblewrap as an
unprivileged user in its own user namespace with every capability dropped, sees only an allow-list of mounts
(the system's ``/usr``, the interpreter and the task's environment read-only, its workspace read-write, a private
size-capped ``/tmp``, minimal ``/dev`` and ``/proc``), has no network unless the task asks, and is bounded in
processes, file size, workspace disk use, CPU time, memory, wall time and output. Each limit hit is named in the
command's output and counted in ``Runtime.limit_hits``. When the host process is root, the sandbox first drops to
an unprivileged host uid (``nobody`` by default), so that the kernel's process limit applies and nothing inside
maps to host root.

Without a working bubblewrap the sandbox refuses to start (:class:`SandboxUnavailable`) unless the spec says
``isolation: none``, which is logged once per process.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

from skyrl_core.errors import SkyrlError
from skyrl_core.runtime import ExecResult, Runtime, RuntimeSpec, truncate_output

log = logging.getLogger(__name__)

# uid/gid the sandboxed process has inside its user namespace
SANDBOX_UID = 1000
SANDBOX_GID = 1000
# host uid/gid a root host process drops to before starting bubblewrap
UNPRIVILEGED_HOST_ID = 65534
# what of /etc a program needs to run (dynamic loader, alternatives, certificates, time zone); nothing else
ETC_ALLOW = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives", "ssl", "ca-certificates",
             "localtime", "nsswitch.conf", "mime.types", "bash.bashrc", "profile", "inputrc", "python3",
             "python3.11", "gitconfig")
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
DISK_POLL_S = 0.2


class SandboxUnavailable(SkyrlError):
    """The sandbox cannot isolate commands here (no bubblewrap, or it cannot create namespaces)."""


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


# -- checks made once per process --------------------------------------------------------------------------------
_ONCE_LOCK = threading.Lock()
_LOGGED_ONCE: set[str] = set()
_PROBE: dict[str, str | None] = {}


def log_once(key: str, message: str) -> None:
    """A warning logged once per process (the no-isolation opt-out, not once per sandbox)."""
    with _ONCE_LOCK:
        if key in _LOGGED_ONCE:
            return
        _LOGGED_ONCE.add(key)
    log.warning(message)


def bubblewrap_problem() -> str | None:
    """None when bubblewrap can run a sandbox here (checked once per process), else why not, with the fix."""
    with _ONCE_LOCK:
        if "bwrap" in _PROBE:
            return _PROBE["bwrap"]
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        problem = ("bubblewrap (bwrap) is not installed, so the sandbox cannot isolate commands. Install it "
                   "(apt-get install bubblewrap), or opt out with runtime.isolation: none (commands then run as "
                   "plain host subprocesses)")
    elif os.geteuid() == 0 and not shutil.which("setpriv"):
        problem = ("running as root, the sandbox drops to an unprivileged uid with setpriv, which is missing: "
                   "apt-get install util-linux (or run as a normal user)")
    else:
        argv = bwrap_argv(bwrap, [*_system_mounts(), "--tmpfs", "/tmp"], "/", network=False, drop=_host_ids()) + ["true"]
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=30)
            problem = None if proc.returncode == 0 else (
                f"bubblewrap cannot create an unprivileged sandbox here ({proc.stderr.strip()[:300]}); allow user "
                f"namespaces (sysctl kernel.unprivileged_userns_clone=1 / user.max_user_namespaces, or run the "
                f"container with --security-opt seccomp=unconfined), or opt out with runtime.isolation: none")
        except (OSError, subprocess.TimeoutExpired) as exc:
            problem = f"bubblewrap failed to start ({exc}); or opt out with runtime.isolation: none"
    with _ONCE_LOCK:
        _PROBE["bwrap"] = problem
    return problem


def _host_ids(owner: os.stat_result | None = None) -> tuple[int, int] | None:
    """The unprivileged host (uid, gid) a root process runs the sandbox as, or None (not root, so the sandbox
    already runs as this process's own unprivileged uid). Root drops to ``nobody`` for its own temporary
    workspaces, and to the owner of a user's directory used in place; root's own directory used in place stays
    root's (still capability-free, but the kernel does not apply the process limit to host root)."""
    if os.geteuid() != 0:
        return None
    if owner is None:
        return UNPRIVILEGED_HOST_ID, UNPRIVILEGED_HOST_ID
    if owner.st_uid == 0:
        return None
    return owner.st_uid, owner.st_gid


def bwrap_argv(bwrap: str, mounts: list[str], workdir: str, network: bool,
               drop: tuple[int, int] | None) -> list[str]:
    """The bubblewrap command line (the command's argv goes after it). Unprivileged: one bubblewrap makes the
    user namespace (uid 1000 inside, every capability dropped, no nested user namespaces) and the allow-list of
    ``mounts``. As root (``drop`` = host uid, gid): an outer bubblewrap makes the mounts keeping only
    CAP_SETUID/CAP_SETGID, ``setpriv`` drops to the unprivileged uid with no capabilities at all, and an inner
    bubblewrap makes the user namespace over the outer's root."""
    userns = ["--unshare-user", "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_GID), "--disable-userns",
              "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try", "--new-session",
              "--die-with-parent", "--hostname", "sandbox", *([] if network else ["--unshare-net"])]
    if drop is None:
        return [bwrap, *userns, *mounts, "--chdir", workdir, "--"]
    outer = [bwrap, "--unshare-pid", "--unshare-ipc", "--unshare-uts", *([] if network else ["--unshare-net"]),
             "--die-with-parent", "--new-session", "--cap-drop", "ALL", "--cap-add", "CAP_SETUID",
             "--cap-add", "CAP_SETGID", *mounts, "--"]
    setpriv = [shutil.which("setpriv") or "setpriv", "--reuid", str(drop[0]), "--regid", str(drop[1]),
               "--clear-groups", "--inh-caps=-all", "--bounding-set=-all", "--"]
    # the inner one shares the outer's pid namespace: a nested one cannot mount its /proc under the outer's
    inner = [bwrap, *[a for a in userns if a != "--unshare-pid"], "--bind", "/", "/", "--proc", "/proc",
             "--dev", "/dev", "--chdir", workdir, "--"]
    return outer + setpriv + inner


def _ro_bind(path: str, made: set[str], mode: str = "--ro-bind") -> list[str]:
    """``--ro-bind path path`` with its parent directories made world-traversable (bubblewrap makes missing
    parents 0700, which an unprivileged sandbox could not enter)."""
    args: list[str] = []
    parts = Path(path).parts[1:-1]
    for i in range(len(parts)):
        parent = "/" + "/".join(parts[: i + 1])
        if parent not in made and not parent.startswith(SYSTEM_DIRS) and parent not in ("/etc", "/tmp"):
            made.add(parent)
            args += ["--perms", "0755", "--dir", parent]
    return [*args, mode, path, path]


def _system_mounts() -> list[str]:
    """The read-only system part of the allow-list: /usr (and its /bin, /lib links), a few /etc entries, the
    sandbox's own passwd and group, minimal /dev and /proc."""
    args: list[str] = []
    for path in SYSTEM_DIRS:
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    args += ["--perms", "0755", "--dir", "/etc"]
    for name in ETC_ALLOW:
        args += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
    args += ["--ro-bind", _identity_dir() + "/passwd", "/etc/passwd",
             "--ro-bind", _identity_dir() + "/group", "/etc/group"]
    args += ["--dev", "/dev", "--proc", "/proc"]
    return args


_IDENTITY: list[str] = []


def _identity_dir() -> str:
    """A host directory (made once per process, again if something removed it — a test's or a benchmark's
    temp-dir cleanup) holding the sandbox's own /etc/passwd and /etc/group: one user, so tools that look their
    user up work without seeing the host's accounts."""
    with _ONCE_LOCK:
        if _IDENTITY and not (os.path.isfile(_IDENTITY[0] + "/passwd") and os.path.isfile(_IDENTITY[0] + "/group")):
            _IDENTITY.clear()
        if not _IDENTITY:
            path = tempfile.mkdtemp(prefix="skyrl-identity-")
            os.chmod(path, 0o755)
            Path(path, "passwd").write_text(f"sandbox:x:{SANDBOX_UID}:{SANDBOX_GID}:sandbox:/tmp:/bin/bash\n"
                                            f"nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n")
            Path(path, "group").write_text(f"sandbox:x:{SANDBOX_GID}:\nnogroup:x:65534:\n")
            for name in ("passwd", "group"):
                os.chmod(Path(path, name), 0o644)
            _IDENTITY.append(path)
        return _IDENTITY[0]


class LocalSandbox(Runtime):
    """Commands in a temporary workspace under bubblewrap (see the module doc for what a sandbox sees).

    ``ro_paths``: extra host directories mounted read-only at the same place (a task's environment); a plugin
    runtime appends to it before its first ``exec``, and sets ``host_venv`` False when its environment replaces
    the host's venv (the base interpreter stays mounted). Raises SandboxUnavailable from ``start`` when bubblewrap
    cannot isolate commands and the spec does not say ``isolation: none``."""

    name = "sandbox"
    unavailable = staticmethod(bubblewrap_problem)  # the runtime contract's: why it cannot start on this host

    def __init__(self, spec: RuntimeSpec | None = None, **kwargs: Any) -> None:
        super().__init__(spec, **kwargs)
        if self.spec.isolation not in ("bubblewrap", "none"):
            raise SkyrlError(f"runtime.isolation '{self.spec.isolation}' is not valid; use bubblewrap or none")
        self.bwrap = shutil.which("bwrap") if self.spec.isolation == "bubblewrap" else None
        self.isolation = "bubblewrap" if self.bwrap else "none"
        self.ro_paths: list[str] = []
        self.host_venv = True  # the host's venv is mounted (read-only) unless a task brings its own environment
        self._groups: set[int] = set()
        self._tmp: str | None = None
        self._drop: tuple[int, int] | None = None
        self._handed: dict[str, int] = {}
        self._base_files: int | None = None  # the workspace's entries before the first command
        self._last_files = 0  # ... and after the last one

    async def start(self) -> None:
        if self.spec.isolation == "none":
            log_once("isolation-none", f"runtime.isolation is none: {self.name} runtimes run commands as PLAIN HOST "
                     f"SUBPROCESSES, with no filesystem, network or process isolation (logged once per run)")
        else:
            problem = await asyncio.to_thread(bubblewrap_problem)
            if problem:
                raise SandboxUnavailable(problem)
        await self._make_workspace()

    async def _make_workspace(self) -> None:
        if self.spec.workspace:
            self.workspace = Path(self.spec.workspace).resolve()
            if not self.workspace.is_dir():
                raise FileNotFoundError(f"runtime workspace '{self.spec.workspace}' is not a directory")
            if self.bwrap:
                # a user's directory used in place keeps its owner: the sandbox runs as that owner
                self._drop = _host_ids(self.workspace.stat())
            return
        self._tmp = await asyncio.to_thread(tempfile.mkdtemp, prefix="skyrl-ws-")
        self.workspace = Path(self._tmp)
        if self.bwrap:
            self._drop = _host_ids()
        if self.spec.source:
            await asyncio.to_thread(shutil.copytree, self.spec.source, self.workspace, dirs_exist_ok=True,
                                    symlinks=True)

    def _argv(self, command: str | list[str]) -> list[str]:
        argv = ["bash", "-c", command] if isinstance(command, str) else list(command)
        if not self.bwrap:
            return self._limiter() + argv
        ws = str(self.workspace)
        made: set[str] = set()
        mounts = _system_mounts()
        if self.spec.network:
            for name in ("resolv.conf", "hosts"):
                mounts += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
        # the private /tmp first: what is bound below it (a workspace, an environment) then shows through
        mounts += ["--perms", "1777", "--size", str(int(self.spec.tmp_mb) * 1024 * 1024), "--tmpfs", "/tmp"]
        for path in dict.fromkeys([*_interpreter_paths(self.host_venv), *self.ro_paths]):
            if not path.startswith(SYSTEM_DIRS):
                mounts += _ro_bind(path, made)
        # the skeleton root bubblewrap builds (mount points, /etc) read-only too: the sandbox writes only its
        # workspace and /tmp
        mounts += [*_ro_bind(ws, made, "--bind"), "--remount-ro", "/", "--setenv", "HOME", ws]
        limiter = self._limiter(nproc=int(self.spec.max_processes))
        return bwrap_argv(self.bwrap, mounts, ws, self.spec.network, self._drop) + limiter + argv

    def _limiter(self, nproc: int | None = None) -> list[str]:
        """The argv prefix that sets the command's resource limits and then execs it: CPU seconds (soft
        ``cpu_time_s``, hard one more), address space (``memory_mb``), file size (``max_file_mb``), no core
        files, and with ``nproc`` the process limit (set inside the sandbox's user namespace, where the kernel
        counts only its processes); everything the command starts inherits them. A shell in front of the
        command, not a ``preexec_fn``: Python code between fork and exec in a process with other threads (a
        trainer's, Ray's) can deadlock on a lock another thread held at the fork, and the event loop waits for
        that exec (seen once in nine quickstart runs of tests/benchmarks/bench_async_training.py: the run hung)."""
        cpu = int(self.spec.cpu_time_s)
        mem_kib = int(self.spec.memory_mb) * 1024
        fsize_kib = int(self.spec.max_file_mb) * 1024  # bash's ulimit -f counts 1024-byte blocks
        limits = [f"-S -t {cpu}", f"-H -t {cpu + 1}", f"-S -H -v {mem_kib}", f"-S -H -f {fsize_kib}", "-S -H -c 0"]
        if nproc is not None:
            limits.insert(0, f"-S -H -u {nproc}")
        script = " && ".join(f"ulimit {x}" for x in limits) + ' || exit 126; exec "$@"'
        return ["bash", "-c", script, "skyrl-limits"]

    async def exec(self, command: str | list[str], timeout_s: float = 30.0, stdin: str | None = None,
                   env: dict[str, str] | None = None, pass_fds: tuple[int, ...] = ()) -> ExecResult:
        """Run ``command`` in the sandbox (see :meth:`Runtime.exec`). ``pass_fds``: host file descriptors the
        command inherits (a result channel the sandbox has no mount for)."""
        if self.workspace is None or self.closed:
            raise RuntimeError("sandbox runtime is not started (or already closed)")
        loop = asyncio.get_running_loop()
        start = loop.time()
        if self._drop is not None and self._tmp:
            await asyncio.to_thread(hand_over, self.workspace, *self._drop, self._handed)
        if self._base_files is None and self.bwrap:  # what the task put there is not the agent's
            self._base_files = self._last_files = await asyncio.to_thread(count_inodes, self.workspace)
        full_env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(self.workspace), "LANG": "C.UTF-8",
                    "PAGER": "cat", "GIT_PAGER": "cat", "PYTHONDONTWRITEBYTECODE": "1", "TERM": "dumb"}
        full_env.update(env or {})
        proc = await asyncio.create_subprocess_exec(
            *self._argv(command), cwd=str(self.workspace), env=full_env,
            stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
            start_new_session=True, pass_fds=pass_fds)
        # the command's process group outlives it when it leaves background processes; they are killed at close()
        self._groups.add(proc.pid)
        limit = self.spec.max_output_chars
        buffer = _CappedBuffer(limit * 4)
        reader = asyncio.ensure_future(buffer.drain(proc.stdout))
        watch = asyncio.ensure_future(self._watch(proc)) if self.bwrap else None
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
        finally:
            disk_mb = files = held_mb = None
            if watch is not None:
                if watch.done() and not watch.cancelled() and watch.exception() is None:
                    held_mb = watch.result()
                watch.cancel()
                disk_mb, files = await asyncio.gather(asyncio.to_thread(_disk_mb, self.workspace),
                                                      asyncio.to_thread(count_inodes, self.workspace))
        # Process exit does not mean EOF: a background child may hold the pipe. Take what came, briefly.
        try:
            await asyncio.wait_for(asyncio.shield(reader), 0.5)
        except asyncio.TimeoutError:
            reader.cancel()
        text, truncated = truncate_output(buffer.text(), limit, buffer.total)
        code = None if timed_out else proc.returncode
        limits, notes = self._limits_hit(text, code, timed_out, truncated, timeout_s, disk_mb)
        self._last_files = files if files is not None else self._last_files
        if files is not None and self._base_files is not None and files - self._base_files > self.spec.max_files:
            limits.append("files")
            notes.append(f"[limit files: the workspace holds {files - self._base_files} more files and directories "
                         f"than it started with, over its {self.spec.max_files}: commands are killed until they "
                         f"are deleted]")
        if held_mb is not None and "memory" not in limits:
            limits.append("memory")
            notes.append(f"[limit memory: the command's processes held {held_mb:.0f} MiB together, "
                         f"over the sandbox's {self.spec.memory_mb} MiB; they were killed]")
        if notes:
            text += "\n" + "\n".join(notes)
        self.limit_hits.update(limits)
        if "disk" in limits or "files" in limits or held_mb is not None:
            code = None
        return ExecResult(exit_code=code, output=text, timed_out=timed_out, truncated=truncated,
                          duration_s=loop.time() - start, limits=limits,
                          output_bytes=buffer.total)

    async def _watch(self, proc: asyncio.subprocess.Process) -> float | None:
        """Kill the command's process group once its processes together hold more than ``memory_mb`` of
        anonymous memory (every ``DISK_POLL_S`` seconds), or the workspace more than ``disk_mb`` or ``max_files``
        entries beyond its first count (every ``DISK_POLL_S`` seconds, or ten times the walk's own duration on a
        large workspace). The per-process limits cannot bound a sum, and bubblewrap has no cgroup to offer an
        unprivileged process; polling can, up to one interval's growth. Returns the memory held (MiB) when it
        killed the command for that, else None."""
        loop = asyncio.get_running_loop()
        next_walk = loop.time()
        while proc.returncode is None:
            await asyncio.sleep(DISK_POLL_S)
            held = await asyncio.to_thread(_anon_mb, proc.pid)
            if held > self.spec.memory_mb:
                _kill_group(proc.pid)
                return held
            if loop.time() < next_walk:
                continue
            t0 = loop.time()
            files = await asyncio.to_thread(count_inodes, self.workspace)
            # over the file count, a command that only deletes (fewer entries than it started with) runs on
            if await asyncio.to_thread(_disk_mb, self.workspace) > self.spec.disk_mb or (
                    files - (self._base_files or 0) > self.spec.max_files and files > self._last_files):
                _kill_group(proc.pid)
                return None
            next_walk = loop.time() + max(0.0, 10 * (loop.time() - t0) - DISK_POLL_S)

    def _limits_hit(self, text: str, code: int | None, timed_out: bool, truncated: bool, timeout_s: float,
                    disk_mb: float | None) -> tuple[list[str], list[str]]:
        """Which limits a finished command hit, each with a note for the observation that names it
        (``[limit NAME: ...]``, NAME as in :attr:`ExecResult.limits`)."""
        spec = self.spec
        hits: list[tuple[str, str]] = []
        if timed_out:
            hits.append(("wall_time", f"[limit wall_time: the command timed out after {timeout_s:g} s and was killed]"))
        if disk_mb is not None and disk_mb > spec.disk_mb:
            hits.append(("disk", f"[limit disk: the workspace uses {disk_mb:.0f} MiB, over its {spec.disk_mb} MiB: commands "
                                  f"are killed until files are deleted]"))
        if code in (128 + signal.SIGXFSZ, -signal.SIGXFSZ) or "File size limit exceeded" in text:
            hits.append(("file_size", f"[limit file_size: a file reached the {spec.max_file_mb} MiB file size limit]"))
        if code in (128 + signal.SIGXCPU, -signal.SIGXCPU) or "CPU time limit exceeded" in text:
            hits.append(("cpu_time", f"[limit cpu_time: a process used its {spec.cpu_time_s} s of CPU time]"))
        if self.bwrap and ("Resource temporarily unavailable" in text and ("fork" in text or "thread" in text)):
            hits.append(("processes", f"[limit processes: the sandbox may run at most {spec.max_processes} processes]"))
        if "MemoryError" in text or "Cannot allocate memory" in text or "std::bad_alloc" in text:
            hits.append(("memory", f"[limit memory: a process reached the {spec.memory_mb} MiB memory limit]"))
        if truncated:
            hits.append(("output", f"[limit output: the output was longer than {spec.max_output_chars} characters; its head and tail are shown]"))
        return [name for name, _ in hits], [note for _, note in hits if note]

    async def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        for pgid in list(self._groups):
            _kill_group(pgid)
        self._groups.clear()
        if self._tmp:
            await asyncio.to_thread(shutil.rmtree, self._tmp, True)


def hand_over(root: Path, uid: int, gid: int, seen: dict[str, int] | None = None) -> None:
    """Give every entry under ``root`` not yet owned by ``uid`` to ``uid:gid`` (files a host-side tool wrote
    since the last command). Walks with directory file descriptors and never follows a symlink, so a link the
    agent swaps in cannot redirect a chown outside the workspace. ``seen`` (directory -> mtime in ns, updated
    here) skips the entries of directories unchanged since the last walk: a new file changes its directory's
    mtime, and a file rewritten in place keeps its owner."""
    seen = {} if seen is None else seen
    if os.lstat(root).st_uid != uid:
        os.chown(root, uid, gid, follow_symlinks=False)
    for dirpath, dirnames, filenames, dirfd in os.fwalk(root, follow_symlinks=False):
        mtime = os.fstat(dirfd).st_mtime_ns
        if seen.get(dirpath) == mtime:
            continue
        for name in dirnames + filenames:
            try:
                if os.stat(name, dir_fd=dirfd, follow_symlinks=False).st_uid != uid:
                    os.chown(name, uid, gid, dir_fd=dirfd, follow_symlinks=False)
            except FileNotFoundError:
                pass
        seen[dirpath] = os.fstat(dirfd).st_mtime_ns


def _disk_mb(root: Path | None) -> float:
    """Disk blocks used under ``root`` in MiB (symlinks not followed, hard links counted once): ``du``, which
    is several times faster than a Python walk on a repository-sized tree."""
    if root is None:
        return 0.0
    proc = subprocess.run(["du", "-s", "-k", "-P", "-x", str(root)], capture_output=True, text=True)
    try:  # a file removed during the walk makes du complain, but it still prints the total
        return int(proc.stdout.split()[0]) / 1024
    except (IndexError, ValueError):
        return 0.0


def count_inodes(root: Path | None) -> int:
    """Files, directories and links under ``root`` (``du --inodes``; symlinks not followed, one file system)."""
    if root is None:
        return 0
    proc = subprocess.run(["du", "-s", "--inodes", "-P", "-x", str(root)], capture_output=True, text=True)
    try:
        return int(proc.stdout.split()[0])
    except (IndexError, ValueError):
        return 0


def _anon_mb(pid: int) -> float:
    """Anonymous resident memory (``RssAnon``, plus ``RssShmem``), in MiB, of process ``pid`` and all its
    descendants (``/proc/PID/task/TID/children``; orphans of a sandbox are reparented to its PID namespace's
    init, itself a descendant). Shared library pages are not counted: what one process allocates is."""
    total_kb, todo, seen = 0, [pid], set()
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        try:
            for tid in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{tid}/children") as fh:
                    todo.extend(int(c) for c in fh.read().split())
            with open(f"/proc/{p}/status") as fh:
                for line in fh:
                    if line.startswith(("RssAnon:", "RssShmem:")):
                        total_kb += int(line.split()[1])
        except (OSError, ValueError):
            continue  # it exited meanwhile
    return total_kb / 1024


def _interpreter_paths(venv: bool = True) -> list[str]:
    """Directories the current Python needs: its base prefix and the real location of its binary, and its
    prefix (the host venv) when ``venv``."""
    paths = {sys.base_prefix, os.path.dirname(os.path.realpath(sys.executable))} | ({sys.prefix} if venv else set())
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
