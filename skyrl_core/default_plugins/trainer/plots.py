"""The end-of-run figure: reward, eval pass@1, mean turns and tool calls per step, from metrics.jsonl; the logger
``plot`` draws it when the run closes."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from skyrl_core.errors import require

from .metrics import read_jsonl


def task_names(records: Sequence[dict]) -> list[str]:
    """The tasks with per-task figures (``task/<name>/...`` keys) in the records, sorted."""
    return sorted({k.split("/")[1] for r in records for k in r if k.startswith("task/") and k.count("/") >= 2})


def plot_run(records: Sequence[dict], path: str | Path, title: str = "skyrl train") -> Path:
    """Write a 2x2 PNG to ``path`` from metric records (``kind`` train/eval, ``step``). Returns the path.

    Panels: train reward mean per step; eval pass@1 per evaluated step; mean turns per trajectory; tool calls
    per trajectory; in a multi-task run each panel adds a dashed line per task (``task/<name>/<key>``).
    Raises MissingExtraError without matplotlib.
    """
    matplotlib = require("matplotlib", "train", "the training plot")
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    train = [r for r in records if r.get("kind") == "train"]
    evals = [r for r in records if r.get("kind") == "eval"]
    fig, axes = plt.subplots(2, 2, figsize=(10, 7), constrained_layout=True)
    panels = [
        (axes[0, 0], train, "reward_mean", "train reward (mean)"),
        (axes[0, 1], evals, "pass@1", "eval pass@1"),
        (axes[1, 0], train, "mean_turns", "turns per trajectory"),
        (axes[1, 1], train, "tool_calls_per_trajectory", "tool calls per trajectory"),
    ]
    tasks = task_names(records)
    for ax, rows, key, label in panels:
        pts = [(r["step"], r[key]) for r in rows if isinstance(r.get(key), (int, float))]
        if pts:
            xs, ys = zip(*pts)
            ax.plot(xs, ys, marker="o", label="all tasks" if tasks else None)
            for x, y in pts if len(pts) <= 12 and key == "pass@1" else []:
                ax.annotate(f"{y:.2f}", (x, y), textcoords="offset points", xytext=(0, 6), ha="center")
            for name in tasks:  # one line per task of a multi-task run
                own = [(r["step"], r[f"task/{name}/{key}"]) for r in rows
                       if isinstance(r.get(f"task/{name}/{key}"), (int, float))]
                if own:
                    ax.plot(*zip(*own), marker=".", linestyle="--", label=name)
            if tasks:
                ax.legend(fontsize="small")
        else:
            ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes)
        ax.set_title(label)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    fig.suptitle(title)
    path = Path(path)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


class PlotLogger:
    """Logger ``plot``: when the run closes (finished, failed or interrupted), draws :func:`plot_run` of the run's
    ``<output>/metrics.jsonl`` (every step, a resumed run's earlier ones included) into ``<output>/training.png``;
    nothing when the file holds no record. Raises MissingExtraError without matplotlib when built, so a run
    without it stops before its first rollout rather than after its last step."""

    name = "plot"

    def __init__(self, output: Path, config: Any = None) -> None:
        require("matplotlib", "train", "the training plot")
        self.output = Path(output)
        self.title = "skyrl train"
        if config is not None and getattr(config, "tasks", None):
            self.title = f"skyrl train: {', '.join(t.name for t in config.tasks)} / {config.model}"

    def log(self, record: dict[str, Any]) -> None:
        pass  # drawn from metrics.jsonl at close

    def close(self) -> None:
        records = read_jsonl(self.output / "metrics.jsonl")
        if records:
            plot_run(records, self.output / "training.png", title=self.title)
