"""Evaluation: roll out the configured eval split, summarise it and write its outputs (:func:`run_eval`: what the
built-in ``skyrl eval`` command, in this package's ``__init__.py`` with its console summary, and
:mod:`.scaffold_check` run).

Outputs, in the output directory: ``trajectories.jsonl`` (one trajectory per line: messages, transitions with
token ids and logprobs, reward, finish reason, metrics) and ``metrics.json``, then whatever each registered eval
writer (``register_eval_writers``) writes: the built-in viewer's ``trajectories.html`` (a readable view of some
trajectories), and a benchmark's own output formats (a submission file in its format, one reward-free pick per
instance by ``eval.selection``), which belong to its plugin's writer; nothing here knows of one.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any, Callable, Sequence

from skyrl_core.contracts import member
from skyrl_core.default_plugins.eval.scripted import is_scripted_policy
from skyrl_core.transitions import Trajectory

log = logging.getLogger(__name__)

SUCCESS_REWARD = 1.0  # a sample counts as solved for pass@k when its reward reaches this


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k for one problem with ``n`` samples of which ``c`` are correct (Chen et al. 2021,
    "Evaluating Large Language Models Trained on Code", Eq. 1): ``1 - C(n-c, k) / C(n, k)``. Raises ValueError
    when ``k > n``."""
    if k > n:
        raise ValueError(f"pass@{k} needs at least {k} samples per problem, got {n}")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def outcome_counts(trajectories: Sequence[Any]) -> dict[str, int]:
    """Verifier outcomes (``scored``/``tampered``/``unverifiable``, docs/runtimes.md) counted over the trajectories
    whose verifier ran; an unverifiable one is also an ``error_eval`` finish, loss-masked."""
    return dict(Counter(str(t.metrics["outcome"]) for t in trajectories if "outcome" in t.metrics).most_common())


def eval_metrics(trajectories: Sequence[Trajectory], wall_s: float, dispatch: dict | None = None) -> dict[str, Any]:
    """Summary of an eval: ``pass@1`` and ``pass@k`` (k = samples per instance, and powers of two below it),
    ``reward_mean``, ``mean_turns``, ``finish_reasons`` (counts), ``tool_calls`` (calls per tool),
    ``tokens_in``/``tokens_out`` (prompt tokens sent / tokens generated, summed over LLM calls), ``masked``
    (fraction loss-masked), ``outcomes`` (verifier outcomes, :func:`outcome_counts`), ``trajectory_metrics`` (:func:`trajectory_metric_means`), ``wall_s`` (seconds, including engine start-up in ``run_eval``) and the
    dispatcher's metrics under ``dispatch``; ``retok_drift`` (``agent.drift_check``: trajectories whose
    re-rendered prompt differs from the recorded ids, their differing tokens, where the first three differ)."""
    groups: dict[str, list[Trajectory]] = defaultdict(list)
    for t in trajectories:
        groups[t.group_id].append(t)
    n_min = min((len(g) for g in groups.values()), default=0)
    ks = sorted({1, n_min} | {2 ** i for i in range(1, 8) if 2 ** i < n_min}) if n_min else []
    metrics: dict[str, Any] = {"n_instances": len(groups), "n_samples": n_min, "n_trajectories": len(trajectories)}
    for k in ks:
        scores = [pass_at_k(len(g), sum(t.reward >= SUCCESS_REWARD for t in g), k) for g in groups.values()]
        metrics[f"pass@{k}"] = sum(scores) / len(scores) if scores else 0.0
    n = max(len(trajectories), 1)
    tool_calls: Counter = Counter()
    for t in trajectories:
        tool_calls.update(t.tool_calls)
    metrics.update({
        "reward_mean": sum(t.reward for t in trajectories) / n,
        "mean_turns": sum(t.turns for t in trajectories) / n,
        "finish_reasons": dict(Counter(str(t.finish_reason) for t in trajectories).most_common()),
        "tool_calls": dict(sorted(tool_calls.items())),
        "tool_calls_per_trajectory": sum(tool_calls.values()) / n,
        "tokens_in": sum(len(x.input_ids) for t in trajectories for x in t.transitions),
        "tokens_out": sum(len(x.output_ids) for t in trajectories for x in t.transitions),
        "llm_calls": sum(len(t.transitions) for t in trajectories),
        "masked": sum(t.masked for t in trajectories) / n,
        "outcomes": outcome_counts(trajectories),
        "wall_s": wall_s,
    })
    drifted = [t for t in trajectories if t.metrics.get("retok_drift")]
    if any("retok_drift" in t.metrics for t in trajectories):  # agent.drift_check: re-tokenisation drift
        metrics["retok_drift"] = {"trajectories": len(drifted),
                                  "tokens": sum(t.metrics.get("retok_drift_tokens", 0) for t in drifted),
                                  "where": [t.metrics.get("retok_drift_where") for t in drifted[:3]]}
    means = trajectory_metric_means(trajectories)
    if means:
        metrics["trajectory_metrics"] = means
    errors = Counter(t.error.split(":")[0] for t in trajectories if t.error)
    if errors:
        metrics["errors"] = dict(errors.most_common(10))
        metrics["error_messages"] = error_messages(trajectories)
    metrics["trajectories_run"] = sum(t.turns > 0 for t in trajectories)
    metrics["verified"] = sum("outcome" in (t.metrics or {}) for t in trajectories)
    if dispatch:
        metrics["dispatch"] = {k: v for k, v in dispatch.items() if k != "timeline"}
    return metrics


def error_messages(trajectories: Sequence[Trajectory], limit: int = 3, width: int = 300) -> list[str]:
    """The first full error message of each of the ``limit`` most common error kinds (the text before the first
    ``:``, as in ``metrics["errors"]``), each cut to ``width`` characters: what a summary shows so that the
    message naming the fix (``search.provider: must be one of ...``) is not only inside trajectories.jsonl."""
    kinds = Counter(t.error.split(":")[0] for t in trajectories if t.error)
    first: dict[str, str] = {}
    for t in trajectories:
        if t.error:
            first.setdefault(t.error.split(":")[0], t.error)
    out = []
    for kind, _count in kinds.most_common(limit):
        text = " ".join(first[kind].split())
        out.append(text if len(text) <= width else text[: width - 3] + "...")
    return out


def trajectory_metric_means(trajectories: Sequence[Trajectory]) -> dict[str, float]:
    """The mean of each numeric per-trajectory metric a verifier recorded (``em``, ``f1``, cache hits, ...),
    over the trajectories that have it; booleans count as 0/1, strings and other values are skipped."""
    sums: dict[str, float] = defaultdict(float)
    counts: Counter = Counter()
    for t in trajectories:
        for key, value in (t.metrics or {}).items():
            # the dispatcher's scheduling priority is not a verifier's measurement
            if key != "priority" and isinstance(value, (int, float)) and math.isfinite(value):
                sums[key] += float(value)
                counts[key] += 1
    return {key: sums[key] / counts[key] for key in sorted(sums)}


def write_outputs(output_dir: str | Path, trajectories: Sequence[Trajectory], metrics: dict[str, Any],
                  config: Any = None) -> dict[str, Path]:
    """Write ``trajectories.jsonl`` and ``metrics.json`` into ``output_dir``, then run
    every registered eval writer (``register_eval_writers``) as ``writer(output_dir, trajectories, config)``;
    returns ``{name: path}`` of every file written. ``config`` is the run's Config (defaults when None). A writer
    that raises is logged with its name and skipped: the eval's own files stand."""
    from skyrl_core.config import Config
    from skyrl_core.plugins import get_registry

    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"trajectories": out / "trajectories.jsonl", "metrics": out / "metrics.json"}
    with paths["trajectories"].open("w", encoding="utf-8") as f:
        for t in trajectories:
            f.write(json.dumps(t.to_json(), ensure_ascii=False, default=str) + "\n")
    paths["metrics"].write_text(json.dumps(metrics, indent=2, default=str) + "\n", encoding="utf-8")
    config = config if config is not None else Config()
    for reg in get_registry().items("eval_writers"):
        try:
            written = reg.obj(out, list(trajectories), config) or {}
        except Exception as exc:  # one writer's bug must not cost the eval its trajectories and metrics
            log.error("eval writer '%s' (plugin '%s') failed: %s: %s", reg.name, reg.plugin, type(exc).__name__, exc)
            continue
        paths.update({str(k): Path(v) for k, v in written.items()})
    return paths


async def run_eval(config: Any, output_dir: str | Path, engine: Any = None,
                   on_start: Callable[[int], None] | None = None,
                   on_trajectory_done: Callable[[Trajectory], None] | None = None) -> dict[str, Any]:
    """Roll out every configured task's eval split ``sampling.n_samples`` times, write the outputs and return
    the metrics. ``on_start(n_trajectories)`` and ``on_trajectory_done(trajectory)`` drive a progress bar."""
    from skyrl_core.rollout import RolloutSession

    start = time.perf_counter()
    session = await RolloutSession.create(config, engine=engine)
    try:
        items = session.load_instances("eval")
        if on_start is not None:
            on_start(len(items) * config.sampling.n_samples)
        session.on_trajectory_done = on_trajectory_done
        session.for_eval = True
        rollout_start = time.perf_counter()
        trajectories, dispatch = await session.rollout(items, config.sampling.n_samples)
        rollout_s = time.perf_counter() - rollout_start
        scripted = is_scripted_policy(session.engine)
        policy = member(session.engine, "inference_engines", "name") or ""
    finally:
        await session.close()
    metrics = eval_metrics(trajectories, time.perf_counter() - start, dispatch)
    metrics["rollout_s"] = rollout_s
    if scripted:  # a scripted policy's pass rate is a scaffold check, labelled so wherever metrics.json goes
        from skyrl_core.default_plugins.eval.scripted import SCAFFOLD_NOTE

        metrics["scaffold_check"] = {"policy": policy, "note": SCAFFOLD_NOTE}
    write_outputs(output_dir, trajectories, metrics, config=config)
    return metrics
