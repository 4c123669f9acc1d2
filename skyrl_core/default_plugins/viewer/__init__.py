"""Built-in trajectory viewer: the eval writer ``trajectories_html`` (``register_eval_writers``) writes
``trajectories.html`` next to an eval's ``trajectories.jsonl``: up to ``logging.trajectories_html`` trajectories,
rewarded and unrewarded alternating, each with its conversation, images and LLM calls (:mod:`.render`, which also
renders Markdown)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

from skyrl_core.hookspecs import hookimpl


def trajectories_html(output_dir: Path, trajectories: Sequence[Any], config: Any) -> dict[str, Path]:
    """Write ``<output_dir>/trajectories.html`` with the summary line from the eval's ``metrics.json`` (written
    before the eval writers run; none when absent or unreadable). Returns ``{"html": path}``."""
    from .render import write_html

    try:
        metrics = json.loads((Path(output_dir) / "metrics.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        metrics = None
    path = write_html(trajectories, Path(output_dir) / "trajectories.html", limit=config.logging.trajectories_html,
                      title="skyrl eval", metrics=metrics if isinstance(metrics, dict) else None)
    return {"html": path}


@hookimpl(trylast=True)
def register_eval_writers(register):
    register(trajectories_html, name="trajectories_html")
