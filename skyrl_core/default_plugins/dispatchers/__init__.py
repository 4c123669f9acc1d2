"""Built-in dispatchers, one module each over the stage machinery of ``base.py`` (on the interface of
:mod:`skyrl_core.dispatchers`): ``async_batch`` and
``async_batch_bounded`` (``batch.py``), ``async_pipeline`` (``pipeline.py``), ``priority`` (``priority.py``), the
pipeline's per-instance stage-cost memory (``stage_costs.py``, its ``session_memory``). The ``skyrl bench
dispatch`` command that compares them is the ``bench`` built-in plugin."""

from __future__ import annotations

from skyrl_core.dispatchers import Dispatcher
from skyrl_core.hookspecs import hookimpl

from .batch import AsyncBatchDispatcher, BoundedBatchDispatcher
from .pipeline import PipelineDispatcher
from .priority import PriorityDispatcher

BUILTIN_DISPATCHERS: dict[str, type[Dispatcher]] = {
    "async_batch": AsyncBatchDispatcher,
    "async_batch_bounded": BoundedBatchDispatcher,
    "async_pipeline": PipelineDispatcher,
    "priority": PriorityDispatcher,
}


@hookimpl(trylast=True)
def register_dispatchers(register):
    for name, cls in BUILTIN_DISPATCHERS.items():
        register(cls, name=name)
