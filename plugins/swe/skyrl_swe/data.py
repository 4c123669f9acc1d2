"""Repository-task data: SWE-bench / Verified / Lite, SWE-Gym and R2E-Gym rows, and where each repository comes from.

Rows are read from JSON (a list), JSONL or parquet files (or every such file in a directory), or a ``datasets``
name when online. Every row is normalised to the SWE-bench fields: ``instance_id``, ``repo``, ``base_commit``,
``problem_statement``, ``patch``, ``test_patch``, ``FAIL_TO_PASS``, ``PASS_TO_PASS`` (lists), ``version``, plus
``image`` (a docker image), ``repo_dir`` (a ready source tree, for generated instances), ``test_cmd``; and what
builds the instance's environment (:mod:`skyrl_swe.environments`): ``pytest``, ``requirements``,
``pip_packages``, ``environment_setup``, ``pre_install``, ``install``, ``rebuild`` (run by the verifier after the
patches), ``pytest_autoload``, ``pytest_plugins``.

A repository comes from, in order: the row's ``repo_dir``; a local mirror directory (``mirror_dir``: a plain
snapshot ``<mirror>/<instance_id>/``, or a git clone ``<mirror>/<owner>__<name>``, ``<mirror>/<owner>/<name>`` or
``<mirror>/<name>`` checked out at ``base_commit``); a clone from GitHub when online (``allow_clone``); or the
docker image (runtime ``docker``). When none is reachable the loader reports the instance *skipped* with the
reason (:data:`SKIPPED`, and a warning), rather than handing the dispatcher an instance that can only fail.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import socket
import subprocess
import threading
from pathlib import Path
from typing import Any, Iterable

from skyrl_core import DataSpec, Instance
from skyrl_core.errors import ConfigError, SkyrlError

from .docker_client import docker_client
from .paths import cache_dir

log = logging.getLogger(__name__)

SKIPPED: list[dict[str, str]] = []  # {"instance_id", "reason"} of instances left out by the last loads
_LIST_FIELDS = ("FAIL_TO_PASS", "PASS_TO_PASS")
_ONLINE: dict[str, bool] = {}
_LOCK = threading.Lock()


class RepoUnavailable(SkyrlError):
    """No source of an instance's repository is reachable; the message lists what was tried."""


# -- reading rows ------------------------------------------------------------------------------------------------
def read_rows(path: str | os.PathLike) -> list[dict]:
    """Rows from a .json (list or {"data": [...]}), .jsonl or .parquet file, or every such file in a directory."""
    p = Path(path)
    if p.is_dir():
        rows: list[dict] = []
        for child in sorted(p.iterdir()):
            if child.suffix in (".json", ".jsonl", ".parquet"):
                rows += read_rows(child)
        return rows
    if not p.exists():
        raise ConfigError(f"data.path '{path}' does not exist; give a .json, .jsonl or .parquet file or a directory")
    if p.suffix == ".parquet":
        try:
            import pyarrow.parquet as pq
        except ImportError:
            raise ConfigError(f"data.path '{path}' is parquet: install pyarrow (pip install 'skyrl-swe[parquet]')") from None
        return pq.read_table(p).to_pylist()
    text = p.read_text(encoding="utf-8")
    if p.suffix == ".jsonl":
        rows = []
        for n, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as exc:
                    raise ConfigError(f"{path} line {n} is not JSON ({exc.msg} at column {exc.colno}); each line of "
                                      f"a .jsonl file holds one row object") from None
        return rows
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path} is not JSON ({exc.msg} at line {exc.lineno}, column {exc.colno}); give a list of "
                          f"row objects, or one row per line in a .jsonl file") from None
    if isinstance(data, dict):
        data = data.get("data") or data.get("instances") or list(data.values())
    if not isinstance(data, list):
        raise ConfigError(f"data.path '{path}' must hold a list of rows")
    return data


def _as_list(value: Any) -> list[str]:
    if value is None or value == "":
        return []
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            return [value]
    return [str(v) for v in value]


def normalise_row(row: dict, base_dir: Path | None = None) -> dict:
    """One row in SWE-bench fields, whichever of SWE-bench, SWE-Gym or R2E-Gym it came from."""
    data = dict(row)
    if "instance_id" not in data and ("docker_image" in data or "repo_name" in data):  # R2E-Gym
        repo = data.get("repo_name", "")
        commit = data.get("commit_hash", "")
        data["instance_id"] = data.get("docker_image") or f"{repo}@{commit}"
        data["repo"] = repo
        data["base_commit"] = commit
        data["image"] = data.get("docker_image")
        expected = data.get("expected_output_json")
        if isinstance(expected, str) and expected:
            expected = json.loads(expected)
        if isinstance(expected, dict):
            # R2E-Gym compares every listed test with its expected status; the passing ones must pass
            data["FAIL_TO_PASS"] = [k for k, v in expected.items() if str(v).upper() == "PASSED"]
            data["PASS_TO_PASS"] = []
        data.setdefault("test_cmd", "bash /root/run_tests.sh")
        data["source_format"] = "r2e-gym"
    for key in _LIST_FIELDS:
        data[key] = _as_list(data.get(key))
    for key in ("patch", "test_patch", "problem_statement", "hints_text", "base_commit", "repo", "version"):
        if data.get(key) is None:
            data[key] = ""
    data["version"] = str(data["version"])
    if data.get("repo_dir") and base_dir is not None and not Path(data["repo_dir"]).is_absolute():
        data["repo_dir"] = str((base_dir / data["repo_dir"]).resolve())
    if "instance_id" not in data:
        raise ConfigError(f"a row has no instance_id (keys: {', '.join(sorted(row))}); expected SWE-bench, SWE-Gym "
                          f"or R2E-Gym rows")
    data.setdefault("source_format", "swe-bench")
    for key in _COMMAND_FIELDS:
        _check_commands(data, key)
    return data


_COMMAND_FIELDS = ("environment_setup", "pre_install", "install", "rebuild")


def _check_commands(data: dict, key: str) -> None:
    """Refuse a row whose command field is no command: not a string or a list of strings, or a commit id (the
    SWE-bench harness's ``environment_setup_commit`` names a commit, not commands)."""
    value = data.get(key)
    if value is None or value == "":
        return
    items = value if isinstance(value, list) else [value]
    if not all(isinstance(v, str) for v in items):
        raise ConfigError(f"instance {data['instance_id']}: field {key!r} must be shell commands (a string, one "
                          f"command a line, or a list of strings), not {type(value).__name__}")
    if any(len(v.strip()) == 40 and all(c in "0123456789abcdef" for c in v.strip()) for v in items):
        raise ConfigError(f"instance {data['instance_id']}: field {key!r} holds a commit id, not commands (SWE-bench's "
                          f"environment_setup_commit names the commit whose environment to use; give the setup "
                          f"commands instead, or leave the field out)")


def load_rows(spec: DataSpec) -> list[dict]:
    """Normalised rows for a DataSpec: ``path`` (file/dir) or ``name`` (a ``datasets`` name, online only)."""
    if spec.path:
        base = Path(spec.path)
        base = base if base.is_dir() else base.parent
        return [normalise_row(r, base) for r in read_rows(spec.path)]
    if spec.name:
        try:
            import datasets
        except ImportError:
            raise ConfigError(f"data.name '{spec.name}' needs the 'datasets' package (pip install 'skyrl-swe[hub]'),"
                              f" or give data.path to a local .json/.jsonl/.parquet file") from None
        try:
            ds = datasets.load_dataset(spec.name, split=spec.split)
        except Exception as exc:
            raise ConfigError(f"data.name '{spec.name}' (split {spec.split}) could not be loaded ({exc}); offline, "
                              f"give data.path to a local file") from None
        return [normalise_row(dict(r)) for r in ds]
    raise ConfigError("SWE tasks need data.path (a .json/.jsonl/.parquet file or directory) or data.name")


# -- where a repository comes from -------------------------------------------------------------------------------
def online(host: str = "github.com", port: int = 443, timeout_s: float = 3.0) -> bool:
    """Whether ``host`` accepts a TCP connection (checked once per process)."""
    with _LOCK:
        if host in _ONLINE:
            return _ONLINE[host]
    try:
        socket.create_connection((host, port), timeout=timeout_s).close()
        ok = True
    except OSError:
        ok = False
    with _LOCK:
        _ONLINE[host] = ok
    return ok


def _mirror_candidates(mirror: Path, data: dict) -> list[Path]:
    repo = data.get("repo") or ""
    owner, _, name = repo.partition("/")
    out = [mirror / data["instance_id"]]
    if repo:
        out += [mirror / repo.replace("/", "__"), mirror / owner / name, mirror / (name or owner)]
    return out


def _checkout(clone: Path, commit: str, dest: Path) -> Path:
    """A working tree of ``clone`` at ``commit`` in ``dest`` (made once; later calls reuse it)."""
    if (dest / ".skyrl-checkout").exists():
        return dest
    if dest.exists():
        shutil.rmtree(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "GIT_TERMINAL_PROMPT": "0"}
    subprocess.run(["git", "clone", "-q", "--shared", "--no-checkout", str(clone), str(dest)], check=True,
                   capture_output=True, env=env)
    proc = subprocess.run(["git", "-c", "advice.detachedHead=false", "checkout", "-q", commit or "HEAD"], cwd=dest,
                          capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        shutil.rmtree(dest, ignore_errors=True)
        raise RepoUnavailable(f"commit {commit} is not in the clone {clone}: {proc.stderr.strip()}")
    shutil.rmtree(dest / ".git")  # the runtime makes its own baseline repository
    (dest / ".skyrl-checkout").write_text(commit)
    return dest


def _options(data: dict, options: dict | None) -> dict:
    merged = dict(data.get("repo_options") or {})
    merged.update(options or {})
    if "mirror_dir" not in merged and os.environ.get("SKYRL_SWE_MIRROR"):
        merged["mirror_dir"] = os.environ["SKYRL_SWE_MIRROR"]
    return merged


def repository_unreachable(data: dict, options: dict | None = None) -> str | None:
    """Why no repository source of ``data`` is reachable, or None when one is (cheap: no clone, no pull)."""
    opts = _options(data, options)
    tried = []
    if data.get("repo_dir"):
        if Path(data["repo_dir"]).is_dir():
            return None
        tried.append(f"repo_dir {data['repo_dir']} is missing")
    if opts.get("mirror_dir"):
        if any(c.is_dir() for c in _mirror_candidates(Path(opts["mirror_dir"]), data)):
            return None
        tried.append(f"no {data.get('repo') or data['instance_id']} under mirror_dir {opts['mirror_dir']}")
    if opts.get("runtime") == "docker":
        try:
            docker_client()
            return None
        except RuntimeError as exc:
            tried.append(str(exc))
    if data.get("repo") and opts.get("allow_clone", True):
        if online():
            return None
        tried.append("github.com is unreachable (offline), so it cannot be cloned")
    elif not data.get("repo"):
        tried.append("the row names no repo to clone")
    return "; ".join(tried) or "no repository source configured (set data.options.mirror_dir)"


def resolve_repository(data: dict, options: dict | None = None) -> Path:
    """A directory holding the instance's repository at ``base_commit`` (shared; copy it before writing).
    Raises RepoUnavailable listing every source tried."""
    opts = _options(data, options)
    tried = []
    if data.get("repo_dir"):
        p = Path(data["repo_dir"])
        if p.is_dir():
            return p
        tried.append(f"repo_dir {p} is missing")
    commit = data.get("base_commit") or ""
    checkouts = cache_dir() / "checkouts"
    if opts.get("mirror_dir"):
        for cand in _mirror_candidates(Path(opts["mirror_dir"]), data):
            if not cand.is_dir():
                continue
            if (cand / ".git").exists() or (cand / "HEAD").exists() and (cand / "objects").is_dir():
                return _checkout(cand, commit, checkouts / f"{data['instance_id']}-{commit[:12]}")
            return cand
        tried.append(f"nothing for {data.get('repo') or data['instance_id']} under mirror_dir {opts['mirror_dir']}")
    if data.get("repo") and opts.get("allow_clone", True):
        if online():
            mirror = cache_dir() / "mirrors" / data["repo"].replace("/", "__")
            if not (mirror / "HEAD").exists():
                mirror.parent.mkdir(parents=True, exist_ok=True)
                proc = subprocess.run(["git", "clone", "-q", "--bare", f"https://github.com/{data['repo']}.git",
                                       str(mirror)], capture_output=True, text=True, timeout=1800,
                                      env={**os.environ, "GIT_TERMINAL_PROMPT": "0"})
                if proc.returncode != 0:
                    tried.append(f"git clone of {data['repo']} failed: {proc.stderr.strip()[:300]}")
                    raise RepoUnavailable(f"instance {data['instance_id']}: " + "; ".join(tried))
            return _checkout(mirror, commit, checkouts / f"{data['instance_id']}-{commit[:12]}")
        tried.append("github.com is unreachable, so it cannot be cloned")
    raise RepoUnavailable(f"instance {data['instance_id']}: no repository source reachable: " + "; ".join(tried)
                          + ". Set data.options.mirror_dir to local clones, or use runtime docker with its image.")


def docker_image_for(data: dict) -> str:
    """The row's image, else the SWE-bench harness name for the instance."""
    if data.get("image"):
        return data["image"]
    iid = data["instance_id"].replace("__", "_1776_").lower()
    return f"swebench/sweb.eval.x86_64.{iid}:latest"


# -- the loader tasks use ----------------------------------------------------------------------------------------
def load_instances(spec: DataSpec, skipped: list[dict] | None = None) -> list[Instance]:
    """Instances for SWE tasks. ``spec.options``: ``mirror_dir``, ``allow_clone`` (default true), ``runtime``
    (``docker`` counts an image as a source), ``check_repo`` (default true: leave out — as *skipped*, with the
    reason — instances whose repository no source provides), ``ids`` (only these instance ids)."""
    opts = dict(spec.options)
    ids = set(opts.pop("ids", None) or [])
    check = opts.pop("check_repo", True)
    rows = load_rows(spec)
    out: list[Instance] = []
    skipped = SKIPPED if skipped is None else skipped
    for row in rows:
        if ids and row["instance_id"] not in ids:
            continue
        row["repo_options"] = {**(row.get("repo_options") or {}), **opts}
        if check:
            reason = repository_unreachable(row, opts)
            if reason is not None:
                skipped.append({"instance_id": row["instance_id"], "reason": reason})
                log.warning("skipping SWE instance %s: %s", row["instance_id"], reason)
                continue
        out.append(Instance(id=row["instance_id"], data=row))
    return out


def iter_ids(instances: Iterable[Instance]) -> list[str]:
    return [i.id for i in instances]
