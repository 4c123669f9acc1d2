"""The run's own logger ``run`` (``register_loggers``): what :class:`skyrl_core.training.TrainRun` writes its records
and rollouts to (the core asks the registry for the logger named :data:`skyrl_core.training.RUN_LOG`).

:class:`MetricsLogger` fans each record out to every logger of the run (:func:`logger_names`: ``jsonl`` and
``plot``, then those the config turns on), each built through the registry, and keeps each rollout of the run:
its trajectories in ``<output>/rollouts/<name>.jsonl`` and its figures (:func:`trajectory_summary`) for the
record. A plugin that registers ``run`` replaces all of this; one that registers ``jsonl`` or ``plot`` replaces
only that logger.
"""

from __future__ import annotations

import json
import logging
import math
from collections import Counter
from pathlib import Path
from typing import Any, Sequence

from skyrl_core.config import LoggingConfig
from skyrl_core.contracts import member
from skyrl_core.errors import ConfigError

log = logging.getLogger(__name__)

#: the name this logger is registered under (:data:`skyrl_core.training.RUN_LOG` asks for it)
RUN = "run"

#: The loggers every run writes to, before those the config turns on: ``jsonl`` (metrics.jsonl, the run's record,
#: which ``--resume`` truncates) and ``plot`` (training.png at the end). This plugin registers them
#: (``register_loggers``); a plugin that registers one of these names replaces it.
RUN_LOGGERS = ("jsonl", "plot")


def trajectory_summary(trajectories: Sequence[Any], per_task: bool = True) -> dict[str, float]:
    """Rollout figures of a step: reward, pass rate, turns, tool calls, finish reasons, masked/failed counts.

    When the trajectories come from more than one task (and ``per_task``), the same figures per task follow
    under ``task/<name>/<figure>`` (``task/gsm8k_steps/pass_rate``, ...): pooled figures hide that one task
    learns while another does not."""
    n = len(trajectories)
    tasks = sorted({t.task for t in trajectories})
    if per_task and len(tasks) > 1:
        out = trajectory_summary(trajectories, per_task=False)
        for name in tasks:
            mine = trajectory_summary([t for t in trajectories if t.task == name], per_task=False)
            out.update({f"task/{name}/{k}": v for k, v in mine.items()})
            out[f"task/{name}/trajectories"] = float(sum(t.task == name for t in trajectories))
        return out
    if not n:
        return {"trajectories": 0.0}
    calls = [sum(t.tool_calls.values()) for t in trajectories]
    out = {
        "reward_mean": sum(float(t.reward) for t in trajectories) / n,
        "pass_rate": sum(float(t.reward) >= 1.0 for t in trajectories) / n,
        "mean_turns": sum(t.turns for t in trajectories) / n,
        "tool_calls_per_trajectory": sum(calls) / n,
        "trajectories_with_tool_call": sum(c > 0 for c in calls) / n,
        "masked_fraction": sum(bool(t.masked) for t in trajectories) / n,
        "error_fraction": sum(t.error is not None for t in trajectories) / n,
        "generated_tokens_mean": sum(sum(len(x.output_ids) for x in t.transitions) for t in trajectories) / n,
    }
    for reason, count in Counter(t.finish_reason or "none" for t in trajectories).items():
        out[f"finish/{reason}"] = count / n
    # verifier outcomes as counts: an unverifiable trajectory is masked (error_eval), a tampered one trains at 0
    for outcome in ("tampered", "unverifiable"):
        out[f"outcome/{outcome}"] = float(sum(t.metrics.get("outcome") == outcome for t in trajectories))
    return out


def logger_names(logging_config: Any) -> list[str]:
    """The loggers a run writes to, in order: :data:`RUN_LOGGERS`, ``tensorboard`` / ``wandb`` when their flag is
    on, then ``logging.loggers`` (duplicates dropped). Raises ConfigError when ``logging.loggers`` names ``run``
    (this logger, which writes to all the others)."""
    names = list(RUN_LOGGERS)
    if logging_config.tensorboard:
        names.append("tensorboard")
    if logging_config.wandb:
        names.append("wandb")
    for name in getattr(logging_config, "loggers", []) or []:
        if name == RUN:
            raise ConfigError(f"config key 'logging.loggers' names '{RUN}', the run's own logger, which writes to "
                              f"every logger named there; name the loggers it should write to (registered: "
                              f"those `skyrl plugins` lists under loggers)")
        if name not in names:
            names.append(name)
    return names


def _clean(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None if math.isnan(value) else str(value)
    return value


class MetricsLogger:
    """Logger ``run``: every logger of a run (:func:`logger_names`), each built through the registry
    (``register_loggers``), and the run's rollouts.

    ``MetricsLogger(output, run_config=None, registry=None)``: ``run_config`` is the run's Config (None: the
    default ``logging`` section); ``registry`` defaults to the process's. Each logger's factory is called
    ``(output, run_config)`` and returns an object with ``log(record)`` and ``close()``. A logger that also has
    ``truncate_after(step) -> records`` keeps the run's record (the built-in ``jsonl``): :meth:`truncate_after`
    keeps only its records of steps up to ``step`` (a resumed run holds each step once) and returns them, and its
    failing ``log`` stops the run. Any other logger that raises in ``log`` is reported once and dropped (the run
    goes on). Records reach the loggers with non-finite floats as null / ``"inf"``. Raises UnknownComponentError
    for a logger name nobody registered, and whatever a factory raises (MissingExtraError when TensorBoard or W&B
    is enabled but not installed).
    """

    name = RUN

    def __init__(self, output: Path, run_config: Any = None, registry: Any = None) -> None:
        if registry is None:
            from skyrl_core.plugins import get_registry

            registry = get_registry()
        self.output = Path(output)
        self.config = run_config.logging if run_config is not None else LoggingConfig()
        self.sinks: dict[str, Any] = {}
        try:
            for name in logger_names(self.config):
                self.sinks[name] = registry.get("loggers", name)(self.output, run_config)
        except BaseException:
            self.close()
            raise

    def truncate_after(self, step: int) -> list[dict]:
        """Keep only records with ``step`` <= ``step`` in every logger that keeps the run's record; return the
        first one's (``[]`` when none keeps one)."""
        kept: list[dict] | None = None
        for sink in self.sinks.values():
            truncate = member(sink, "loggers", "truncate_after")
            if truncate is not None:
                records = truncate(step)
                kept = records if kept is None else kept
        return kept or []

    def log_rollout(self, name: str, trajectories: Sequence[Any]) -> dict[str, float]:
        """Write a rollout's trajectories to ``<output>/rollouts/<name>.jsonl`` (one ``Trajectory.to_json`` per
        line; ``name`` is ``step-000003`` or ``eval-000000``) and return its figures
        (:func:`trajectory_summary`)."""
        folder = self.output / "rollouts"
        folder.mkdir(parents=True, exist_ok=True)
        with (folder / f"{name}.jsonl").open("w") as f:
            for t in trajectories:
                f.write(json.dumps(t.to_json(), default=str) + "\n")
        return trajectory_summary(trajectories)

    def log(self, record: dict[str, Any]) -> None:
        record = {k: _clean(v) for k, v in record.items()}
        for name, sink in list(self.sinks.items()):
            try:
                sink.log(record)
            except Exception as exc:
                if member(sink, "loggers", "truncate_after") is not None:  # the run's record: a resume needs it
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
