"""`skyrl train`: data cursor, checkpoints (atomic, disk full), metrics, plot, and end-to-end runs with the real
rollout session on a tiny randomly initialised model (kill and --resume give the same step k+1 inputs)."""

from __future__ import annotations

import errno
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from skyrl_core.trainer.checkpoint import (CheckpointError, latest_checkpoint, list_checkpoints, load_checkpoint,
                                           save_checkpoint)
from skyrl_core.trainer.loop import DataCursor
from skyrl_core.trainer.metrics import MetricsLogger, read_jsonl

REPO = Path(__file__).resolve().parents[1]


class FileBackend:
    """A minimal real Backend-shaped object for checkpoint tests: it saves and loads one file."""

    def __init__(self, payload: str = "", fail: Exception | None = None) -> None:
        self.payload = payload
        self.fail = fail

    def save(self, directory):
        (Path(directory) / "weights.txt").write_text(self.payload)
        if self.fail is not None:
            raise self.fail

    def load(self, directory):
        self.payload = (Path(directory) / "weights.txt").read_text()


def test_data_cursor_is_deterministic_and_resumable():
    a = DataCursor(10, seed=7)
    steps = [a.take(4) for _ in range(5)]  # crosses two epoch boundaries
    assert sorted(steps[0] + steps[1] + steps[2][:2]) == list(range(10))  # epoch 0 is a permutation
    b = DataCursor(10, seed=7, position=12)
    assert b.take(4) == steps[3]
    assert DataCursor(10, seed=8).take(10) != DataCursor(10, seed=7).take(10)


def test_checkpoint_is_atomic_and_keeps_the_newest(tmp_path):
    import torch

    random.seed(1)
    torch.manual_seed(1)
    for step in (1, 2, 3):
        save_checkpoint(tmp_path, step, FileBackend(f"w{step}"), {"cursor": step * 4}, keep=2)
    assert [s for s, _ in list_checkpoints(tmp_path)] == [2, 3]
    expected = (random.random(), float(torch.rand(1)))
    # a full disk while writing step 4: the error names the directory, step 3 stays intact and latest
    disk_full = OSError(errno.ENOSPC, "No space left on device")
    with pytest.raises(CheckpointError, match="step-000004.*No space left.*previous checkpoint is intact"):
        save_checkpoint(tmp_path, 4, FileBackend("w4", fail=disk_full), {"cursor": 16})
    assert latest_checkpoint(tmp_path).name == "step-000003"
    assert not list(tmp_path.glob(".tmp-*"))
    backend = FileBackend()
    state = load_checkpoint(latest_checkpoint(tmp_path), backend)
    assert state == {"cursor": 12, "step": 3} and backend.payload == "w3"
    assert (random.random(), float(torch.rand(1))) == expected  # RNG restored to the checkpoint's state
    with pytest.raises(CheckpointError, match="not a checkpoint"):
        load_checkpoint(tmp_path, backend)


def test_metrics_jsonl_truncates_on_resume_and_plot(tmp_path):
    from skyrl_core.config import LoggingConfig
    from skyrl_core.trainer.plots import plot_run

    logger = MetricsLogger(tmp_path, LoggingConfig(tensorboard=True))
    for step in range(4):
        logger.log({"kind": "train", "step": step, "reward_mean": step / 4, "mean_turns": 2.0,
                    "tool_calls_per_trajectory": 1.0, "nan": float("nan")})
        if step % 2 == 0:
            logger.log({"kind": "eval", "step": step, "pass@1": 0.1 * step})
    with (tmp_path / "metrics.jsonl").open("a") as f:
        f.write('{"kind": "train", "st')  # torn line from a kill mid-write
    kept = logger.truncate_after(2)
    logger.close()
    assert [(r["kind"], r["step"]) for r in kept] == [("train", 0), ("eval", 0), ("train", 1), ("train", 2),
                                                      ("eval", 2)]
    assert read_jsonl(tmp_path / "metrics.jsonl")[0]["nan"] is None
    assert list((tmp_path / "tensorboard").glob("events.out.tfevents.*"))
    png = plot_run(kept, tmp_path / "training.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
