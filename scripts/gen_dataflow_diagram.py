"""Draw docs/img/dataflow.png: one training step, from a task's instance to the train step (docs/concepts.md).

    python scripts/gen_dataflow_diagram.py
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch  # noqa: E402

OUT = Path(__file__).resolve().parents[1] / "docs" / "img" / "dataflow.png"

# (key, x, y, width, title, body, colour): x and y are the box centre in axis units
BOXES = [
    ("task", 1.2, 6.0, 2.0, "Task", "dataset loader\n-> instances", "#dbeafe"),
    ("traj", 3.9, 6.0, 2.3, "Trajectories", "n_samples per instance\n(one group each)", "#dbeafe"),
    ("disp", 7.0, 6.0, 2.6, "Dispatcher", "schedules init / run / eval\nper trajectory, overlapped", "#fde68a"),
    ("init", 2.2, 3.6, 3.2, "init", "runtime.start() + prepare()\ninstruction builder -> messages", "#dcfce7"),
    ("run", 6.0, 3.6, 3.6, "run: agent loop", "engine.generate(token ids) -> Transition\n"
                                              "parser -> tool call -> tool.call(args, ctx)\n"
                                              "observation tokens appended", "#dcfce7"),
    ("eval", 9.7, 3.6, 2.6, "eval", "verifier(trajectory, runtime)\n-> reward; runtime closed", "#dcfce7"),
    ("post", 2.6, 1.1, 3.4, "postprocess", "transitions -> TrainingBatch\n(packing, loss masks, advantages)",
     "#fce7f3"),
    ("back", 6.6, 1.1, 3.0, "Backend bridge", "train_step(batch) -> metrics\nsync_weights(engine)", "#fce7f3"),
    ("log", 10.0, 1.1, 2.4, "Loggers", "jsonl, TensorBoard, W&B\ncheckpoints, training.png", "#e5e7eb"),
]
ARROWS = [("task", "traj"), ("traj", "disp"), ("disp", "init"), ("init", "run"), ("run", "eval"),
          ("eval", "post"), ("post", "back"), ("back", "log")]


def main() -> None:
    fig, ax = plt.subplots(figsize=(11.5, 6.2), dpi=110)
    ax.set_xlim(0, 11.4)
    ax.set_ylim(-0.1, 7.1)
    ax.axis("off")
    geom = {}
    for key, x, y, w, title, body, colour in BOXES:
        h = 1.45
        ax.add_patch(FancyBboxPatch((x - w / 2, y - h / 2), w, h, boxstyle="round,pad=0.05,rounding_size=0.12",
                                    fc=colour, ec="#374151", lw=1.2))
        ax.text(x, y + 0.38, title, ha="center", va="center", fontsize=11, weight="bold")
        ax.text(x, y - 0.18, body, ha="center", va="center", fontsize=8.3, linespacing=1.3)
        geom[key] = (x, y, w, h)
    for a, b in ARROWS:
        (xa, ya, wa, ha), (xb, yb, wb, hb) = geom[a], geom[b]
        if abs(ya - yb) < 0.1:  # same row: side to side
            start, end = (xa + wa / 2 * (1 if xb > xa else -1), ya), (xb - wb / 2 * (1 if xb > xa else -1), yb)
        else:  # next row: bottom to top
            start, end = (xa, ya - ha / 2), (xb, yb + hb / 2)
        ax.add_patch(FancyArrowPatch(start, end, arrowstyle="-|>", mutation_scale=14, lw=1.3, color="#374151",
                                     connectionstyle="arc3,rad=0.0"))
    ax.text(5.7, 6.95, "One training step in skyrl", ha="center", fontsize=13, weight="bold")
    ax.text(5.7, 0.1, "stage boundaries are where the dispatcher overlaps trajectories: while one runs its tests, "
                       "another generates", ha="center", fontsize=8, style="italic", color="#4b5563")
    fig.tight_layout()
    OUT.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(OUT)
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
