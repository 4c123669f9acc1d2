"""Overrides that cannot do what they say for a command: ``skyrl eval CONFIG data.limit=3`` on a task with
``eval_data`` (the eval rolls out ``eval_data``), ``eval_data.limit`` on a task without one, ``train.*`` under
``skyrl eval``. Checked against the config as read, before the overrides are applied: ``skyrl eval`` and
``skyrl train`` (the trainer built-in) pass :func:`command_check` as ``check`` to
:func:`skyrl_core.config.load_config`, which knows no command."""

from __future__ import annotations

from typing import Callable, Sequence

from skyrl_core.errors import ConfigError

SELECTION_KEYS = ("limit", "offset", "shuffle", "seed")  # DataSpec keys that slice a split, not name one
NOT_USED_BY = {"eval": ("train", "backend")}  # top-level sections a command never reads


def _task_section(override: str, n_tasks: int) -> tuple[int, str, str] | None:
    """``(task index, "data" | "eval_data", the key below it)`` that an override addresses, or None."""
    parts = override.split("=", 1)[0].strip().split(".")
    if parts[0] in ("data", "eval_data") and n_tasks == 1:
        parts = ["tasks", "0"] + parts
    if len(parts) >= 4 and parts[0] == "tasks" and parts[1].isdigit() and parts[2] in ("data", "eval_data"):
        return int(parts[1]), parts[2], ".".join(parts[3:])
    return None


def command_check(command: str) -> Callable[[dict, Sequence[str]], list[str]]:
    """The ``check`` of :func:`skyrl_core.config.load_config` for ``skyrl <command>`` (``"eval"`` or
    ``"train"``): :func:`check_overrides` with that command."""
    return lambda data, overrides: check_overrides(data, overrides, command)


def check_overrides(data: dict, overrides: Sequence[str], command: str) -> list[str]:
    """Overrides that cannot do what they say for ``command`` (``"eval"`` or ``"train"``), checked against the
    config ``data`` as read (normalised, before the overrides). Raises ConfigError, naming what to set instead,
    for a data override that slices a split the command never rolls out: ``data.limit=3`` on a task with
    ``eval_data`` under ``skyrl eval`` with no ``eval_data.*`` override beside it (``data`` is then only the
    train split, whose rows are left out of the eval), and ``eval_data.limit=3`` (or offset, shuffle, seed) on
    a task without ``eval_data`` and no ``eval_data`` path, name or split beside it (it would make a new eval
    split of the loader's default instead of slicing ``data``). Returns warnings for overrides of sections the
    command never reads (``train.*``, ``backend.*`` under ``skyrl eval``)."""
    tasks = data.get("tasks") or []
    addressed = [_task_section(o, len(tasks)) for o in overrides]
    warnings: list[str] = []
    for override, where in zip(overrides, addressed):
        if where is None:
            section = override.split("=", 1)[0].strip().split(".")[0]
            if section in NOT_USED_BY.get(command, ()):
                warnings.append(f"override '{override}' has no effect on skyrl {command} ({section}.* is read "
                                f"only by skyrl train)")
            continue
        index, part, rest = where
        task = tasks[index] if index < len(tasks) and isinstance(tasks[index], dict) else None
        if task is None:
            continue
        name = task.get("name", f"tasks.{index}")
        prefix = "" if len(tasks) == 1 else f"tasks.{index}."
        value = override.split("=", 1)[1]
        beside = {w[2].split(".")[0] for w in addressed if w is not None and w[:2] == (index, "eval_data")}
        if part == "data" and command == "eval" and task.get("eval_data") is not None and not beside:
            raise ConfigError(
                f"override '{override}' slices the train split (data) of task '{name}', but skyrl eval rolls out "
                f"its eval_data: write {prefix}eval_data.{rest}={value} (data only decides which eval rows are left "
                f"out as train problems)")
        if (part == "eval_data" and task.get("eval_data") is None and rest.split(".")[0] in SELECTION_KEYS
                and not beside & {"path", "name", "split"}):
            raise ConfigError(
                f"override '{override}': task '{name}' has no eval_data (its eval split is its data), so this would "
                f"make a new eval split instead of slicing the one evaluated: write {prefix}data.{rest}={value}, "
                f"or give eval_data a path or split of its own")
    return warnings
