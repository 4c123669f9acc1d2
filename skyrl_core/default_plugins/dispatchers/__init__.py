"""Built-in dispatchers (``async_batch``, ``async_batch_bounded``, ``async_pipeline``, ``priority``) and the
``skyrl bench`` command (``skyrl bench dispatch``)."""

from __future__ import annotations

from ..dispatchers import BUILTIN_DISPATCHERS
from ..hookspecs import hookimpl


@hookimpl(trylast=True)
def register_dispatchers(register):
    for name, cls in BUILTIN_DISPATCHERS.items():
        register(cls, name=name)


@hookimpl(trylast=True)
def register_commands(register):
    from ..bench.cli import bench_app  # typer only; the simulation and matplotlib load inside the command

    register(bench_app, name="bench")
