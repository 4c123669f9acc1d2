"""SWE-bench predictions files: one JSON object per line with ``instance_id``, ``model_name_or_path`` and
``model_patch`` — the format the SWE-bench evaluation harness reads."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable


def write_predictions(trajectories: Iterable[Any], path: str | Path, model_name: str) -> Path:
    """Write one prediction per instance to ``path`` as JSONL (the same selection ``skyrl eval`` makes, see
    :func:`skyrl_core.evaluate.harness_predictions`: the best-rewarded sample, preferring a non-empty patch);
    returns the path."""
    from skyrl_core.evaluate import harness_predictions

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as fh:
        for pred in harness_predictions(list(trajectories), model_name):
            fh.write(json.dumps(pred, ensure_ascii=False) + "\n")
    return path


def read_trajectories_jsonl(path: str | Path) -> list[Any]:
    """Trajectories saved as JSON lines (``Trajectory.to_json``) back as lightweight objects; the submitted
    answer stands in for ``metrics["model_patch"]`` where the verifier never ran."""
    from types import SimpleNamespace

    out = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        if line.strip():
            d = json.loads(line)
            metrics = dict(d.get("metrics") or {})
            if "model_patch" not in metrics and isinstance(d.get("answer"), str):
                metrics["model_patch"] = d["answer"]  # the submitted patch, where the verifier never ran
            out.append(SimpleNamespace(instance_id=d["instance_id"], sample_index=d.get("sample_index", 0),
                                       reward=d.get("reward") or 0.0, metrics=metrics,
                                       answer=d.get("answer")))
    return out
