"""Built-in asynchronous training: with ``train.max_staleness`` > 0 the core's training loop asks the registry for
the asynchronous loop ``async`` (``register_async_loops``); this plugin registers it (:mod:`.loop`: the producer
of rollout groups running ahead of the trainer within the staleness bound, and its train step). A plugin that
registers ``async`` itself (``tryfirst``, or any plain hookimpl) replaces it."""

from __future__ import annotations

from skyrl_core.hookspecs import hookimpl


@hookimpl(trylast=True)
def register_async_loops(register):
    from .loop import AsyncTraining

    register(AsyncTraining(), name="async")
