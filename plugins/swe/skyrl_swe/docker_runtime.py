"""The ``docker`` runtime: one container per trajectory, with the sandbox's trust boundary (docs/runtimes.md).

A container runs as an unprivileged user (``1000:1000`` when the host process is root, else the host user's own
uid) with every capability dropped and
``no-new-privileges``, a read-only root file system, a private ``/tmp`` (tmpfs of ``tmp_mb``), no network
(``network_mode: none``) unless the task asks, and cgroup limits: ``max_processes`` (pids), ``memory_mb``
(memory + swap of the whole container), ``cpus`` (CPU share), plus ``cpu_time_s`` and ``max_file_mb`` as rlimits
and ``disk_mb`` measured on the workspace while a command runs.

The repository is copied out of the image (``/testbed`` by default) into a private host directory that is
bind-mounted back read-write, so the editor and the search index read it on the host while commands run in the
container. Before the agent acts, the host commits that copy as the only commit of a git directory outside the
workspace, mounted read-only at ``/skyrl/base.git``: the agent's patch is computed *inside* the container against
it (``git`` with that ``GIT_DIR``, a throw-away index and no configuration files), never by running git on the
host over agent-written files.

Containers carry the label ``skyrl.runtime=docker`` and a unique name, and are removed exactly once: ``close`` is
idempotent, shielded from cancellation, and waits for a creation still running in its thread, so a dispatch
cancelled in the middle of ``prepare`` leaves nothing behind.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import socket
import struct
import subprocess
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from skyrl_core.default_plugins.runtimes.sandbox import count_inodes, hand_over
from skyrl_core.runtime import ExecResult, Runtime, RuntimeLost, RuntimeSpec, truncate_output

from .channel import read_channel_while, write_channel_files
from .data import RepoUnavailable
from .docker_client import docker_client
from .git_safety import MAX_PATCH_BYTES, SAFE_GIT, PatchTooLarge, init_baseline
from .images import (ImageBuildError, build_instance_image, extract_tree, image_archive, image_exists,
                     local_image_for, swebench_image_name)

log = logging.getLogger(__name__)

LABEL = "skyrl.runtime"
USER = "1000:1000"
BASE_GIT = "/skyrl/base.git"
CHANNEL = "/skyrl/channel"
REMOVALS: dict[str, int] = {}  # container name -> times removed (the tests assert exactly once)


def _disk_mb(root: Path) -> float:
    proc = subprocess.run(["du", "-s", "-B1M", "--apparent-size", str(root)], capture_output=True, text=True)
    try:
        return float(proc.stdout.split()[0])
    except (IndexError, ValueError):
        return 0.0


def _cgroup_counter(container_id: str, controller: str, files: tuple[str, ...], key: str) -> int:
    """A counter of the container's cgroup (v1 ``/sys/fs/cgroup/<controller>/docker/<id>/`` or v2), 0 if absent."""
    roots = [Path("/sys/fs/cgroup") / controller / "docker" / container_id,
             Path("/sys/fs/cgroup/docker") / container_id,
             Path("/sys/fs/cgroup/system.slice") / f"docker-{container_id}.scope"]
    for root in roots:
        for name in files:
            try:
                for line in (root / name).read_text().splitlines():
                    parts = line.split()
                    if len(parts) == 2 and parts[0] == key:
                        return int(parts[1])
            except (OSError, ValueError):
                continue
    return 0


def _read_frames(sock: socket.socket, stop: list[bool], cap: int) -> tuple[bytes, bytes, int]:
    """Read docker's multiplexed exec stream (8-byte header: stream, 0, 0, 0, big-endian length) until EOF or
    ``stop[0]``; returns (head, tail, total bytes), keeping at most ``cap`` bytes at each end."""
    head, tail, total, pending = bytearray(), bytearray(), 0, b""
    sock.settimeout(0.2)
    while True:
        try:
            data = sock.recv(65536)
        except socket.timeout:
            if stop[0]:
                break
            continue
        except OSError:
            break
        if not data:
            break
        pending += data
        while len(pending) >= 8:
            size = struct.unpack(">I", pending[4:8])[0]
            if len(pending) < 8 + size:
                break
            payload, pending = pending[8:8 + size], pending[8 + size:]
            total += len(payload)
            room = cap - len(head)
            if room > 0:
                head += payload[:room]
                payload = payload[room:]
            if payload:
                tail += payload
                if len(tail) > cap:
                    del tail[:len(tail) - cap]
    return bytes(head), bytes(tail), total


class DockerRuntime(Runtime):
    """A hardened container per trajectory (docker SDK).

    Options (``runtime.options``): ``image`` (else the row's ``image``, the image ``skyrl swe build-images``
    built, or the SWE-bench harness image, whichever exists locally), ``workdir`` (``/testbed``), ``user``
    (``1000:1000`` as root, else the caller's uid:gid), ``cpus`` (1.0), ``build`` (true: build a missing image from the row, as
    ``skyrl swe build-images`` does, once per instance), ``pull`` (false: no registry is assumed).
    Raises RuntimeError when no Docker engine answers and RepoUnavailable naming the fix when no image exists.
    Attributes once prepared: ``container`` (the SDK object), ``image``, ``workspace`` (the host copy),
    ``base_commit``; ``removals`` counts how often its container was removed (1 after ``close``)."""

    name = "docker"
    isolation = "container"

    def __init__(self, spec: RuntimeSpec | None = None, instance: Any = None, **kwargs: Any) -> None:
        super().__init__(spec or RuntimeSpec(type=self.name), **kwargs)
        self.instance = instance
        self.prepared = False
        self.client = None
        self.container = None
        self.image: str | None = None
        self.base_commit: str | None = None
        opts = self.spec.options
        self.workdir = str(opts.get("workdir", "/testbed"))
        # as root the workspace copy is handed to uid 1000; a normal user (in the docker group) runs as itself
        self.user = str(opts.get("user") or (USER if os.geteuid() == 0 else f"{os.getuid()}:{os.getgid()}"))
        self.cpus = float(opts.get("cpus", 1.0))
        self.container_name = f"skyrl-{uuid.uuid4().hex[:12]}"
        self.tool_env: dict[str, str] = {}
        self.removals = 0
        self.result_channel = False  # the verifier sets it: mount a result channel (see exec_with_channel)
        self.channel_dir: str | None = None
        self.channel_path = CHANNEL  # what the test run puts on PYTHONPATH to load the channel's pytest plugin
        self._tmp: str | None = None
        self._creating: asyncio.Future | None = None
        self._closing: asyncio.Future | None = None
        self._seen: dict[str, int] = {}
        self._base_files: int | None = None  # the workspace's entries before the first command

    # -- life cycle ---------------------------------------------------------------------------------------------
    async def start(self) -> None:
        self.client = await asyncio.to_thread(docker_client)
        if self.instance is not None:
            await self.prepare(self.instance)

    async def prepare(self, instance: Any) -> None:
        """Copy the image's repository out, commit the pristine baseline and start the container (seconds: this is
        init-stage work, which the dispatchers overlap with other trajectories' generation)."""
        if self.prepared:
            return
        if self.closed:
            raise RuntimeError("the docker runtime was closed before it was prepared")
        self.instance = instance
        data = instance.data if hasattr(instance, "data") else dict(instance)
        if self.client is None:
            self.client = await asyncio.to_thread(docker_client)
        # the thread keeps running when this coroutine is cancelled; close() waits for it before removing
        self._creating = asyncio.ensure_future(asyncio.to_thread(self._prepare_sync, data))
        await asyncio.shield(self._creating)

    def resolve_image(self, data: dict) -> str:
        wanted = self.spec.options.get("image")
        if wanted and image_exists(self.client, wanted):
            return wanted
        found = None if wanted else local_image_for(self.client, data)
        if found:
            return found
        name = wanted or data.get("image") or swebench_image_name(data)
        if not wanted and not data.get("image") and self.spec.options.get("build", True):
            return build_on_demand(self.client, data)
        if self.spec.options.get("pull", False):
            try:
                self.client.images.pull(name)
                return name
            except Exception as exc:
                raise RepoUnavailable(f"docker image {name} is not present and pulling it failed ({exc})") from None
        raise RepoUnavailable(f"instance {data.get('instance_id')}: no docker image present (tried "
                              f"{wanted or 'the row image, the skyrl-swe build, ' + name}); build it with "
                              f"`skyrl swe build-images INSTANCES`, or set runtime.options.pull: true")

    def _prepare_sync(self, data: dict) -> None:
        import docker

        self.image = self.resolve_image(data)
        self._tmp = tempfile.mkdtemp(prefix="skyrl-docker-")
        ws = Path(self._tmp) / "ws"
        ws.mkdir()
        extract_tree(image_archive(self.client, self.image, self.workdir), Path(self.workdir).name, ws)
        base_git = Path(self._tmp) / "base.git"
        self.base_commit = init_baseline(ws, base_git)  # host git on a tree no agent has touched yet
        self._hand_over()
        subprocess.run(["chmod", "-R", "a+rX", str(base_git)], check=True)
        self.workspace = ws
        spec = self.spec
        volumes = {str(ws): {"bind": self.workdir, "mode": "rw"}, str(base_git): {"bind": BASE_GIT, "mode": "ro"}}
        caps: list[str] = []
        if self.result_channel:
            self.channel_dir = str(Path(self._tmp) / "channel")
            os.mkdir(self.channel_dir, 0o755)
            write_channel_files(Path(self.channel_dir))  # the result-channel plugin and the runner launcher
            volumes[self.channel_dir] = {"bind": CHANNEL, "mode": "ro"}
            caps = ["SETUID", "SETGID"]  # the channel opener drops from root to the user (see exec_with_channel)
        mib = 1024 * 1024
        kwargs = dict(
            # docker grants an exec as root the added capabilities only when the container's own user is root;
            # every command but the channel opener still runs as self.user, with no capabilities
            # docker's init (tini) is PID 1 and reaps whatever is orphaned; `sleep infinity`, its child, keeps the
            # container alive
            command=["sleep", "infinity"], init=True, detach=True, name=self.container_name,
            user="0:0" if caps else self.user,
            working_dir=self.workdir, network_mode="bridge" if spec.network else "none",
            cap_drop=["ALL"], cap_add=caps or None, security_opt=["no-new-privileges"], read_only=True,
            tmpfs={"/tmp": f"rw,nosuid,nodev,size={spec.tmp_mb}m,mode=1777"},
            pids_limit=spec.max_processes, mem_limit=spec.memory_mb * mib, memswap_limit=spec.memory_mb * mib,
            nano_cpus=int(self.cpus * 1e9), volumes=volumes, environment={"HOME": "/tmp"},
            ulimits=[docker.types.Ulimit(name="fsize", soft=spec.max_file_mb * mib, hard=spec.max_file_mb * mib),
                     docker.types.Ulimit(name="cpu", soft=spec.cpu_time_s, hard=spec.cpu_time_s + 1)],
            labels={LABEL: "docker", "skyrl.pid": str(os.getpid())})
        self.container = self.client.containers.run(self.image, **kwargs)
        paths = [self.workdir] + ([f"{self.workdir}/src"] if (ws / "src").is_dir() else [])
        self.tool_env = {"PYTHONPATH": ":".join(paths)}
        self.prepared = True

    async def close(self) -> None:
        """Remove the container (exactly once, also when called concurrently or cancelled) and the host copy."""
        if self._closing is None:
            self.closed = True
            self._closing = asyncio.ensure_future(self._close())
        await asyncio.shield(self._closing)

    async def _close(self) -> None:
        if self._creating is not None:
            try:
                await self._creating
            except BaseException:  # a failed prepare may still have created the container
                pass
        await asyncio.to_thread(self._remove_sync)
        if self._tmp:
            await asyncio.to_thread(_discard, self._tmp)

    def _remove_sync(self) -> None:
        import docker

        if self.client is None:
            return
        try:
            self.client.api.remove_container(self.container_name, force=True, v=True)
        except docker.errors.NotFound:
            return
        except docker.errors.APIError as exc:
            if exc.status_code != 409:  # 409: someone else's removal is in progress; wait for it to finish
                raise
            for _ in range(100):
                try:
                    self.client.api.inspect_container(self.container_name)
                except docker.errors.NotFound:
                    return
                time.sleep(0.1)
            raise
        self.removals += 1
        REMOVALS[self.container_name] = REMOVALS.get(self.container_name, 0) + 1

    # -- commands -----------------------------------------------------------------------------------------------
    def _hand_over(self) -> None:
        """Give files host-side tools wrote to the container's user (root only: otherwise they are ours already)."""
        if os.geteuid() == 0 and self.workspace is not None:
            uid, gid = (int(x) for x in self.user.split(":"))
            hand_over(self.workspace, uid, gid, self._seen)

    def _check_alive(self) -> None:
        if self.container is None:
            raise RuntimeError("the docker runtime is not prepared: no container (start it with an instance, or "
                               "call prepare after start)")
        try:
            self.container.reload()
            state = self.container.attrs.get("State", {})
        except Exception as exc:
            raise RuntimeLost(f"container {self.container_name} is gone: {type(exc).__name__}: {exc}") from None
        if not state.get("Running"):
            raise RuntimeLost(f"container {self.container_name} is not running (status {state.get('Status')}, exit "
                              f"{state.get('ExitCode')}, OOM-killed {state.get('OOMKilled')})")

    async def exec(self, command: str | list[str], timeout_s: float = 30.0, stdin: str | None = None,
                   env: dict[str, str] | None = None, user: str | None = None) -> ExecResult:
        """Run ``command`` in the container (``bash -c`` for a str) as the runtime's user. Limits hit are named
        in ``ExecResult.limits`` and the output. Raises RuntimeLost when the container is gone."""
        await asyncio.to_thread(self._check_alive)
        await asyncio.to_thread(self._hand_over)
        argv = ["bash", "-c", command] if isinstance(command, str) else list(command)
        try:
            return await self._exec(["timeout", "-s", "KILL", str(max(1, int(round(timeout_s)))), *argv],
                                    timeout_s, stdin, {**self.tool_env, **(env or {})}, user or self.user)
        finally:
            await asyncio.to_thread(self._end_strays)

    def _end_strays(self) -> None:
        """Kill what the last command left running outside its own process tree — processes orphaned to the
        container's init (a ``setsid`` child, a daemon, what a killed process group left) — sparing the keeper
        (init's first child). Runs as the runtime's user, so it can signal nothing else; init reaps them. A
        ``docker exec`` process is itself a child of init, so a command running concurrently in the same
        container would end too: a trajectory's tools run one at a time."""
        if self.container is None:
            return
        # shell builtins only (read, kill): at the process limit nothing can be forked
        script = ('read -r keep rest < /proc/1/task/1/children; '
                  'for round in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20; do '
                  'read -r kids < /proc/1/task/1/children; left=""; '
                  'for p in $kids; do [ "$p" = "$keep" ] || left="$left $p"; done; '
                  '[ -z "$left" ] && exit 0; kill -9 $left 2>/dev/null; done; true')
        try:
            exec_id = self.client.api.exec_create(self.container.id, ["sh", "-c", script], user=self.user)["Id"]
            self.client.api.exec_start(exec_id)
        except Exception as exc:  # a container gone meanwhile: the next command says so
            log.debug("container %s: ending stray processes failed: %s", self.container_name, exc)

    async def _exec(self, argv: list[str], timeout_s: float, stdin: str | None, env: dict[str, str],
                    user: str, max_chars: int | None = None) -> ExecResult:
        api = self.client.api
        cid = self.container.id
        loop = asyncio.get_running_loop()
        start = loop.time()
        max_chars = max_chars or self.spec.max_output_chars
        cap = max(4 * max_chars, 4096)
        if self._base_files is None and self.workspace is not None:  # what the image put there is not the agent's
            self._base_files = await asyncio.to_thread(count_inodes, self.workspace)
        oom0 = _cgroup_counter(cid, "memory", ("memory.oom_control", "memory.events"), "oom_kill")
        pids0 = _cgroup_counter(cid, "pids", ("pids.events",), "max")

        def begin():
            exec_id = api.exec_create(cid, argv, user=user, environment=env, workdir=self.workdir,
                                      stdin=stdin is not None)["Id"]
            raw = api.exec_start(exec_id, socket=True)
            sock = getattr(raw, "_sock", raw)
            if stdin is not None:
                sock.sendall(stdin.encode())
                sock.shutdown(socket.SHUT_WR)
            return exec_id, sock

        exec_id, sock = await asyncio.to_thread(begin)
        stop = [False]
        reader = asyncio.ensure_future(asyncio.to_thread(_read_frames, sock, stop, cap))
        limits: list[str] = []
        notes: list[str] = []
        exit_code: int | None = None
        try:
            last_disk = start  # first measured after 0.5 s: a quick `rm` of the excess always gets through
            while True:
                info = await asyncio.to_thread(api.exec_inspect, exec_id)
                if not info.get("Running"):
                    exit_code = info.get("ExitCode")
                    break
                now = loop.time()
                if now - start > timeout_s + 5:  # `timeout` inside failed to end it: kill every agent process
                    await asyncio.to_thread(self._kill_all)
                if now - last_disk > 0.5 and self.workspace is not None and "disk" not in limits:
                    last_disk = now
                    used = await asyncio.to_thread(_disk_mb, self.workspace)
                    if used > self.spec.disk_mb:
                        await asyncio.to_thread(self._kill_all)
                        limits.append("disk")
                        notes.append(f"[limit: the workspace uses {used:.0f} MiB, over its {self.spec.disk_mb} MiB: "
                                     f"commands are killed until files are deleted]")
                    added = await asyncio.to_thread(count_inodes, self.workspace) - (self._base_files or 0)
                    if added > self.spec.max_files and "files" not in limits:
                        await asyncio.to_thread(self._kill_all)
                        limits.append("files")
                        notes.append(f"[limit files: the workspace holds {added} more files and directories than it "
                                     f"started with, over its {self.spec.max_files}: commands are killed until they "
                                     f"are deleted]")
                await asyncio.sleep(0.05)
            try:  # background processes may hold the stream open: take what came, then stop reading
                head, tail, total = await asyncio.wait_for(asyncio.shield(reader), 1.0)
            except asyncio.TimeoutError:
                stop[0] = True
                head, tail, total = await reader
        finally:
            stop[0] = True
            try:
                sock.close()
            except OSError:
                pass
        duration = loop.time() - start
        raw = head + (b"" if len(head) + len(tail) >= total else b"\n") + tail
        text = raw.decode("utf-8", "replace")
        text, truncated = truncate_output(text, max_chars, produced_bytes=total)
        timed_out = exit_code == 137 and duration >= timeout_s - 0.5
        if truncated:
            limits.append("output")
        if timed_out:
            limits.append("wall_time")
            notes.append(f"[command timed out after {timeout_s:g} s and was killed]")
        elif _cgroup_counter(cid, "memory", ("memory.oom_control", "memory.events"), "oom_kill") > oom0:
            limits.append("memory")
            notes.append(f"[limit: the container's memory ({self.spec.memory_mb} MiB) ran out; the kernel killed "
                         f"a process]")
        if _cgroup_counter(cid, "pids", ("pids.events",), "max") > pids0:
            limits.append("processes")
            notes.append(f"[limit: the container may run at most {self.spec.max_processes} processes]")
        if exit_code == 128 + 24:  # SIGXCPU
            limits.append("cpu_time")
            notes.append(f"[limit: a process used its {self.spec.cpu_time_s} s of CPU time and was killed]")
        if exit_code == 128 + 25 or "File too large" in text or "File size limit exceeded" in text:  # SIGXFSZ
            limits.append("file_size")
            notes.append(f"[limit: no file may exceed {self.spec.max_file_mb} MiB]")
        if notes:
            text = text.rstrip("\n") + "\n" + "\n".join(notes)
        for name in limits:
            self.limit_hits[name] += 1
        return ExecResult(exit_code=None if timed_out or "disk" in limits else exit_code, output=text,
                          timed_out=timed_out, truncated=truncated, duration_s=duration, limits=limits,
                          output_bytes=total)

    def _kill_all(self) -> None:
        """SIGKILL every process of the runtime's user but the container's init, its keeper and the killer, in
        rounds until none is left (up to 20): one pass over /proc once let a command's shell outlive its killed
        child and run on (a CI run: `...; echo finished` printed after the file-count limit's kill)."""
        script = ('read -r keep rest < /proc/1/task/1/children; '
                  'for round in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20; do left=""; '
                  'for d in /proc/[0-9]*; do p=${d#/proc/}; '
                  '[ "$p" = 1 ] || [ "$p" = "$keep" ] || [ "$p" = "$$" ] || '
                  '{ [ -r "$d/stat" ] && read -r _ _ st _ < "$d/stat" 2>/dev/null && [ "$st" != Z ] && '
                  'left="$left $p"; }; done; '
                  '[ -z "$left" ] && exit 0; kill -9 $left 2>/dev/null; done; true')
        try:
            exec_id = self.client.api.exec_create(self.container.id, ["sh", "-c", script], user=self.user)["Id"]
            self.client.api.exec_start(exec_id)
        except Exception as exc:
            log.warning("container %s: killing its processes failed: %s", self.container_name, exc)

    async def diff(self) -> str:
        """The agent's patch, computed inside the container: its work tree against the read-only baseline at
        ``/skyrl/base.git``, with a throw-away index in ``/tmp``, no system or global git configuration, no
        hooks, fsmonitor, external diff or textconv. Raises RuntimeLost when the container is gone."""
        # new blobs go to a private object directory in /tmp; the baseline's objects are read as alternates
        script = ("set -e; scratch=$(mktemp -d /tmp/skyrl-diff.XXXXXX); mkdir -p $scratch/objects/info $scratch/objects/pack; export GIT_INDEX_FILE=$scratch/index "
                  "GIT_OBJECT_DIRECTORY=$scratch/objects GIT_ALTERNATE_OBJECT_DIRECTORIES=" + BASE_GIT + "/objects; "
                  "git read-tree HEAD; "
                  # a directory holding its own .git is a nested repository: left out (as on the host)
                  "set -- ; while IFS= read -r d; do set -- \"$@\" \":(exclude,literal)${d#./}\"; done "
                  "< <(find . -mindepth 2 -name '.git' -prune -printf '%h\\n'); "
                  "git -c core.bigFileThreshold=1m add -A -- . \"$@\"; "
                  "git diff --cached --no-color --no-ext-diff --no-textconv --binary --ignore-submodules=all HEAD "
                  f"| head -c {MAX_PATCH_BYTES + 1}; rm -rf \"$scratch\"")
        env = {"GIT_DIR": BASE_GIT, "GIT_WORK_TREE": self.workdir, "GIT_CONFIG_NOSYSTEM": "1",
               "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_ATTR_NOSYSTEM": "1", "GIT_OPTIONAL_LOCKS": "0",
               "HOME": "/nonexistent", "LC_ALL": "C"}

        flags = " ".join(SAFE_GIT).replace("safe.directory=*", "'safe.directory=*'")
        await asyncio.to_thread(self._check_alive)
        await asyncio.to_thread(self._hand_over)
        res = await self._exec(["bash", "-c", script.replace("git ", f"git {flags} ")], 120, None,
                               {**self.tool_env, **env}, self.user, max_chars=MAX_PATCH_BYTES + 1)
        if res.exit_code != 0:
            raise RuntimeError(f"computing the patch in container {self.container_name} failed (exit "
                               f"{res.exit_code}): {res.output[-1000:]}")
        if len(res.output.encode()) > MAX_PATCH_BYTES:
            raise PatchTooLarge(f"the patch is over the patch bound of {MAX_PATCH_BYTES / 1048576:.0f} MiB; delete "
                                f"or shrink the large files it adds (generated data does not belong in a fix)")
        return res.output

    # -- the verifier's result channel ----------------------------------------------------------------------------
    async def exec_with_channel(self, argv: list[str], env: dict[str, str], timeout_s: float):
        """Run ``argv`` with the write end of a FIFO as ``SKYRL_RESULT_FD``; returns (ExecResult, lines).

        The FIFO lives in a host directory mounted read-only at ``/skyrl/channel``, owned by root with mode 0600:
        a root shell in the container (no capabilities but SETUID/SETGID, which only this verifier container
        gets) opens it, then ``setpriv`` drops to the runtime's user with no capabilities and runs ``argv``. The
        tested code therefore cannot open the FIFO again, and the file descriptor is not inherited by the
        processes it starts (the pytest plugin marks it close-on-exec). The host reads the other end."""
        if not self.channel_dir:
            raise RuntimeError("exec_with_channel needs a runtime made with channel_dir (the verifier's)")
        fifo = Path(self.channel_dir) / f"results-{uuid.uuid4().hex[:8]}"
        os.mkfifo(fifo, 0o600)
        read_fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
        keep_fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)  # so no EOF is seen before the tests open it
        uid, gid = self.user.split(":")
        opener = (f"exec 3>{CHANNEL}/{fifo.name} && SKYRL_RESULT_FD=3 exec setpriv --reuid={uid} --regid={gid} "
                  f"--clear-groups --inh-caps=-all --no-new-privs -- \"$@\"")

        async def run():
            await asyncio.to_thread(self._check_alive)
            await asyncio.to_thread(self._hand_over)
            return await self._exec(["timeout", "-s", "KILL", str(max(1, int(timeout_s))), "bash", "-c", opener,
                                     "skyrl-channel", *argv], timeout_s, None, {**self.tool_env, **env}, "0:0")

        try:
            return await read_channel_while(read_fd, keep_fd, run)
        finally:
            fifo.unlink(missing_ok=True)


def _discard(path: str) -> None:
    """Delete a host directory: renamed away at once, its files deleted by a (non-daemon) thread, because deleting
    thousands of files can take seconds on a busy disk and need not hold up the dispatcher's release."""
    trash = f"{path}.removed"
    try:
        os.rename(path, trash)
    except OSError:
        shutil.rmtree(path, ignore_errors=True)
        return
    threading.Thread(target=shutil.rmtree, args=(trash, True), name="skyrl-docker-rm").start()


_BUILD_LOCKS: dict[str, threading.Lock] = {}
_BUILD_GUARD = threading.Lock()


def build_on_demand(client: Any, data: dict) -> str:
    """Build an instance's image the first time a runtime needs it (once per instance per process; see
    :func:`skyrl_swe.images.build_instance_image`). Raises RepoUnavailable naming the fix when it cannot."""
    with _BUILD_GUARD:
        lock = _BUILD_LOCKS.setdefault(data["instance_id"], threading.Lock())
    with lock:
        try:
            image, status = build_instance_image(client, data)
        except (ImageBuildError, RepoUnavailable) as exc:
            raise RepoUnavailable(f"instance {data.get('instance_id')}: no docker image present, and building one "
                                  f"failed: {exc}. Build it with `skyrl swe build-images INSTANCES`, or set "
                                  f"runtime.options.pull: true") from None
    log.info("instance %s: image %s (%s)", data["instance_id"], image, status)
    return image


def leaked_containers(client: Any = None, this_process: bool = True) -> list[str]:
    """Names of the containers carrying the ``skyrl.runtime`` label that still exist (any state): those this
    process made (label ``skyrl.pid``), or every process's."""
    client = client or docker_client()
    labels = [LABEL] + ([f"skyrl.pid={os.getpid()}"] if this_process else [])
    # the low-level listing: one request, no per-container inspect that a concurrent removal would fail
    return [c["Names"][0].lstrip("/") for c in client.api.containers(all=True, filters={"label": labels})]

