"""Each instance's Python environment, built from what its row specifies, inside a sandbox, cached.

Two layers, as the SWE-bench harness has an environment image per repository version and an instance image per
instance:

1. **the environment** (per repository version): a venv of the host's base interpreter holding pip, pytest (the
   row's ``pytest`` pin, else the latest), the row's ``requirements`` and ``pip_packages``. Key: ``env_key`` in
   the row, else ``repo@version``, plus a hash of the Python version and the packages.
2. **the install** (per repository content, when the row has ``environment_setup``, ``pre_install`` or
   ``install`` commands, e.g. ``pip install -e .``): a pristine copy of the repository and a small venv layered
   over the environment (a ``.pth`` file adds the environment's site-packages), in which the row's
   ``environment_setup`` commands (a string, one command a line, or a list), then ``pre_install`` and
   ``install`` run with the copy as their working directory — where rows in the wild expect them: their
   ``environment_setup`` holds ``pip install -e .`` as often as version pins. (Built without a repository,
   ``environment_setup`` runs in the environment's own directory.) What the step leaves in the copy (compiled
   extensions, generated version
   files, ``*.egg-info``) is the tree every workspace is copied from; what it installs (distribution metadata,
   entry points, console scripts) lives in the small venv. Key: the environment's key plus a hash of the
   repository's files (paths and bytes) and of the command.

Every step runs inside the core bubblewrap sandbox (:class:`skyrl_core.default_plugins.runtimes.sandbox.LocalSandbox`), never as a plain
host subprocess: the network is on for these steps only, the layer's own directory is the only writable mount,
the earlier layer and the host's pip package are mounted read-only, and as root the steps run as ``nobody``.
The rows are the dataset's, not the agent's, but a setup script or an sdist's ``setup.py`` is still code from
outside. A built layer is handed back to the host user, made read-only for others, and recorded by a marker
file *next to* its directory (which a build step cannot write). Sandboxes then mount the layers read-only in
place of the host venv. Agent edits never reach a build: a workspace is a copy of the built tree, and the
installed package's code is imported from the workspace (``PYTHONPATH`` first).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import fcntl
import hashlib
import json
import logging
import os
import shlex
import shutil
import stat
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable

import attrs

from skyrl_core.errors import SkyrlError
from skyrl_core.default_plugins.runtimes.sandbox import UNPRIVILEGED_HOST_ID, LocalSandbox, hand_over
from skyrl_core.runtime import RuntimeSpec

from .paths import cache_dir

log = logging.getLogger(__name__)

BUILD_TIMEOUT_S = 1800.0
# what the sandboxed pip may take from the host's environment (its index, proxy and certificate settings)
PIP_ENV = ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_TRUSTED_HOST", "PIP_CERT", "PIP_DEFAULT_TIMEOUT",
           "PIP_DISABLE_PIP_VERSION_CHECK", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy",
           "no_proxy")
MARKER = ".json"


class EnvironmentBuildError(SkyrlError):
    """A build step of an instance's environment failed; the message names the layer, the command and its
    output's tail."""


@attrs.frozen
class Environment:
    """A built environment. ``venv``: the directory whose ``bin`` goes first on ``PATH`` (the install layer's
    venv when the row has an install step, else the environment itself); ``mounts``: host directories a sandbox
    mounts read-only for it; ``tree``: the repository as the install step left it (None without one): what a
    workspace is copied from; ``key``: the cache key of the last layer."""

    venv: Path
    mounts: tuple[str, ...]
    tree: Path | None
    key: str


def _commands(value: Any) -> list[str]:
    if not value:
        return []
    if isinstance(value, str):
        return [line for line in (s.strip() for s in value.splitlines()) if line and not line.startswith("#")]
    return [str(v) for v in value if str(v).strip()]


def _digest(*parts: str) -> str:
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:12]


_DIGESTS: dict[tuple, str] = {}


def tree_digest(root: Path) -> str:
    """A content hash of a source tree: every file's relative path, mode bit for execution and bytes (symlinks by
    their target), ``.git`` and ``__pycache__`` left out. About 1 s for 100 MB; remembered per process for a
    directory (by path, inode and mtime), as repository sources are never edited in place."""
    st = os.stat(root)
    memo = (str(root), st.st_ino, st.st_mtime_ns)
    if memo not in _DIGESTS:
        _DIGESTS[memo] = _tree_digest(root)
    return _DIGESTS[memo]


def _tree_digest(root: Path) -> str:
    h = hashlib.sha256()
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in (".git", "__pycache__"))
        for name in sorted(filenames):
            path = Path(dirpath, name)
            rel = path.relative_to(root).as_posix()
            h.update(rel.encode() + b"\0")
            if path.is_symlink():
                h.update(b"link:" + os.readlink(path).encode())
            else:
                h.update(b"x" if os.access(path, os.X_OK) else b"-")
                with open(path, "rb") as fh:
                    for block in iter(lambda: fh.read(1 << 20), b""):
                        h.update(block)
            h.update(b"\0")
    return h.hexdigest()[:16]


def _site_packages(venv: Path) -> Path:
    return venv / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"


def _base_python() -> str:
    return getattr(sys, "_base_executable", None) or sys.executable


def _pip_package() -> str:
    """The host's pip package directory: mounted read-only (alone) into the first build step, which uses it to
    install the environment's own pip from the index."""
    import pip

    return os.path.dirname(os.path.realpath(pip.__file__))


class RepoEnvironments:
    """One environment per repository version and one install per repository content (see the module doc),
    each built once (process- and file-locked) under ``root`` and reused by every trajectory and the verifier.

    ``get(data, source)`` returns the :class:`Environment`; it raises :class:`EnvironmentBuildError` naming the
    failing step, and ``SandboxUnavailable`` when bubblewrap cannot run (unless ``isolation`` is ``none``, the
    run's explicit opt-out, which then builds with plain subprocesses)."""

    def __init__(self, root: Path | None = None) -> None:
        self._root = root
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()

    @property
    def root(self) -> Path:
        """Where the layers live: ``root`` if given, else ``<cache_dir>/envs`` (read when first used)."""
        return self._root or cache_dir() / "envs"

    # -- what a row asks for ---------------------------------------------------------------------------------------
    @staticmethod
    def packages_for(data: dict) -> list[str]:
        extra = data.get("pip_packages") or []
        if isinstance(extra, str):
            extra = extra.split()
        return [str(data.get("pytest") or "pytest"), *(data.get("requirements") or []), *extra]

    @staticmethod
    def setup_for(data: dict) -> list[str]:
        """The row's ``environment_setup`` commands (run in the repository copy, before the install step)."""
        return _commands(data.get("environment_setup"))

    @staticmethod
    def install_for(data: dict) -> list[str]:
        """The row's install step (``pre_install`` then ``install``; run in the repository copy)."""
        return _commands(data.get("pre_install")) + _commands(data.get("install"))

    @classmethod
    def key_for(cls, data: dict, with_setup: bool = False) -> str:
        """The environment layer's key; ``with_setup``: the layer also runs ``environment_setup`` (no source)."""
        key = data.get("env_key") or f"{data.get('repo', 'repo')}@{data.get('version') or 'any'}"
        setup = cls.setup_for(data) if with_setup else []  # the marker stays: layers built before keep their key
        return key + "+" + _digest(sys.version.split()[0], *sorted(cls.packages_for(data)), "--setup--", *setup)

    def path_for(self, key: str) -> Path:
        slug = "".join(c if c.isalnum() or c in "-_.@+" else "_" for c in key)
        return self.root / slug

    # -- building ----------------------------------------------------------------------------------------------------
    def get(self, data: dict, source: Path | None = None, isolation: str = "bubblewrap") -> Environment:
        """The environment of an instance (``data``: its row; ``source``: its pristine repository), building
        the missing layers first (seconds to minutes; cached afterwards)."""
        key = self.key_for(data, with_setup=source is None)
        env = self._layer(key, lambda path: self._build_env(path, key, data, isolation, with_setup=source is None))
        install = [(f"environment_setup: {cmd}", cmd) for cmd in self.setup_for(data)]
        install += [(f"install: {cmd}", cmd) for cmd in self.install_for(data)]
        if not install or source is None:
            return Environment(venv=env, mounts=(str(env),), tree=None, key=key)
        ikey = f"{key}+install-{_digest(tree_digest(Path(source)), *(cmd for _, cmd in install))}"
        layer = self._layer(ikey, lambda path: self._build_install(path, ikey, env, Path(source), install,
                                                                   isolation))
        return Environment(venv=layer / "venv", mounts=(str(env), str(layer)), tree=layer / "src", key=ikey)

    def _layer(self, key: str, build: Callable[[Path], None]) -> Path:
        path = self.path_for(key)
        marker = path.with_name(path.name + MARKER)
        if marker.exists() and path.is_dir():
            return path
        with self._guard:
            lock = self._locks.setdefault(key, threading.Lock())
        with lock:
            self.root.mkdir(parents=True, exist_ok=True)
            with open(path.with_name(path.name + ".lock"), "w") as fh:
                fcntl.flock(fh, fcntl.LOCK_EX)
                if not (marker.exists() and path.is_dir()):
                    marker.unlink(missing_ok=True)
                    if path.exists():
                        shutil.rmtree(path)
                    t0 = time.monotonic()
                    try:
                        build(path)
                        _seal(path)
                    except BaseException:
                        shutil.rmtree(path, ignore_errors=True)
                        raise
                    # the marker lives beside the layer, in a directory no build step can write
                    marker.write_text(json.dumps({"key": key, "built_s": round(time.monotonic() - t0, 1)}))
                    log.info("built environment layer %s in %.1f s", key, time.monotonic() - t0)
        return path

    def _build_env(self, path: Path, key: str, data: dict, isolation: str, with_setup: bool) -> None:
        packages = self.packages_for(data)
        pip_dir = _pip_package()
        path.mkdir(parents=True)
        steps = [
            ("create the venv", [_base_python(), "-m", "venv", "--without-pip", str(path)], {}),
            # the host's pip (mounted alone, read-only) installs the environment's own pip and the row's packages
            ("install pip and the row's packages", [f"{path}/bin/python", "-m", "pip", "install", "-q",
                                                    "--no-cache-dir", "pip", *packages],
             {"PYTHONPATH": os.path.dirname(pip_dir)}),
            *[(f"environment_setup: {cmd}", cmd, {}) for cmd in (self.setup_for(data) if with_setup else [])],
        ]
        run_steps(key, path, steps, ro_paths=[pip_dir], venv=path, isolation=isolation)

    def _build_install(self, path: Path, key: str, env: Path, source: Path, install: list[tuple[str, str]],
                       isolation: str) -> None:
        path.mkdir(parents=True)
        shutil.copytree(source, path / "src", symlinks=True,
                        ignore=shutil.ignore_patterns(".git", "__pycache__", ".skyrl-unpacked"))
        venv = path / "venv"
        pth = _site_packages(venv) / "_skyrl_environment.pth"
        # a venv over the environment: its site-packages (and their .pth files) follow the venv's own; a `pip`
        # that installs into this venv, not the read-only environment
        layer = (f"{shlex.quote(_base_python())} -m venv --without-pip {shlex.quote(str(venv))} && "
                 f"printf '%s\\n' {shlex.quote(f'import site; site.addsitedir({str(_site_packages(env))!r})')} "
                 f"> {shlex.quote(str(pth))} && "
                 f"printf '#!/bin/sh\\nexec %s -m pip \"$@\"\\n' {shlex.quote(str(venv / 'bin' / 'python'))} "
                 f"> {shlex.quote(str(venv / 'bin' / 'pip'))} && chmod +x {shlex.quote(str(venv / 'bin' / 'pip'))}")
        # the environment's console scripts (pytest, ...) again, run by this venv's python so they see the install
        layer += (f" && for f in {shlex.quote(str(env / 'bin'))}/*; do n=$(basename \"$f\"); "
                  f"[ -e {shlex.quote(str(venv / 'bin'))}/\"$n\" ] && continue; "
                  f"[ \"$(head -c 200 \"$f\" | head -n 1)\" = {shlex.quote('#!' + str(env / 'bin' / 'python'))} ] "
                  f"|| continue; {{ echo {shlex.quote('#!' + str(venv / 'bin' / 'python'))}; tail -n +2 \"$f\"; }} "
                  f"> {shlex.quote(str(venv / 'bin'))}/\"$n\" && chmod +x {shlex.quote(str(venv / 'bin'))}/\"$n\"; "
                  f"done")
        steps = [("layer a venv over the environment", layer, {}),
                 *[(what, cmd, {}) for what, cmd in install]]
        run_steps(key, path, steps, ro_paths=[str(env)], venv=venv, isolation=isolation, cwd=path / "src")


def run_steps(key: str, out: Path, steps: list[tuple[str, Any, dict]], ro_paths: list[str], venv: Path,
              isolation: str = "bubblewrap", cwd: Path | None = None) -> None:
    """Run build ``steps`` (``(what, command, extra env)``) one after another in one sandbox whose only writable
    mount is ``out``, with the network on. Raises EnvironmentBuildError naming the first failing step."""
    spec = RuntimeSpec(type="sandbox", network=True, isolation=isolation, workspace=str(out),
                       cpu_time_s=int(BUILD_TIMEOUT_S), memory_mb=8192, max_processes=1024, max_file_mb=4096,
                       disk_mb=1 << 20, max_files=1 << 30, tmp_mb=4096, max_output_chars=8000)
    if os.geteuid() == 0 and isolation != "none":  # run as nobody: hand the output directory over first
        hand_over(out, UNPRIVILEGED_HOST_ID, UNPRIVILEGED_HOST_ID)
    sandbox = LocalSandbox(spec)
    sandbox.ro_paths.extend(ro_paths)
    sandbox.host_venv = False  # the host venv is never mounted into a build
    env = {k: os.environ[k] for k in PIP_ENV if k in os.environ}
    env.update({"PATH": f"{venv / 'bin'}:/usr/local/bin:/usr/bin:/bin", "VIRTUAL_ENV": str(venv),
                "PIP_CACHE_DIR": "/tmp/pip-cache", "PIP_NO_INPUT": "1", "PIP_CONFIG_FILE": "/dev/null",
                "PYTHONNOUSERSITE": "1", "TMPDIR": "/tmp", "HOME": "/tmp"})

    async def go() -> None:
        await sandbox.start()
        try:
            for what, command, extra in steps:
                argv = command if isinstance(command, list) else ["bash", "-c", command]
                if cwd is not None:
                    argv = ["bash", "-c", 'cd "$1" && shift && exec "$@"', "skyrl-build", str(cwd), *argv]
                res = await sandbox.exec(argv, timeout_s=BUILD_TIMEOUT_S, env={**env, **extra})
                if res.exit_code != 0:
                    raise EnvironmentBuildError(
                        f"building the environment {key} failed at '{what}' (exit {res.exit_code}"
                        f"{', limits: ' + ', '.join(res.limits) if res.limits else ''}): {res.output[-2000:]}")
        finally:
            await sandbox.close()

    # its own event loop, in a thread of its own: callers may be inside a running loop
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, go()).result()


def _seal(path: Path) -> None:
    """Give a built layer back to the host user (never following a symlink a build step left) and make it
    readable and traversable for the unprivileged sandbox user, writable by nobody else."""
    hand_over(path, os.getuid(), os.getgid())
    for dirpath, dirnames, filenames, dirfd in os.fwalk(path, follow_symlinks=False):
        for name in dirnames + filenames:
            info = os.stat(name, dir_fd=dirfd, follow_symlinks=False)
            if not stat.S_ISLNK(info.st_mode):
                extra = 0o555 if stat.S_ISDIR(info.st_mode) or info.st_mode & 0o100 else 0o444
                os.chmod(name, (info.st_mode | extra) & ~0o022 & 0o7777 & ~0o6000, dir_fd=dirfd)
    os.chmod(path, 0o755)


ENVIRONMENTS = RepoEnvironments()
