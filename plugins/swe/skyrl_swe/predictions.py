"""SWE-bench predictions files: one JSON object per line with ``instance_id``, ``model_name_or_path`` and
``model_patch`` — the format the SWE-bench evaluation harness reads."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable


def prediction(trajectory: Any, model_name: str) -> dict:
    """The prediction of one trajectory: its patch from the verifier's metrics, else its submitted answer."""
    patch = (trajectory.metrics or {}).get("model_patch")
    if patch is None:
        patch = trajectory.answer if isinstance(trajectory.answer, str) else ""
    return {"instance_id": trajectory.instance_id, "model_name_or_path": model_name, "model_patch": patch}


def write_predictions(trajectories: Iterable[Any], path: str | Path, model_name: str) -> Path:
    """Write one prediction per instance (its first sample that has a non-empty patch, else its first sample)
    to ``path`` as JSONL; returns the path."""
    best: dict[str, dict] = {}
    for traj in sorted(trajectories, key=lambda t: (t.instance_id, t.sample_index)):
        pred = prediction(traj, model_name)
        if traj.instance_id not in best or (not best[traj.instance_id]["model_patch"] and pred["model_patch"]):
            best[traj.instance_id] = pred
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as fh:
        for pred in best.values():
            fh.write(json.dumps(pred, ensure_ascii=False) + "\n")
    return path


def read_trajectories_jsonl(path: str | Path) -> list[Any]:
    """Trajectories saved as JSON lines (``Trajectory.to_json``) back as lightweight objects."""
    from types import SimpleNamespace

    out = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        if line.strip():
            d = json.loads(line)
            out.append(SimpleNamespace(instance_id=d["instance_id"], sample_index=d.get("sample_index", 0),
                                       metrics=d.get("metrics") or {}, answer=d.get("answer")))
    return out
