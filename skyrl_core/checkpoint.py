"""Checkpoints of a training run: written to a temporary directory and renamed, so a crash or a full disk
never leaves a half-written checkpoint in place of the previous one.

Layout under ``<output>/checkpoints/``: ``step-000005/`` holds ``backend/`` (what the backend's ``save`` wrote:
weights, optimizer state), ``state.json`` (step, data cursor, run bookkeeping) and ``rng.pt`` (python, numpy and
torch RNG states). The newest complete checkpoint is the one with the highest step; temporary directories
(``.tmp-*``) are ignored and cleaned up.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import random
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

import attrs

from .errors import SkyrlError

if TYPE_CHECKING:
    from .config import Config

log = logging.getLogger(__name__)

PREFIX = "step-"


class CheckpointError(SkyrlError):
    """A checkpoint could not be written or read; the message names the directory."""


def step_dir(root: Path, step: int) -> Path:
    return root / f"{PREFIX}{step:06d}"


def list_checkpoints(root: str | os.PathLike) -> list[tuple[int, Path]]:
    """Complete checkpoints under ``root`` as (step, path), oldest first."""
    root = Path(root)
    if not root.is_dir():
        return []
    out = []
    for p in root.iterdir():
        if p.is_dir() and p.name.startswith(PREFIX) and (p / "state.json").is_file():
            try:
                out.append((int(p.name[len(PREFIX):]), p))
            except ValueError:
                continue
    return sorted(out)


def latest_checkpoint(root: str | os.PathLike) -> Path | None:
    found = list_checkpoints(root)
    return found[-1][1] if found else None


def capture_rng() -> dict[str, Any]:
    import torch

    state: dict[str, Any] = {"python": random.getstate(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    try:
        import numpy as np

        state["numpy"] = np.random.get_state()
    except ImportError:
        pass
    return state


def restore_rng(state: dict[str, Any]) -> None:
    import torch

    random.setstate(state["python"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    if "numpy" in state:
        import numpy as np

        np.random.set_state(state["numpy"])


def save_checkpoint(root: str | os.PathLike, step: int, backend: Any, state: dict[str, Any], keep: int = 2) -> Path:
    """Write checkpoint ``step`` under ``root`` atomically and keep only the newest ``keep`` (0 = all).

    ``backend.save(dir)`` writes the backend's part; ``state`` (JSON-serialisable) goes to ``state.json``.
    On any failure (a full disk included) the temporary directory is removed, the previous checkpoints stay
    intact and CheckpointError is raised naming the directory and the cause.
    """
    import torch

    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    target = step_dir(root, step)
    tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{target.name}-", dir=root))
    try:
        (tmp / "backend").mkdir()
        backend.save(tmp / "backend")
        torch.save(capture_rng(), tmp / "rng.pt")
        (tmp / "state.json").write_text(json.dumps({**state, "step": step}, indent=1))
        if target.exists():
            # re-saving the same step (e.g. Ctrl-C right after a periodic save): swap via a second rename
            old = root / f".tmp-old-{target.name}"
            shutil.rmtree(old, ignore_errors=True)
            os.replace(target, old)
            os.replace(tmp, target)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, target)
    except BaseException as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(exc, (KeyboardInterrupt, SystemExit)):
            raise
        raise CheckpointError(f"could not write checkpoint {target}: {type(exc).__name__}: {exc}; "
                              f"the previous checkpoint is intact") from exc
    if keep > 0:
        for _, old in list_checkpoints(root)[:-keep]:
            shutil.rmtree(old, ignore_errors=True)
    for stale in root.glob(".tmp-*"):
        shutil.rmtree(stale, ignore_errors=True)
    log.info("checkpoint written: %s", target)
    return target


def load_checkpoint(path: str | os.PathLike, backend: Any) -> dict[str, Any]:
    """Restore ``backend`` and the RNG states from checkpoint ``path``; return its ``state.json``."""
    import torch

    path = Path(path)
    state_file = path / "state.json"
    if not state_file.is_file():
        raise CheckpointError(f"{path} is not a checkpoint (no state.json)")
    state = json.loads(state_file.read_text())
    backend.load(path / "backend")
    rng_file = path / "rng.pt"
    if rng_file.is_file():
        restore_rng(torch.load(rng_file, weights_only=False))
    return state


def data_fingerprint(config: "Config", train_items: Sequence[tuple[Any, Any]],
                     content: Callable[[Any, Any], str]) -> dict[str, Any]:
    """Every setting that decides which train instances a step gets, by config key, plus a digest of the train
    instances themselves (``train_instances``: count and a SHA-256 over task, id and normalised content in load
    order, so an edited data file counts too). A checkpoint stores it; ``--resume`` compares it with the
    resumed config's (see :func:`fingerprint_changes`). ``train.batch_size`` is not in it: the cursor counts
    instances, so a new batch size neither repeats nor skips any. ``content(task_config, instance)`` is the
    normalised content (:meth:`skyrl_core.rollout.RolloutSession.content`)."""
    fp: dict[str, Any] = {"train.seed": config.train.seed, "tasks": [tc.name for tc in config.tasks]}
    for i, tc in enumerate(config.tasks):
        for key, value in attrs.asdict(tc.data).items():
            fp[f"tasks.{i}.data.{key}"] = json.loads(json.dumps(value, sort_keys=True, default=str))
    digest = hashlib.sha256()
    for tc, inst in train_items:
        digest.update(f"{tc.name}\0{inst.id}\0{content(tc, inst)}\n".encode())
    fp["train_instances"] = f"{len(train_items)}:{digest.hexdigest()[:16]}"
    return fp


def fingerprint_changes(stored: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """``"key: stored -> current"`` for every key whose value differs (a key only one side has included)."""
    missing = object()
    out = []
    for key in sorted(set(stored) | set(current)):
        a, b = stored.get(key, missing), current.get(key, missing)
        if a != b:
            out.append(f"{key}: {'(unset)' if a is missing else a!r} -> {'(unset)' if b is missing else b!r}")
    return out
