"""The ``harbor_sandbox`` runtime: the core bubblewrap sandbox standing in for a Harbor task's image.

The workspace is mounted at the Dockerfile's ``WORKDIR`` (``/app`` by default; tasks and their tests name absolute
paths there) and commands start in it; the files the Dockerfile copies from ``environment/`` are laid into the
workspace; ``ENV`` is set. The task's limits apply on top of the config's (the smaller wins): ``[environment]
memory_mb`` bounds each command's memory, ``storage_mb`` the workspace's disk use, ``network_mode =
"no-network"`` keeps the network off whatever the config says, and ``[agent] timeout_sec``
(when set) the whole agent turn — once it has passed, every command is refused with the ``agent_timeout`` limit named.

The verifier uses the same runtime with ``mounts``: extra host directories bound at fixed places (the task's
``tests/`` read-only at ``/tests``, a fresh directory at ``/logs/verifier``), ``home`` ``/tmp`` (so nothing the
agent left in its HOME — a ``~/.local`` user site — runs in the tests), and no agent deadline.
"""

from __future__ import annotations

import asyncio
import shutil
import time
from pathlib import Path
from typing import Any

import attrs

from skyrl_core.default_plugins.runtimes.sandbox import LocalSandbox
from skyrl_core.runtime import ExecResult, RuntimeSpec

from .environment import SandboxPlan, sandbox_plan
from .taskdir import HarborTask, load_task


def task_spec(spec: RuntimeSpec, task: HarborTask, phase: str = "agent") -> RuntimeSpec:
    """``spec`` with the task's limits applied where it sets them: memory and storage (the smaller wins), and
    the ``phase``'s network mode (:meth:`HarborTask.phase_network_mode`) ``no-network`` turns the network off
    even where the config allows it."""
    return attrs.evolve(spec, memory_mb=min(int(spec.memory_mb), task.memory_mb or int(spec.memory_mb)),
                        disk_mb=min(int(spec.disk_mb), task.storage_mb or int(spec.disk_mb)),
                        network=bool(spec.network) and task.phase_network_mode(phase) != "no-network")


def lay_out(plan: SandboxPlan, workspace: Path) -> None:
    """Copy the files the Dockerfile copies from ``environment/`` into the workspace (its WORKDIR)."""
    for source, rel in plan.copies:
        target = (workspace / rel).resolve() if rel != "." else workspace
        if source.is_dir():
            shutil.copytree(source, target, dirs_exist_ok=True, symlinks=True)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)


def agent_clock(runtime: Any, timeout_s: float) -> tuple[float, ExecResult | None]:
    """The task's ``[agent] timeout_sec`` for one command of ``runtime`` (a ``harbor_sandbox`` or
    ``harbor_docker``: its ``task``, ``_timed``, ``deadline`` and ``limit_hits``): the clock starts at the first
    command; returns (the command's timeout, at most what is left; None) or, once it has passed, (0, the refusal
    with the ``agent_timeout`` limit named)."""
    if runtime._timed and runtime.deadline is None:
        runtime.deadline = time.monotonic() + runtime.task.agent_timeout_s
    if runtime.deadline is None:
        return timeout_s, None
    left = runtime.deadline - time.monotonic()
    if left <= 0:
        runtime.limit_hits["agent_timeout"] += 1
        return 0.0, ExecResult(exit_code=None, output=f"[limit agent_timeout: the task's [agent] timeout_sec of "
                               f"{runtime.task.agent_timeout_s:g} s has passed; no more commands run]",
                               timed_out=True, limits=["agent_timeout"])
    return min(timeout_s, left), None


class HarborSandbox(LocalSandbox):
    """A bubblewrap sandbox laid out as a Harbor task's image (see the module doc).

    ``instance`` (or :meth:`prepare`) gives the task: ``instance.data["path"]`` is its directory. ``mounts``:
    (host directory, place in the sandbox, writable) bound after the workspace; ``deadline``: a monotonic time
    after which commands are refused (``[agent] timeout_sec`` from the agent's first command: the time a
    dispatcher queues a prepared runtime is not the agent's; None for none).
    Raises HarborTaskError from :meth:`prepare` when the task directory is bad, HarborEnvironmentError when its
    environment needs a built image."""

    name = "harbor_sandbox"

    def __init__(self, spec: RuntimeSpec | None = None, instance: Any = None, **kwargs: Any) -> None:
        super().__init__(spec or RuntimeSpec(type=self.name), **kwargs)
        self.instance = instance
        self.task: HarborTask | None = None
        self.plan: SandboxPlan | None = None
        self.mounts: list[tuple[str, str, bool]] = []
        self.deadline: float | None = None
        self._timed = False  # the agent's clock starts at its first command (queueing before it is not its time)
        self.home: str | None = None  # HOME inside (None: the WORKDIR); the verifier's is outside the workspace

    async def start(self) -> None:
        await super().start()
        if self.instance is not None and self.task is None:
            await self.prepare(self.instance)

    async def prepare(self, instance: Any, agent_deadline: bool = True) -> None:
        """Read the task, apply its limits, lay its files into the workspace and arm the agent's clock (it starts
        at the first command)."""
        self.instance = instance
        self.task = await asyncio.to_thread(load_task, instance.data["path"])
        self.plan = await asyncio.to_thread(sandbox_plan, self.task)
        self.spec = task_spec(self.spec, self.task, "agent" if agent_deadline else "verifier")
        if not self.spec.source:  # a verifier's copy of the agent's workspace already holds the laid-out files
            await asyncio.to_thread(lay_out, self.plan, self.workspace)
        self._timed = bool(agent_deadline and self.task.agent_timeout_s)
        self.deadline = None

    @property
    def workdir(self) -> str:
        return self.plan.workdir if self.plan else str(self.workspace)

    def _argv(self, command: str | list[str]) -> list[str]:
        argv = super()._argv(command)
        if not self.bwrap or self.plan is None:
            return argv
        ws = str(self.workspace)
        extra = ["--bind", ws, self.workdir]
        made: set[str] = set()
        for host, place, writable in self.mounts:
            parts = Path(place).parts[1:-1]
            for i in range(len(parts)):
                parent = "/" + "/".join(parts[: i + 1])
                if parent not in made:
                    made.add(parent)
                    extra += ["--perms", "0755", "--dir", parent]
            extra += ["--bind" if writable else "--ro-bind", host, place]
        at = argv.index("--remount-ro")
        argv = [*argv[:at], *extra, *argv[at:]]
        home = self.home or self.workdir
        return [self.workdir if a == ws and argv[i - 1] == "--chdir" else
                home if a == ws and argv[i - 1] == "HOME" and argv[i - 2] == "--setenv" else a
                for i, a in enumerate(argv)]

    async def exec(self, command: str | list[str], timeout_s: float = 30.0, stdin: str | None = None,
                   env: dict[str, str] | None = None, pass_fds: tuple[int, ...] = ()) -> ExecResult:
        """Run ``command`` from the WORKDIR with the Dockerfile's ENV; refused (limit ``agent_timeout``) once the
        task's agent timeout has passed, and bounded by what is left of it."""
        timeout_s, refused = agent_clock(self, timeout_s)
        if refused is not None:
            return refused
        full = dict(self.plan.env) if self.plan else {}
        if self.plan and self.bwrap:
            full["HOME"] = self.home or self.workdir
        full.update(env or {})
        return await super().exec(command, timeout_s=timeout_s, stdin=stdin, env=full, pass_fds=pass_fds)
