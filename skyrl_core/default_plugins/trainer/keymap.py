"""Mapping a skyrl config onto an upstream trainer's config: the part the VeRL and SkyRL-train launchers share (kept
with the built-in trainer, not in the core: it resolves models through the built-in engines' GGUF conversion).

A launcher states its mapping as a table of :class:`KeyMapping` rows (its README shows the table; a test keeps
the two in step) and builds a flat ``{dotted upstream key: value}`` dict from a skyrl
:class:`~skyrl_core.config.Config`. SkyRL-train takes that dict as it is; VeRL composes its Hydra config from
:func:`hydra_overrides` of it. On the way both resolve the model to a directory (:func:`model_path`) and write the
task instances with their prompts (:func:`task_rows`).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Iterator

import attrs

from skyrl_core.errors import ConfigError

log = logging.getLogger(__name__)


@attrs.define(frozen=True)
class KeyMapping:
    """One documented mapping: the ``skyrl`` key, the ``upstream`` key(s) it sets, and how (``note``)."""

    skyrl: str
    upstream: str
    note: str


def _hydra_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_hydra_value(v) for v in value) + "]"
    return str(value)


def hydra_overrides(values: dict[str, Any]) -> list[str]:
    """``{"a.b": 1, "c": [x, y], "d": True}`` -> ``["a.b=1", "c=[x,y]", "d=true"]``: dotted keys and values as
    Hydra command-line overrides, in the dict's order (booleans lower-case, None ``null``, lists bracketed)."""
    return [f"{key}={_hydra_value(value)}" for key, value in values.items()]


def model_path(model: str, upstream: str, *, by_name: bool = False) -> str:
    """``config.model`` as the upstream loads it: a local directory (absolute), else the bundled model's cached
    directory. An unknown name raises ConfigError naming ``model`` and ``upstream`` (the trainer's name), or with
    ``by_name`` is returned as it is (an upstream that loads hub names itself)."""
    path = Path(model).expanduser()
    if path.is_dir():
        return str(path.resolve())
    from ..engines.models import resolve_model

    try:
        return str(resolve_model(model))
    except Exception as exc:  # noqa: BLE001 - any failure means the name is not a bundled model
        if by_name:
            log.info("model %r is not a bundled model (%s); %s will load it by name", model, exc, upstream)
            return model
        raise ConfigError(f"config key 'model': '{model}' is neither a local Hugging Face directory nor a bundled "
                          f"model {upstream} can load ({exc})") from None


def task_rows(config: Any, split: str) -> Iterator[tuple[int, str, Any, list[dict]]]:
    """``(task index, task name, instance, prompt messages)`` for every instance of ``split`` (``"train"``: each
    task's ``data``; otherwise its ``eval_data``, or ``data`` when it has none), the prompt built by the task's
    instruction builder. Raises ConfigError naming ``tasks.N`` when a task yields no instances."""
    from skyrl_core.plugins import get_registry

    registry = get_registry()
    for ti, tc in enumerate(config.tasks):
        task = registry.get("tasks", tc.name)
        instances = task.select(tc.data if split == "train" else (tc.eval_data or tc.data))
        if not instances:
            raise ConfigError(f"config key 'tasks.{ti}' ({tc.name}): no {split} instances")
        builder = registry.get("instruction_builders", tc.instruction_builder or task.instruction_builder)
        for inst in instances:
            yield ti, tc.name, inst, builder(inst, task)
