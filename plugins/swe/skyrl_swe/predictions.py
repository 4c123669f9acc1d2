"""SWE-bench predictions files: one JSON object per line with ``instance_id``, ``model_name_or_path`` and
``model_patch`` — the format the SWE-bench evaluation harness reads — and the eval writer that makes them.

Which sample of an instance becomes its prediction is chosen without reading any reward (the reward comes from
the hidden FAIL_TO_PASS / PASS_TO_PASS tests, so a reward-picked file would be an oracle pass@n dressed as one
prediction): ``vote`` (the patch most samples produced) or ``first`` (sample 0). The rule is written beside the
file in ``predictions.meta.json``. The oracle pick (highest reward) exists only as
``predictions.oracle-best-of-N.jsonl``, written when ``eval.oracle_best_of_n`` asks for it.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any, Iterable, Sequence

PATCH_METRIC = "model_patch"  # the swe verifier records the submitted patch under this metrics key
SELECTIONS = ("vote", "first", "oracle")
PREDICTIONS_FILE = "predictions.jsonl"
META_FILE = "predictions.meta.json"

RULES = {
    "vote": "the patch most samples of the instance produced (identical after stripping surrounding whitespace); "
            "ties go to the patch first produced by the lowest sample index; an empty patch is picked only when "
            "every sample's is empty; no reward read",
    "first": "sample 0 of each instance; no reward read",
    "oracle": "the sample with the highest reward, i.e. the one the hidden tests passed (oracle best-of-n: an "
              "upper bound, not a pass@1)",
}


def oracle_file_name(n_samples: int) -> str:
    """``predictions.oracle-best-of-N.jsonl``: the oracle pick never takes the name of the reward-free file."""
    return f"predictions.oracle-best-of-{n_samples}.jsonl"


def _patch(t: Any) -> str:
    patch = (t.metrics or {}).get(PATCH_METRIC)
    return patch if isinstance(patch, str) else ""


def select_samples(trajectories: Sequence[Any], selection: str = "vote") -> dict[str, Any]:
    """One trajectory per instance id (in first-seen instance order), picked by ``selection``: ``vote`` or
    ``first`` (reward-free) or ``oracle`` (highest reward, then a non-empty patch, then the lowest sample index).
    A sample without ``metrics["model_patch"]`` (its verifier never ran) counts as an empty patch. Raises
    ValueError for another selection."""
    if selection not in SELECTIONS:
        raise ValueError(f"unknown predictions selection '{selection}'; valid: {', '.join(SELECTIONS)}")
    by_instance: dict[str, list[Any]] = defaultdict(list)
    for t in trajectories:
        by_instance[t.instance_id].append(t)
    picked: dict[str, Any] = {}
    for iid, samples in by_instance.items():
        samples = sorted(samples, key=lambda t: t.sample_index)
        if selection == "first":
            picked[iid] = samples[0]
        elif selection == "oracle":
            picked[iid] = min(samples, key=lambda t: (-float(t.reward or 0.0), not _patch(t), t.sample_index))
        else:
            votes: dict[str, list[Any]] = defaultdict(list)  # stripped patch -> its samples, in sample order
            for t in samples:
                votes[_patch(t).strip()].append(t)
            nonempty = {p: ts for p, ts in votes.items() if p}
            pool = nonempty or votes
            # dicts keep insertion order, so max keeps the patch first produced among equal counts
            picked[iid] = max(pool.values(), key=len)[0]
    return picked


def harness_predictions(trajectories: Sequence[Any], model_name: str, selection: str = "vote") -> list[dict[str, str]]:
    """SWE-bench harness predictions: one ``{"instance_id", "model_name_or_path", "model_patch"}`` per instance,
    from the sample :func:`select_samples` picks."""
    return [{"instance_id": iid, "model_name_or_path": model_name, "model_patch": _patch(t)}
            for iid, t in select_samples(trajectories, selection).items()]


def write_predictions(trajectories: Iterable[Any], path: str | Path, model_name: str,
                      selection: str = "vote") -> Path:
    """Write one prediction per instance to ``path`` as JSONL (:func:`harness_predictions`) and the rule that
    picked it to ``<path stem>.meta.json`` beside it; returns the path."""
    trajectories = list(trajectories)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = harness_predictions(trajectories, model_name, selection)
    with path.open("w", encoding="utf-8") as fh:
        for pred in rows:
            fh.write(json.dumps(pred, ensure_ascii=False) + "\n")
    counts = defaultdict(int)
    for t in trajectories:
        counts[t.instance_id] += 1
    meta = {"file": path.name, "selection": selection, "reads_reward": selection == "oracle",
            "rule": RULES[selection], "model_name_or_path": model_name, "instances": len(rows),
            "samples_per_instance": sorted(set(counts.values()))}
    path.with_name(path.name.removesuffix(".jsonl") + ".meta.json").write_text(
        json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    return path


def swe_predictions_writer(output_dir: Path, trajectories: list[Any], config: Any) -> dict[str, Path]:
    """The eval writer (``register_eval_writers``, name ``swe_predictions``): when any trajectory carries a
    ``model_patch``, ``predictions.jsonl`` picked by ``config.eval.selection`` (with ``predictions.meta.json``),
    and ``predictions.oracle-best-of-N.jsonl`` only when ``config.eval.oracle_best_of_n`` is true. Returns
    ``{"predictions": path, ["oracle_predictions": path]}``, or ``{}`` for a task that records no patch."""
    if not any(PATCH_METRIC in (t.metrics or {}) for t in trajectories):
        return {}
    model = str(config.model)
    out = {"predictions": write_predictions(trajectories, Path(output_dir) / PREDICTIONS_FILE, model,
                                            config.eval.selection)}
    if config.eval.oracle_best_of_n:
        n = max((t.sample_index for t in trajectories), default=0) + 1
        out["oracle_predictions"] = write_predictions(trajectories, Path(output_dir) / oracle_file_name(n), model,
                                                      "oracle")
    return out


swe_predictions_writer.name = "swe_predictions"  # type: ignore[attr-defined]


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
