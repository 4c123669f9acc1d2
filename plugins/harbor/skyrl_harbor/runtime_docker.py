"""The ``harbor_docker`` runtime: a Harbor task's own image, built here (:mod:`skyrl_harbor.images`), one container
per trajectory — skyrl-swe's hardened docker runtime (its command execution, limits, stray-process reaping and
exactly-once removal) with the container laid out as Harbor lays it out.

- **The workspace** is the image's ``WORKDIR`` (``[environment] workdir`` when set, else the Dockerfile's, else
  ``/app``), copied out of the image into a private host directory and bind-mounted back read-write: what the
  agent leaves there is what the verifier sees. The rest of the container is the image's, writable only in the
  container's own layer, which is thrown away with it: of the changes the agent makes outside the ``WORKDIR``
  only those in non-system top-level directories reach the verifier (see below).
- **Who runs**: root inside the container (Harbor's agents and ``solve.sh`` install packages), with every
  capability dropped but those ``apt-get`` and ``pip`` need (CHOWN, DAC_OVERRIDE, FOWNER, FSETID, SETUID, SETGID,
  KILL), ``no-new-privileges``, cgroup limits (memory, processes, ``cpus``), ``/tmp`` a tmpfs (executable: tools
  such as ``uvx`` run from their cache there) and ``HOME`` there (a WORKDIR of ``/tmp`` is the workspace instead,
  and ``HOME`` is ``/root``).
  ``runtime.options.user`` names another user.
- **Network**: none unless ``runtime.network`` is true and the task's ``network_mode`` is not ``no-network``.
- **The task's limits** as in ``harbor_sandbox``: ``memory_mb``/``storage_mb`` lower the config's, ``cpus`` is the
  container's CPU share, ``[agent] timeout_sec`` bounds the agent's turn from its first command.

The verifier makes a fresh ``harbor_docker`` from the same (pristine) image over a copy of the agent's workspace
(``spec.source``), with ``mounts`` — the tests read-only at ``/tests``, a fresh host directory at
``/logs/verifier`` — that exist in no agent container, and copies of the other top-level directories the agent
changed outside the system's (:meth:`HarborDocker.carry_out`: a task's ``/output``, say; never ``/usr``, ``/opt``,
``/etc``...: whatever the agent did to the system stays in its container).
"""

from __future__ import annotations

import io
import logging
import os
import shutil
import tempfile
import threading
from pathlib import Path
from typing import Any

from skyrl_core.errors import ConfigError
from skyrl_core.runtime import ExecResult, RuntimeSpec

from .images import build_task_image, swe_images
from .runtime import agent_clock, task_spec
from .taskdir import HarborTask, load_task

log = logging.getLogger(__name__)

DEFAULT_WORKDIR = "/app"
CAPS = ["CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "SETUID", "SETGID", "KILL"]
# top-level directories whose changes never reach the verifier: the system (the tests' runner, interpreters and
# tools live there), HOME, and the places the verifier mounts itself
SYSTEM = frozenset({"/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib32", "/lib64", "/libx32", "/media", "/mnt",
                    "/opt", "/proc", "/root", "/run", "/sbin", "/snap", "/srv", "/sys", "/tmp", "/usr", "/var",
                    "/tests", "/logs", "/solution"})
_BUILD_LOCKS: dict[str, threading.Lock] = {}
_GUARD = threading.Lock()


def task_image(client: Any, task: HarborTask) -> Any:
    """The task's :class:`~skyrl_harbor.images.TaskImage`, built once per task directory per process."""
    with _GUARD:
        lock = _BUILD_LOCKS.setdefault(str(task.path), threading.Lock())
    with lock:
        return build_task_image(client, task)


def image_workdir(client: Any, tag: str, task: HarborTask) -> str:
    """Where commands start: ``[environment] workdir``, else the image's WORKDIR, else ``/app``."""
    configured = client.images.get(tag).attrs.get("Config", {}).get("WorkingDir") or ""
    return task.workdir or (configured if configured not in ("", "/") else DEFAULT_WORKDIR)


def docker_runtime_class() -> type:
    """:class:`HarborDocker`, defined on first use over skyrl-swe's ``DockerRuntime`` (RuntimeError naming the
    fix when skyrl-swe is not installed)."""
    global HarborDocker
    if HarborDocker is not None:
        return HarborDocker
    swe_images()  # the clear error when skyrl-swe is missing
    from skyrl_swe.docker_runtime import DockerRuntime

    class _HarborDocker(DockerRuntime):
        """See the module doc. Attributes once prepared: ``task``, ``image`` (tag), ``substitution`` (which
        local base stood in for which ``FROM``), ``workspace`` (host copy of the WORKDIR)."""

        name = "harbor_docker"

        def __init__(self, spec: RuntimeSpec | None = None, instance: Any = None, **kwargs: Any) -> None:
            super().__init__(spec or RuntimeSpec(type=self.name), instance, **kwargs)
            self.user = str(self.spec.options.get("user") or "0:0")
            self.task: HarborTask | None = None
            self.substitution = ""
            self.mounts: list[tuple[str, str, bool]] = []
            self.deadline: float | None = None
            self._timed = False
            self.agent_deadline = True

        async def prepare(self, instance: Any, agent_deadline: bool = True) -> None:
            """Build (or reuse) the task's image and start its container; arm the agent's clock (it starts at
            the first command). Raises ImageBuildError (with its reason class) when the image cannot be built."""
            self.agent_deadline = agent_deadline
            await super().prepare(instance)

        def _prepare_sync(self, data: dict) -> None:
            import docker

            task = self.task = load_task(data["path"])
            self.spec = task_spec(self.spec, task, "agent" if self.agent_deadline else "verifier")
            built = task_image(self.client, task)
            self.image, self.substitution = built.tag, built.substitution
            log.info("task %s: image %s (%s; %s)", task.name, built.tag, built.status, built.substitution)
            self.workdir = image_workdir(self.client, self.image, task)
            self._tmp = tempfile.mkdtemp(prefix="skyrl-harbor-docker-")
            ws = Path(self._tmp) / "ws"
            if self.spec.source:  # the verifier: a copy of the agent's workspace
                shutil.copytree(self.spec.source, ws, symlinks=True)
            else:
                ws.mkdir()
                try:
                    buf = swe_images().image_archive(self.client, self.image, self.workdir)
                    swe_images().extract_tree(buf, Path(self.workdir).name, ws)
                except docker.errors.NotFound:  # no WORKDIR in the image: an empty one
                    pass
            os.chmod(ws, 0o755)
            self.workspace = ws
            self._hand_over()
            spec, mib = self.spec, 1024 * 1024
            volumes = {str(ws): {"bind": self.workdir, "mode": "rw"}}
            for host, place, writable in self.mounts:
                volumes[host] = {"bind": place, "mode": "rw" if writable else "ro"}
            cpus = min(self.cpus, task.cpus) if task.cpus else self.cpus
            # a WORKDIR of /tmp (some tasks have one) is the workspace there: no tmpfs over it, and HOME moves to
            # /root so that the verifier, whose /tmp is the agent's workspace, reads none of the agent's dotfiles
            tmp = {"/tmp": f"rw,exec,nosuid,nodev,size={spec.tmp_mb}m,mode=1777"}
            tmpfs = {} if self.workdir == "/tmp" else tmp
            home = "/root" if self.workdir == "/tmp" or self.workdir.startswith("/tmp/") else "/tmp"
            self.container = self.client.containers.run(
                self.image, command=["sleep", "infinity"], entrypoint=[], init=True, detach=True,
                name=self.container_name, user=self.user, working_dir=self.workdir,
                network_mode="bridge" if spec.network else "none", cap_drop=["ALL"], cap_add=CAPS,
                security_opt=["no-new-privileges"],
                tmpfs=tmpfs,
                pids_limit=spec.max_processes, mem_limit=spec.memory_mb * mib, memswap_limit=spec.memory_mb * mib,
                nano_cpus=int(cpus * 1e9), volumes=volumes, environment={"HOME": home},
                ulimits=[docker.types.Ulimit(name="fsize", soft=spec.max_file_mb * mib, hard=spec.max_file_mb * mib)],
                labels={"skyrl.runtime": "docker", "skyrl.pid": str(os.getpid()), "skyrl.harbor.task": task.name})
            self.tool_env = {}
            self._timed = bool(self.agent_deadline and task.agent_timeout_s)
            self.prepared = True

        async def exec(self, command: str | list[str], timeout_s: float = 30.0, stdin: str | None = None,
                       env: dict[str, str] | None = None, user: str | None = None) -> ExecResult:
            """Run ``command`` in the container from the WORKDIR (the image's ENV applies); refused (limit
            ``agent_timeout``) once the task's agent timeout has passed, and bounded by what is left of it."""
            timeout_s, refused = agent_clock(self, timeout_s)
            if refused is not None:
                return refused
            return await super().exec(command, timeout_s=timeout_s, stdin=stdin, env=env, user=user)

        def carry_out(self) -> dict[str, str]:
            """Copy out the top-level directories outside the system's (:data:`SYSTEM`) that the agent changed in
            its container (``docker diff``; e.g. a task's ``/output``): {place in the container: host copy}, for
            the verifier to mount. The WORKDIR is the workspace already; system directories (where the tests'
            interpreters and tools live) never travel."""
            changed = self.client.api.diff(self.container.id) or []
            roots = sorted({"/" + c["Path"].split("/")[1] for c in changed if c["Path"].count("/") >= 1})
            out: dict[str, str] = {}
            for root in roots:
                if root in SYSTEM or root == self.workdir or self.workdir.startswith(root + "/"):
                    continue
                dest = Path(self._tmp) / "carried" / root.lstrip("/")
                shutil.rmtree(dest, ignore_errors=True)  # a second call copies afresh
                dest.mkdir(parents=True)
                try:
                    stream, _ = self.container.get_archive(root)
                except Exception as exc:  # noqa: BLE001 - deleted meanwhile, or not a directory
                    log.debug("not carrying %s: %s", root, exc)
                    continue
                swe_images().extract_tree(io.BytesIO(b"".join(stream)), root.lstrip("/"), dest)
                out[root] = str(dest)
            return out

        async def diff(self) -> str:
            """Refused: a Harbor image has no repository baseline (the swe docker runtime's ``/skyrl/base.git``)
            to diff against; Harbor's verifier reads the workspace itself. Raises ConfigError naming the swe
            pieces that ask for a patch (the ``submit`` tool, the ``swe_tests`` verifier) and what to use."""
            raise ConfigError("runtime 'harbor_docker' has no repository baseline, so it makes no patch: the swe "
                              "plugin's 'submit' tool and 'swe_tests' verifier need runtime 'docker' or "
                              "'swe_sandbox'; a Harbor task uses tools terminal, finish and verifier harbor_tests")

    _HarborDocker.__name__ = _HarborDocker.__qualname__ = "HarborDocker"
    HarborDocker = _HarborDocker
    return HarborDocker


HarborDocker: Any = None

