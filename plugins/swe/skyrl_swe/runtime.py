"""Runtimes for repository tasks.

``swe_sandbox``: the core bubblewrap sandbox (no network, read-only system, writable workspace) holding a copy of
the instance's repository as a git repository whose HEAD is the pristine state (so ``git diff`` is the agent's
patch), with the repository's Python environment on ``PATH``. Environments are built once per repository
version and repository content inside a sandbox (:mod:`skyrl_swe.environments`) and reused by every
trajectory and the verifier.

``docker``: one hardened container per trajectory from the instance's image (:mod:`skyrl_swe.docker_runtime`).
Host git over the agent's tree (the baseline commit, the patch and its bound) is :mod:`skyrl_swe.git_safety`.

A runtime learns its instance either at construction (``cls(spec, instance=...)``, then ``start`` prepares it) or
through :meth:`prepare`, which the rollout's init stage calls right after ``start`` — so the repository copy and the
environment build happen in the dispatcher's init stage, never at the first tool call. A tool that finds its
runtime unprepared answers with an error saying so (:func:`prepare_for_tool`).
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from skyrl_core.default_plugins.runtimes.sandbox import LocalSandbox
from skyrl_core.runtime import ExecResult, RuntimeSpec

from .data import resolve_repository
from .environments import ENVIRONMENTS  # a module attribute: a benchmark swaps the layer cache here
from .git_safety import init_baseline, workspace_diff

log = logging.getLogger(__name__)


def exec_env(workspace: Path, env_dir: Path | None) -> dict[str, str]:
    """Environment variables that put the repository's environment first and make its code importable."""
    out: dict[str, str] = {}
    if env_dir is not None:
        out["PATH"] = f"{env_dir / 'bin'}:{os.environ.get('PATH', '/usr/bin:/bin')}"
        out["VIRTUAL_ENV"] = str(env_dir)
    paths = [str(workspace)] + ([str(workspace / "src")] if (workspace / "src").is_dir() else [])
    out["PYTHONPATH"] = ":".join(paths)
    return out


def copy_missing(src: Path, dst: Path) -> None:
    """Copy the entries of ``src`` that ``dst`` lacks (symlinks as links; directories merged recursively)."""
    def present(directory: str, names: list[str]) -> set[str]:
        target = dst / Path(directory).relative_to(src)
        return {n for n in names if os.path.lexists(target / n)
                and ((target / n).is_symlink() or not (target / n).is_dir() or os.path.islink(Path(directory, n)))}

    shutil.copytree(src, dst, dirs_exist_ok=True, symlinks=True, ignore=present)


# -- runtimes ------------------------------------------------------------------------------------------------------
class SweSandbox(LocalSandbox):
    """A bubblewrap sandbox over a copy of the instance's repository, with the repository's environment mounted
    read-only. The pristine state is a one-commit git repository kept outside the workspace (the agent's
    ``.git`` is a copy of it: base-only history); :meth:`diff` compares the work tree against it.

    Options (``runtime.options``): ``mirror_dir`` (local clones, see :func:`skyrl_swe.data.resolve_repository`),
    ``allow_clone`` (clone from GitHub when online; default true).
    Attributes once prepared: ``base_commit`` (the pristine HEAD), ``env_dir``, ``instance``.
    """

    name = "swe_sandbox"

    def __init__(self, spec: RuntimeSpec | None = None, instance: Any = None, **kwargs: Any) -> None:
        super().__init__(spec or RuntimeSpec(type=self.name), **kwargs)
        self.instance = instance
        self.prepared = False
        self.base_commit: str | None = None
        self.env_dir: Path | None = None
        self.tool_env: dict[str, str] = {}
        self.diff_notes: list[str] = []  # what the last diff left out, and why
        self._private: str | None = None

    async def start(self) -> None:
        await super().start()
        if self.instance is not None:
            await self.prepare(self.instance)
        elif self.spec.source or self.spec.workspace:
            await asyncio.to_thread(self._baseline_only)

    def _base_git(self) -> Path:
        if self._private is None:
            self._private = tempfile.mkdtemp(prefix="skyrl-base-")
        return Path(self._private) / "base.git"

    def _baseline_only(self) -> None:
        if not self.spec.workspace:  # used in place (skyrl tools run): never commit into a user's repository
            self.base_commit = init_baseline(self.workspace, self._base_git())
        self.tool_env = exec_env(self.workspace, None)
        self.prepared = True

    async def prepare(self, instance: Any) -> None:
        """Copy the instance's repository into the workspace at its base commit and attach its environment.
        Raises RepoUnavailable (with the reason) when no source of the repository is reachable."""
        if self.prepared:
            return
        self.instance = instance
        data = instance.data if hasattr(instance, "data") else dict(instance)
        await asyncio.to_thread(self._prepare_sync, data)

    def _prepare_sync(self, data: dict) -> None:
        source = resolve_repository(data, self.spec.options)
        if any(self.workspace.iterdir()):
            shutil.rmtree(self.workspace)
            self.workspace.mkdir()
        env = ENVIRONMENTS.get(data, Path(source), isolation=self.spec.isolation)
        # the repository's own files as they are at the base commit, then what the install step added to the tree
        # (compiled extensions, *.egg-info) where the repository has nothing (a version file the build rewrote
        # stays the repository's; a symlink is copied once, never over itself)
        shutil.copytree(source, self.workspace, dirs_exist_ok=True, symlinks=True)
        if env.tree is not None:
            copy_missing(env.tree, self.workspace)
        self.base_commit = init_baseline(self.workspace, self._base_git())
        self.env_dir = env.venv
        self.ro_paths.extend(m for m in env.mounts if m not in self.ro_paths)
        self.host_venv = False
        self.tool_env = exec_env(self.workspace, self.env_dir)
        self.prepared = True

    async def exec(self, command, timeout_s: float = 30.0, stdin: str | None = None,
                   env: dict[str, str] | None = None, pass_fds: tuple[int, ...] = ()) -> ExecResult:
        merged = dict(self.tool_env)
        merged.update(env or {})
        return await super().exec(command, timeout_s=timeout_s, stdin=stdin, env=merged, pass_fds=pass_fds)

    async def diff(self) -> str:
        """The agent's patch: every change against the pristine commit, new files included. A workspace used in
        place has no private baseline: its own ``git diff`` then runs inside the sandbox."""
        if self.base_commit is None:
            res = await self.exec("cp .git/index /tmp/skyrl-index && export GIT_INDEX_FILE=/tmp/skyrl-index && "
                                  "git add -A . && git -c core.quotepath=off diff --cached --no-color HEAD",
                                  timeout_s=60)
            return res.output if res.exit_code == 0 else ""
        self.diff_notes = []
        return await asyncio.to_thread(workspace_diff, self.workspace, self._base_git(), self.diff_notes)

    async def close(self) -> None:
        await super().close()
        if self._private:
            await asyncio.to_thread(shutil.rmtree, self._private, True)


async def ensure_prepared(runtime: Any, instance: Any) -> None:
    """Prepare ``runtime`` for ``instance`` if it supports it and is not yet prepared (idempotent)."""
    prepare = getattr(runtime, "prepare", None)
    if prepare is not None and not getattr(runtime, "prepared", True) and instance is not None:
        await prepare(instance)


async def prepare_for_tool(ctx: Any):
    """None when the trajectory's runtime is ready for a tool, else a ToolResult error: a repository runtime that
    was started but never prepared (``Runtime.prepare`` belongs to the init stage, before any tool acts)."""
    from skyrl_core import ToolResult

    runtime = ctx.runtime
    if runtime is not None and getattr(runtime, "prepared", True) is False:
        return ToolResult(output=f"Error: the {getattr(runtime, 'name', 'runtime')} runtime holds no repository: "
                                 f"it was started without an instance and never prepared (call "
                                 f"`await runtime.prepare(instance)` after `start`, as the rollout's init stage "
                                 f"does, or give it runtime.source / runtime.workspace)", error=True)
    return None


def outside_workspace(root: Path, path: str) -> str | None:
    """None when ``path`` (relative to ``root``, or absolute) lies inside the workspace ``root`` after resolving
    ``..`` and symlinks, else the error every file-system tool gives (one rule, one message)."""
    raw = Path(path)
    full = (raw if raw.is_absolute() else Path(root) / raw).resolve()
    if full == Path(root).resolve() or Path(root).resolve() in full.parents:
        return None
    return (f"path '{path[:200]}' is outside the workspace {root}; give a path inside it (relative paths are "
            f"relative to the workspace)")


async def workspace_for_tool(ctx: Any, tool: str):
    """``(workspace, None)`` when the trajectory's runtime is prepared and has a workspace, else
    ``(None, ToolResult error)`` saying what is missing: the shared preamble of the file-system tools."""
    from skyrl_core import ToolResult

    failure = await prepare_for_tool(ctx)
    if failure is not None:
        return None, failure
    root = getattr(ctx.runtime, "workspace", None)
    if root is None:
        return None, ToolResult(output=f"{tool} needs a runtime with a workspace, but this trajectory has none",
                                error=True)
    return root, None
