"""Git on the host over a repository an agent may have written: the baseline commit, the agent's patch and the
patch bound (docs/runtimes.md, "What the patch can hold").

Host git never reads anything the agent controls: the git directory lives outside the workspace, no system or
user configuration is read, and :data:`SAFE_GIT` switches off hooks, fsmonitor, external diff drivers and
attribute files. A leaf module (the core's errors only), shared by both runtimes."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from skyrl_core.errors import SkyrlError

GIT_IDENTITY = ["-c", "user.name=skyrl", "-c", "user.email=skyrl@localhost", "-c", "commit.gpgsign=false",
                "-c", "core.autocrlf=false"]


# Every way git could run a program or read settings the agent wrote, switched off: no system or user config,
# the repository's config is ours (the git directory lives outside the workspace), no hooks, no fsmonitor, no
# attribute files but the work tree's (whose filter/textconv drivers would need config, which it cannot reach).
SAFE_GIT = ["-c", "core.fsmonitor=false", "-c", "core.hooksPath=/dev/null", "-c", "core.attributesFile=/dev/null",
            "-c", "core.untrackedCache=false", "-c", "core.quotepath=off", "-c", "diff.external=",
            "-c", "core.autocrlf=false", "-c", "safe.directory=*"]


def safe_git_env(git_dir: Path, work_tree: Path, **extra: str) -> dict[str, str]:
    """The environment for host git on an agent-written work tree: ``GIT_DIR`` outside it, no config files."""
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": "/nonexistent", "LC_ALL": "C",
            "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_ATTR_NOSYSTEM": "1",
            "GIT_TERMINAL_PROMPT": "0", "GIT_OPTIONAL_LOCKS": "0", "GIT_DIR": str(git_dir),
            "GIT_WORK_TREE": str(work_tree), **extra}


def init_baseline(workspace: Path, git_dir: Path) -> str:
    """Commit ``workspace``'s current content (before any agent acts) as the only commit of a new repository at
    ``git_dir`` (outside the workspace), and give the workspace a copy as its ``.git`` for the agent's own use:
    base-only history, no remotes, no later refs. Returns the commit id."""
    env = safe_git_env(git_dir, workspace)
    run = lambda *a: subprocess.run(["git", *GIT_IDENTITY, *SAFE_GIT, *a], cwd=str(git_dir.parent), env=env,
                                    check=True, capture_output=True)  # noqa: E731
    shutil.rmtree(workspace / ".git", ignore_errors=True)
    run("init", "-q")
    run("config", "--unset", "core.worktree") if b"worktree" in (git_dir / "config").read_bytes() else None
    run("add", "-A", "-f", ".")
    run("commit", "-q", "--allow-empty", "--no-verify", "-m", "skyrl baseline")
    commit = run("rev-parse", "HEAD").stdout.decode().strip()
    shutil.copytree(git_dir, workspace / ".git", symlinks=True)
    return commit


MAX_PATCH_BYTES = 10 * 1024 * 1024  # a fix, not a data dump: SWE-bench's gold patches are kilobytes


class PatchTooLarge(SkyrlError):
    """The agent's changes exceed :data:`MAX_PATCH_BYTES`; the message names the largest files."""


def nested_repositories(workspace: Path) -> list[str]:
    """Directories below ``workspace`` (not itself) holding a ``.git`` entry: git would record them as
    submodules (or refuse an empty one), so their files are never part of the patch. Symlinks not followed."""
    found = []
    for dirpath, dirnames, filenames in os.walk(workspace):
        if dirpath == str(workspace):
            dirnames[:] = [d for d in dirnames if d != ".git"]
            continue
        if ".git" in dirnames or ".git" in filenames:
            found.append(Path(dirpath).relative_to(workspace).as_posix())
            dirnames[:] = []
    return sorted(found)


def workspace_diff(workspace: Path, git_dir: Path, notes: list[str] | None = None) -> str:
    """The agent's patch: the work tree against the baseline commit, new files included, computed on the host
    with a git directory outside the workspace and a throw-away index (see :data:`SAFE_GIT`). Nested
    repositories are left out (and named in ``notes``), submodule settings ignored (a ``.gitmodules`` git
    refuses must not break the diff). Raises PatchTooLarge when the changed files hold more than
    :data:`MAX_PATCH_BYTES`, before the text diff is made."""
    fd, index = tempfile.mkstemp(prefix="skyrl-index-")
    os.close(fd)
    os.unlink(index)
    try:
        env = safe_git_env(git_dir, workspace, GIT_INDEX_FILE=index)
        run = lambda *a, **kw: subprocess.run(["git", *SAFE_GIT, *a], cwd=str(git_dir.parent), env=env, check=True,
                                              capture_output=True, **kw)  # noqa: E731
        run("read-tree", "HEAD")
        nested = nested_repositories(workspace)
        if nested and notes is not None:
            notes.append(f"left out of the patch: {', '.join(n + '/' for n in nested[:10])} (a directory holding "
                         f"its own .git is a nested repository; its files are not part of the patch)")
        # files over 1 MiB are hashed as a stream, not read whole into git's memory
        run("-c", "core.bigFileThreshold=1m", "add", "-A", "--", ".", *[f":(exclude,literal){n}" for n in nested])
        _check_patch_size(run)
        out = run("diff", "--cached", "--no-color", "--no-ext-diff", "--no-textconv", "--ignore-submodules=all",
                  "HEAD")
        return out.stdout.decode("utf-8", "replace")
    finally:
        Path(index).unlink(missing_ok=True)


def _check_patch_size(run: Any) -> None:
    """Raise PatchTooLarge when the new content of the staged changes (blob sizes, read from git's object
    headers, never the blobs themselves) exceeds MAX_PATCH_BYTES."""
    raw = run("diff", "--cached", "--raw", "-z", "--no-abbrev", "--no-renames", "--ignore-submodules=all",
              "HEAD").stdout.split(b"\0")
    entries = [(raw[i].split()[3].decode(), raw[i + 1].decode("utf-8", "replace"))
               for i in range(0, len(raw) - 1, 2) if raw[i].startswith(b":")]
    blobs = [(sha, path) for sha, path in entries if sha.strip("0")]
    if not blobs:
        return
    sizes = run("cat-file", "--batch-check=%(objectsize)", input="".join(f"{sha}\n" for sha, _ in blobs).encode())
    sized = sorted(((int(n), path) for n, (_, path) in zip(sizes.stdout.split(), blobs)), reverse=True)
    total = sum(n for n, _ in sized)
    if total > MAX_PATCH_BYTES:
        biggest = ", ".join(f"{path} ({n / 1048576:.1f} MiB)" for n, path in sized[:3])
        raise PatchTooLarge(f"the changed files hold {total / 1048576:.1f} MiB, over the patch bound of "
                            f"{MAX_PATCH_BYTES / 1048576:.0f} MiB (largest: {biggest}); delete or shrink them "
                            f"(generated data does not belong in a fix)")
