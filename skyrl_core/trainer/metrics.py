"""Metrics sinks for a training run: a jsonl file always, TensorBoard and Weights & Biases when enabled.

Each record is a flat dict with ``kind`` (``train`` | ``eval``) and ``step``; numeric values go to TensorBoard /
W&B under their key (``train/reward_mean``, ``eval/pass@1``, ...).
"""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path
from typing import Any

from ..errors import require

log = logging.getLogger(__name__)


def read_jsonl(path: str | Path) -> list[dict]:
    """All records of a metrics file ([] when absent); a torn last line (killed mid-write) is dropped."""
    path = Path(path)
    if not path.is_file():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out


def _clean(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None if math.isnan(value) else str(value)
    return value


def numeric_scalars(record: dict[str, Any]) -> tuple[int, dict[str, float]]:
    """``(step, {"<kind>/<key>": value})`` for the numeric values of a record: what scalar loggers plot."""
    kind = record.get("kind", "train")
    numeric = {f"{kind}/{k}": v for k, v in record.items()
               if k not in ("step", "kind") and isinstance(v, (int, float)) and not isinstance(v, bool)}
    return int(record.get("step", 0)), numeric


class JsonlLogger:
    """Logger ``jsonl``: appends each record to ``<output>/metrics.jsonl`` (non-finite floats as null / "inf").
    ``truncate_after(step)`` keeps only records of steps up to ``step`` (a resumed run holds each step once)."""

    name = "jsonl"

    def __init__(self, output: Path, config: Any = None) -> None:
        self.path = Path(output) / "metrics.jsonl"

    def truncate_after(self, step: int) -> list[dict]:
        kept = [r for r in read_jsonl(self.path) if int(r.get("step", 0)) <= step]
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text("".join(json.dumps(r) + "\n" for r in kept))
        return kept

    def log(self, record: dict[str, Any]) -> None:
        with self.path.open("a") as f:
            f.write(json.dumps(record, default=str) + "\n")

    def close(self) -> None:
        pass


class TensorBoardLogger:
    """Logger ``tensorboard``: every numeric value as a scalar ``<kind>/<key>`` under ``<output>/tensorboard``.
    Raises MissingExtraError without the tensorboard package."""

    name = "tensorboard"

    def __init__(self, output: Path, config: Any = None) -> None:
        require("tensorboard", "train", "logging.tensorboard")
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(str(Path(output) / "tensorboard"))

    def log(self, record: dict[str, Any]) -> None:
        step, numeric = numeric_scalars(record)
        for k, v in numeric.items():
            self.writer.add_scalar(k, v, step)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


class WandbLogger:
    """Logger ``wandb``: numeric values to a Weights & Biases run (project ``logging.wandb_project``, named
    after the output folder, resumable). Raises MissingExtraError without the wandb package."""

    name = "wandb"

    def __init__(self, output: Path, config: Any = None) -> None:
        wandb = require("wandb", "wandb", "logging.wandb")
        project = getattr(getattr(config, "logging", None), "wandb_project", "skyrl")
        run_config = config.to_dict() if hasattr(config, "to_dict") else {}
        self.run = wandb.init(project=project, dir=str(output), config=run_config, name=Path(output).name,
                              resume="allow")

    def log(self, record: dict[str, Any]) -> None:
        step, numeric = numeric_scalars(record)
        self.run.log(numeric, step=step)

    def close(self) -> None:
        self.run.finish()


BUILTIN_LOGGERS = {"jsonl": JsonlLogger, "tensorboard": TensorBoardLogger, "wandb": WandbLogger}


def logger_names(logging_config: Any) -> list[str]:
    """The loggers a run writes to, in order: ``jsonl`` always, ``tensorboard`` / ``wandb`` when their flag is
    on, then ``logging.loggers`` (duplicates dropped)."""
    names = ["jsonl"]
    if logging_config.tensorboard:
        names.append("tensorboard")
    if logging_config.wandb:
        names.append("wandb")
    for name in getattr(logging_config, "loggers", []) or []:
        if name not in names:
            names.append(name)
    return names


class MetricsLogger:
    """Every logger of a run (:func:`logger_names`), built through the registry (``register_loggers``).

    ``MetricsLogger(output, logging_config, run_config=None)``: ``run_config`` is the run's Config (or None);
    each factory is called ``(output, run_config)``. ``truncate_after(step)`` applies to the jsonl file. A logger
    that raises in ``log`` is reported once and dropped (the run goes on; metrics.jsonl stays complete).
    Raises MissingExtraError when TensorBoard or W&B is enabled but not installed, UnknownComponentError for a
    logger name nobody registered.
    """

    def __init__(self, output: Path, config: Any, run_config: Any = None) -> None:
        self.path = Path(output) / "metrics.jsonl"
        self.config = config
        self.jsonl = JsonlLogger(output)
        self.sinks: dict[str, Any] = {"jsonl": self.jsonl}
        for name in logger_names(config)[1:]:
            factory = BUILTIN_LOGGERS.get(name)
            if factory is None:
                from ..plugins import get_registry

                factory = get_registry().get("loggers", name)
            self.sinks[name] = factory(Path(output), run_config)

    def truncate_after(self, step: int) -> list[dict]:
        """Keep only records with ``step`` <= ``step``; return them."""
        return self.jsonl.truncate_after(step)

    def log(self, record: dict[str, Any]) -> None:
        record = {k: _clean(v) for k, v in record.items()}
        for name, sink in list(self.sinks.items()):
            try:
                sink.log(record)
            except Exception as exc:
                if sink is self.jsonl:
                    raise
                log.warning("logger '%s' failed (%s: %s): dropped for the rest of the run", name,
                            type(exc).__name__, exc)
                del self.sinks[name]

    def close(self) -> None:
        for name, sink in self.sinks.items():
            try:
                sink.close()
            except Exception as exc:
                log.warning("logger '%s' failed to close: %s: %s", name, type(exc).__name__, exc)
        self.sinks = {}
