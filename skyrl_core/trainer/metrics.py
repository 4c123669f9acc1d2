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


class MetricsLogger:
    """Append records to ``<output>/metrics.jsonl`` and mirror numeric values to TensorBoard / W&B.

    ``truncate_after(step)`` drops records of steps after a resumed checkpoint, so a resumed run's file holds
    each step once. Raises MissingExtraError when TensorBoard or W&B is enabled but not installed.
    """

    def __init__(self, output: Path, config: Any, run_config: dict | None = None) -> None:
        self.path = Path(output) / "metrics.jsonl"
        self.config = config
        self.tb = None
        self.wandb = None
        if config.tensorboard:
            require("tensorboard", "train", "logging.tensorboard")
            from torch.utils.tensorboard import SummaryWriter

            self.tb = SummaryWriter(str(Path(output) / "tensorboard"))
        if config.wandb:
            wandb = require("wandb", "wandb", "logging.wandb")
            self.wandb = wandb.init(project=config.wandb_project, dir=str(output), config=run_config or {},
                                    name=Path(output).name, resume="allow")

    def truncate_after(self, step: int) -> list[dict]:
        """Keep only records with ``step`` <= ``step``; return them."""
        kept = [r for r in read_jsonl(self.path) if int(r.get("step", 0)) <= step]
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text("".join(json.dumps(r) + "\n" for r in kept))
        return kept

    def log(self, record: dict[str, Any]) -> None:
        record = {k: _clean(v) for k, v in record.items()}
        with self.path.open("a") as f:
            f.write(json.dumps(record, default=str) + "\n")
        step = int(record.get("step", 0))
        kind = record.get("kind", "train")
        numeric = {f"{kind}/{k}": v for k, v in record.items()
                   if k not in ("step", "kind") and isinstance(v, (int, float)) and not isinstance(v, bool)}
        if self.tb is not None:
            for k, v in numeric.items():
                self.tb.add_scalar(k, v, step)
            self.tb.flush()
        if self.wandb is not None:
            self.wandb.log(numeric, step=step)

    def close(self) -> None:
        if self.tb is not None:
            self.tb.close()
            self.tb = None
        if self.wandb is not None:
            self.wandb.finish()
            self.wandb = None
