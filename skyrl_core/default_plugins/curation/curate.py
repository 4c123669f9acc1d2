"""Difficulty curation (``skyrl curate``): bucket questions by how often the policy solves them and write a
dataset with a target mix of difficulties.

Each instance gets ``c`` successes out of ``k`` rollouts (a rollout succeeds when its reward reaches
:data:`skyrl_core.default_plugins.eval.run.SUCCESS_REWARD`), either from fresh rollouts or from an eval's
``trajectories.jsonl``. The ``c/k`` buckets (0/k ... k/k) fold into four bands: ``impossible`` (0/k), ``hard``
(0 < c/k <= 1/2), ``medium`` (1/2 < c/k < 1) and ``easy`` (k/k). The default mix is the SkyRL-Agent paper's, after
Polaris (An et al. 2025): 25 % impossible, 30 % hard, 30 % medium, 15 % easy. Without a size, the largest
dataset that keeps the mix exactly is written; a band short of its target is reported, never padded.
"""

from __future__ import annotations

import json
import random
from collections import defaultdict
from pathlib import Path
from typing import Any, Iterable

from skyrl_core.errors import ConfigError
from skyrl_core.default_plugins.eval.run import SUCCESS_REWARD

BANDS = ("impossible", "hard", "medium", "easy")
DEFAULT_MIX = {"impossible": 0.25, "hard": 0.30, "medium": 0.30, "easy": 0.15}


def band(successes: int, k: int) -> str:
    """The difficulty band of ``successes`` out of ``k`` rollouts (k >= 1)."""
    if k < 1 or not 0 <= successes <= k:
        raise ValueError(f"successes must be within 0..k with k >= 1, got {successes}/{k}")
    if successes == 0:
        return "impossible"
    if successes == k:
        return "easy"
    return "hard" if successes / k <= 0.5 else "medium"


def parse_mix(text: str | None) -> dict[str, float]:
    """``impossible=0.25,hard=0.3,medium=0.3,easy=0.15`` -> a mix summing to 1 (bands left out get 0). Raises
    ConfigError naming a bad band or value."""
    if not text:
        return dict(DEFAULT_MIX)
    mix = {b: 0.0 for b in BANDS}
    for part in text.split(","):
        name, _, value = part.partition("=")
        name = name.strip()
        if name not in mix:
            raise ConfigError(f"--mix: unknown band {name!r}; valid: {', '.join(BANDS)}")
        try:
            mix[name] = float(value)
        except ValueError:
            raise ConfigError(f"--mix: {name}={value!r} is not a number") from None
        if mix[name] < 0:
            raise ConfigError(f"--mix: {name} must be 0 or more, got {mix[name]}")
    total = sum(mix.values())
    if total <= 0:
        raise ConfigError("--mix: the shares must add up to more than 0")
    return {b: v / total for b, v in mix.items()}


def successes_from_trajectories(rows: Iterable[dict]) -> dict[tuple[str, str], tuple[int, int]]:
    """``{(task, instance_id): (successes, rollouts)}`` from trajectory dicts (``skyrl eval``'s jsonl rows)."""
    counts: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])
    for row in rows:
        key = (str(row.get("task")), str(row.get("instance_id")))
        counts[key][0] += float(row.get("reward") or 0.0) >= SUCCESS_REWARD
        counts[key][1] += 1
    return {key: (c, k) for key, (c, k) in counts.items()}


def read_trajectories(path: str | Path) -> list[dict]:
    """The rows of a ``trajectories.jsonl`` (or of the one inside an eval output directory)."""
    path = Path(path)
    if path.is_dir():
        path = path / "trajectories.jsonl"
    if not path.is_file():
        raise ConfigError(f"no trajectories at '{path}' (give an eval output directory or its trajectories.jsonl)")
    rows = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise ConfigError(f"{path}:{n}: not JSON ({exc})") from None
    return rows


def bucket_table(successes: dict[Any, tuple[int, int]]) -> dict[str, dict[str, int]]:
    """Counts per ``c/k`` bucket and per band: ``{"buckets": {"0/4": n, ...}, "bands": {"impossible": n, ...}}``."""
    buckets: dict[str, int] = defaultdict(int)
    bands = {b: 0 for b in BANDS}
    for c, k in successes.values():
        buckets[f"{c}/{k}"] += 1
        bands[band(c, k)] += 1
    order = sorted(buckets, key=lambda s: (int(s.split("/")[1]), int(s.split("/")[0])))
    return {"buckets": {b: buckets[b] for b in order}, "bands": bands}


def select(successes: dict[Any, tuple[int, int]], mix: dict[str, float], size: int | None = None,
           seed: int = 0) -> tuple[list[Any], dict[str, int]]:
    """Keys chosen for the mix: per band ``round(mix x size)`` drawn at random (seeded). Without ``size``, the
    largest size every band with a share can fill. Returns the keys and the shortfall per band (target minus
    what the band had)."""
    by_band: dict[str, list[Any]] = {b: [] for b in BANDS}
    for key, (c, k) in sorted(successes.items(), key=lambda kv: str(kv[0])):
        by_band[band(c, k)].append(key)
    if size is None:
        size = int(min((len(by_band[b]) / share for b, share in mix.items() if share > 0), default=0))
    rng = random.Random(seed)
    chosen: list[Any] = []
    short: dict[str, int] = {}
    for b in BANDS:
        target = round(mix.get(b, 0.0) * size)
        pool = list(by_band[b])
        rng.shuffle(pool)
        chosen.extend(pool[:target])
        if target > len(pool):
            short[b] = target - len(pool)
    return chosen, short


def write_dataset(path: str | Path, chosen: list[tuple[str, str]], instances: dict[tuple[str, str], Any],
                  successes: dict[tuple[str, str], tuple[int, int]]) -> Path:
    """One JSONL row per chosen instance: its ``id``, its data fields, and ``curation`` ({task, successes, k,
    band}). Instances missing from ``instances`` (no longer in the dataset) raise ConfigError naming them."""
    missing = [key for key in chosen if key not in instances]
    if missing:
        raise ConfigError(f"{len(missing)} curated instance(s) are not in the config's data, e.g. "
                          f"{missing[0][0]}:{missing[0][1]}; use the config the trajectories came from")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as f:
        for key in chosen:
            c, k = successes[key]
            row = {"id": instances[key].id, **instances[key].data,
                   "curation": {"task": key[0], "successes": c, "k": k, "band": band(c, k)}}
            f.write(json.dumps(row, ensure_ascii=False, default=str) + "\n")
    return path
