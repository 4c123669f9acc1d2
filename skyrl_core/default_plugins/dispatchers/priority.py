"""Dispatcher ``priority``: the pipeline, granting every stage to the highest ``metrics["priority"]`` first."""

from __future__ import annotations

from .pipeline import PipelineDispatcher


class PriorityDispatcher(PipelineDispatcher):
    """The pipeline, granting each stage to the trajectory with the highest ``metrics["priority"]`` first
    (ties in arrival order). Give long jobs (expected init + run + eval seconds) a high priority to cut the tail;
    in a training run the rollout session's stage-cost memory sets it from earlier epochs
    (:mod:`.stage_costs`).

    Trajectories without a priority (the first epoch, when nothing is remembered yet) go after any with one, in
    the auto mode's hint-free ``group_cost`` order (learned online from their siblings), so with no priority at
    all the dispatcher grants exactly what ``async_pipeline`` with ``options.order: group_cost`` would.
    """

    name = "priority"
    by_priority = True
