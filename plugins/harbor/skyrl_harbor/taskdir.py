"""Reading Harbor task directories (the format of Harbor and Terminal-Bench 2).

A task is a directory holding ``task.toml`` (metadata, ``[verifier]``/``[agent]`` timeouts, ``[environment]``
resources), ``instruction.md`` (the prompt), ``environment/`` (a Dockerfile and its build context), ``tests/``
(``test.sh``, the verifier's entry point, which writes the reward to ``/logs/verifier/reward.txt`` or
``/logs/verifier/reward.json``) and optionally ``solution/solve.sh`` (the reference solution). Source of the
format: Harbor's task model (``harbor.models.task``) and its verifier (``harbor.verifier``), read for their
interfaces; our reading is checked against harbor 0.25.0's own by ``scripts/check_against_harbor.py``.

Every problem is a :class:`HarborTaskError` naming the file and what would be valid.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

import attrs

from skyrl_core.errors import SkyrlError

# Harbor 0.25.0's defaults where task.toml says nothing (its VerifierConfig / AgentConfig / EnvironmentConfig):
# the verifier has 600 s; the agent, cpus, memory and storage have no task limit (the config's limits apply)
DEFAULT_VERIFIER_TIMEOUT_S = 600.0
# a leading comment line that marks benchmark data (Harbor strips these and the blank lines after them)
CANARY_LINE = re.compile(r"^(<!--.*canary.*-->|#.*canary.*)$", re.IGNORECASE)


NETWORK_MODES = ("public", "no-network", "allowlist")


class HarborTaskError(SkyrlError):
    """A Harbor task directory that cannot be used: the message names the file and what is missing or wrong."""


@attrs.define(frozen=True)
class HarborTask:
    """One parsed task directory. ``name``: ``[task] name`` when given, else the directory's name; timeouts in
    seconds (``agent_timeout_s`` None: the task sets none); ``cpus``, ``memory_mb``/``storage_mb`` (MiB): None
    where the task sets none; ``network_mode``: ``public``, ``no-network`` or ``allowlist`` (the deprecated
    ``allow_internet = false`` is ``no-network``); ``workdir``: ``[environment] workdir`` (overrides the
    Dockerfile's WORKDIR) or None; ``docker_image``: a prebuilt image named instead of a Dockerfile, or None;
    ``config``: the whole ``task.toml`` as read."""

    name: str
    path: Path
    instruction: str
    verifier_timeout_s: float
    agent_timeout_s: float | None
    cpus: float | None
    memory_mb: int | None
    storage_mb: int | None
    network_mode: str
    workdir: str | None
    docker_image: str | None
    verifier_env: dict[str, str]
    config: dict[str, Any]

    def phase_network_mode(self, phase: str) -> str:
        """The network mode of ``phase`` (``agent`` or ``verifier``): its own ``[agent]``/``[verifier]
        network_mode`` when set (harbor 0.25.0's phase override), else the environment's ``network_mode``."""
        mode = (self.config.get(phase) or {}).get("network_mode")
        return mode if mode in NETWORK_MODES else self.network_mode

    @property
    def dockerfile(self) -> Path:
        return self.path / "environment" / "Dockerfile"

    @property
    def tests_dir(self) -> Path:
        return self.path / "tests"

    @property
    def solution(self) -> Path | None:
        solve = self.path / "solution" / "solve.sh"
        return solve if solve.is_file() else None


def _number(table: dict, key: str, default: float | None, where: Path) -> float | None:
    value = table.get(key, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise HarborTaskError(f"{where}: '{key}' must be a positive number of seconds/units (got {value!r})")
    return float(value)


def _size_mb(env: dict, key: str, where: Path) -> int | None:
    """``KEY_mb`` (MiB), else the deprecated ``KEY`` string (``"2G"``, ``"512M"``, ``"64K"``), else None."""
    if f"{key}_mb" in env:
        return int(_number(env, f"{key}_mb", None, where))
    text = env.get(key)
    if text is None:
        return None
    units = {"K": 1 / 1024, "M": 1, "G": 1024}
    raw = str(text).strip().upper()
    try:
        return int(float(raw[:-1]) * units[raw[-1]])
    except (ValueError, KeyError, IndexError):
        raise HarborTaskError(f"{where}: [environment] {key} {text!r} is not a size (e.g. '2G', '512M'; "
                              f"or {key}_mb = 2048)") from None


def strip_canary(text: str) -> str:
    """The instruction without its leading canary comment lines and the blank lines after them."""
    lines = text.split("\n")
    i = 0
    while i < len(lines) and CANARY_LINE.match(lines[i].strip()):
        i += 1
    while i < len(lines) and not lines[i].strip():
        i += 1
    return "\n".join(lines[i:])


def load_task(directory: str | Path) -> HarborTask:
    """Parse one task directory. Raises HarborTaskError naming the file when ``task.toml`` is missing or not
    valid TOML, a section is not a table or a timeout is not a positive number, ``instruction.md`` is missing
    or empty, ``tests/test.sh`` is missing, or there is neither ``environment/`` nor ``[environment]
    docker_image`` (as harbor 0.25.0 requires; a missing Dockerfile is the sandbox's concern, not the parse's)."""
    path = Path(directory).resolve()
    if not path.is_dir():
        raise HarborTaskError(f"{directory}: not a directory (a Harbor task is a directory with task.toml, "
                              f"instruction.md, environment/Dockerfile and tests/test.sh)")
    toml_path = path / "task.toml"
    if not toml_path.is_file():
        raise HarborTaskError(f"{toml_path}: missing (every Harbor task directory has a task.toml)")
    try:
        config = tomllib.loads(toml_path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise HarborTaskError(f"{toml_path}: not valid TOML ({exc})") from None
    for section in ("task", "metadata", "verifier", "agent", "environment", "solution"):
        if section in config and not isinstance(config[section], dict):
            raise HarborTaskError(f"{toml_path}: [{section}] must be a table (got {type(config[section]).__name__})")
    instruction_path = path / "instruction.md"
    if not instruction_path.is_file():
        raise HarborTaskError(f"{instruction_path}: missing (the task's prompt to the agent)")
    if config.get("steps"):
        raise HarborTaskError(f"{toml_path}: a multi-step task ([[steps]]); skyrl-harbor runs single-step tasks")
    instruction = strip_canary(instruction_path.read_text(encoding="utf-8")).strip()
    if not instruction:
        raise HarborTaskError(f"{instruction_path}: empty (the task's prompt to the agent)")
    test_sh = path / "tests" / "test.sh"
    if not test_sh.is_file():
        raise HarborTaskError(f"{test_sh}: missing (the verifier's entry point, which writes "
                              f"/logs/verifier/reward.txt); a task without tests cannot be scored")
    verifier, agent, env = config.get("verifier", {}), config.get("agent", {}), config.get("environment", {})
    if not (path / "environment").is_dir() and not env.get("docker_image"):
        raise HarborTaskError(f"{path / 'environment'}: missing (the task's environment, with its Dockerfile; "
                              f"or [environment] docker_image in task.toml)")
    verifier_env = verifier.get("env", {}) or {}
    if not isinstance(verifier_env, dict):
        raise HarborTaskError(f"{toml_path}: [verifier] env must be a table of strings")
    name = str(config.get("task", {}).get("name") or path.name)
    network_mode = env.get("network_mode") or ("no-network" if env.get("allow_internet") is False else "public")
    if network_mode not in NETWORK_MODES:
        raise HarborTaskError(f"{toml_path}: [environment] network_mode {network_mode!r}; valid: "
                              f"{', '.join(NETWORK_MODES)}")
    return HarborTask(
        name=name, path=path, instruction=instruction,
        verifier_timeout_s=_number(verifier, "timeout_sec", DEFAULT_VERIFIER_TIMEOUT_S, toml_path),
        agent_timeout_s=_number(agent, "timeout_sec", None, toml_path),
        cpus=_number(env, "cpus", None, toml_path), memory_mb=_size_mb(env, "memory", toml_path),
        storage_mb=_size_mb(env, "storage", toml_path), network_mode=network_mode,
        workdir=env.get("workdir") or None, docker_image=env.get("docker_image") or None,
        verifier_env={str(k): str(v) for k, v in verifier_env.items()}, config=config)


def find_task_dirs(root: str | Path) -> list[Path]:
    """``root`` itself when it holds a ``task.toml``, else its subdirectories that do (sorted by name; one level,
    then deeper for folders of folders). Raises HarborTaskError when there are none."""
    root = Path(root)
    if (root / "task.toml").is_file():
        return [root]
    if not root.is_dir():
        raise HarborTaskError(f"{root}: not a directory (give a Harbor task directory or a folder of them)")
    found = sorted(p.parent for p in root.rglob("task.toml"))
    if not found:
        raise HarborTaskError(f"{root}: no task.toml in it or below it (a Harbor task directory has one)")
    return found


def load_tasks(root: str | Path) -> list[HarborTask]:
    """Every task under ``root`` (see :func:`find_task_dirs`), parsed; the first bad one raises."""
    return [load_task(p) for p in find_task_dirs(root)]
