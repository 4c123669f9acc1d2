"""Dispatchers schedule each trajectory's three stages — init, run, eval — (SkyRL-Agent, arXiv 2511.16108,
Sec. 3.2). Registered through ``register_dispatchers``; selected by ``dispatcher.type``.

This module holds the interface every dispatcher implements and the session drives: :class:`Stages`,
:class:`Dispatcher` and :class:`DispatchMemory`. The built-ins live in :mod:`skyrl_core.default_plugins.dispatchers`
(``batch.py``, ``pipeline.py``, ``priority.py``, on the stage machinery and bookkeeping of its ``base.py``):

- ``async_batch``: every trajectory at once (``max_runtimes`` still caps runtimes alive when set).
- ``async_batch_bounded``: at most ``max_parallel_agents`` trajectories in flight, each init -> run -> eval.
- ``async_pipeline``: the three stages overlap through bounded queues with backpressure; ``auto: true`` sizes
  admission from engine feedback (spare batch slots) and measured stage times instead of fixed worker counts,
  and admits the samples of the instances learned to be costliest first (no hint needed).
- ``priority``: the pipeline, granting every stage to the highest ``trajectory.metrics["priority"]`` first
  (e.g. the expected cost: long jobs first cuts the tail); trajectories without one follow in ``group_cost``
  order.

Every built-in dispatcher shares the fault handling (a plugin's dispatcher owes the same to its trajectories): an exception or timeout in a stage marks that trajectory failed
(``error_init`` / ``error_run`` / ``error_eval`` via :meth:`Trajectory.fail`; ``error_runtime`` in any stage when
the runtime itself was lost, :class:`~skyrl_core.errors.RuntimeLost`), the batch deadline marks
``timeout``, cancellation (Ctrl-C) marks ``cancelled``; ``release`` is awaited exactly once for every trajectory
that entered ``init``, even when the dispatch is cancelled.
"""

from __future__ import annotations

import abc
from typing import Any, Awaitable, Callable, Mapping, Protocol, Sequence

import attrs

from .transitions import Trajectory

StageFn = Callable[[Trajectory], Awaitable[None]]


@attrs.define
class Stages:
    """The stage coroutines for one batch. ``init`` starts the runtime and builds the prompt; ``run`` is the
    agent loop; ``eval`` verifies; ``release`` frees the trajectory's runtime and is always awaited once per
    trajectory that entered ``init``, whatever happened (it must not raise)."""

    init: StageFn
    run: StageFn
    eval: StageFn
    release: StageFn


class Dispatcher(abc.ABC):
    """Runs every trajectory through its stages and returns when each has finished or failed.

    A failing or timed-out stage marks that trajectory failed (``error_init``/``error_run``/``error_eval``,
    loss-masked) and never stops the others. ``engine_stats`` (an EngineStats) lets adaptive dispatchers read
    the engine's load.
    """

    name: str = "dispatcher"

    def __init__(self, config: Any, engine_stats: Any = None) -> None:
        self.config = config
        self.engine_stats = engine_stats

    @abc.abstractmethod
    async def dispatch(self, trajectories: list[Trajectory], stages: Stages) -> dict[str, Any]:
        """Run all trajectories; return dispatch metrics (seconds per stage, peak runtimes, ...)."""

    @classmethod
    def session_memory(cls, config: Any) -> "DispatchMemory | None":
        """What dispatchers of this class remember across the rollouts of one session (a :class:`DispatchMemory`,
        e.g. the built-in pipeline's per-instance stage costs), or None: nothing (the default). ``config`` is the
        ``dispatcher`` section. A rollout session asks once and keeps the answer as ``session.dispatch_memory``;
        the trainer's checkpoints save it."""
        return None


class DispatchMemory(Protocol):
    """State a dispatcher class keeps across the rollouts of one session (:meth:`Dispatcher.session_memory`).

    Around every dispatch the session calls :meth:`before_dispatch` and, when the dispatch returned (not when it
    was cancelled or raised), :meth:`after_dispatch`, each with the trajectories and their ``owners``
    (``owners[i]`` is ``(task name, Instance)`` of ``trajectories[i]``); each returns metrics that join the
    dispatch's. The trainer's checkpoint stores :meth:`to_state` (JSON) and ``--resume`` hands it back to
    :meth:`load_state` (None for a checkpoint without one)."""

    def before_dispatch(self, trajectories: Sequence[Trajectory], owners: Sequence[tuple[str, Any]]
                        ) -> dict[str, Any]: ...

    def after_dispatch(self, trajectories: Sequence[Trajectory], owners: Sequence[tuple[str, Any]]
                       ) -> dict[str, Any]: ...

    def to_state(self) -> dict[str, Any]: ...

    def load_state(self, state: Mapping[str, Any] | None) -> None: ...
