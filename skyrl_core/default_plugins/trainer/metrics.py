"""The built-in loggers of a training run (``register_loggers``): ``jsonl`` (metrics.jsonl, always), ``tensorboard``
and ``wandb`` (when enabled); ``plot`` is in :mod:`.plots`. :class:`.runlog.MetricsLogger` (the logger ``run``)
fans each record out to them.

Each record is a flat dict with ``kind`` (``train`` | ``eval``) and ``step``; numeric values go to TensorBoard /
W&B under their key (``train/reward_mean``, ``eval/pass@1``, ...).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from skyrl_core.errors import require

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
