"""Dispatchers schedule each trajectory's three stages — init, run, eval — (SkyRL-Agent, arXiv 2511.16108,
Sec. 3.2). Registered through ``register_dispatchers``; selected by ``dispatcher.type``."""

from __future__ import annotations

import abc
from typing import Any, Awaitable, Callable

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
