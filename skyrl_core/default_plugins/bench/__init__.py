"""Built-in plugin ``builtin:bench``: the ``skyrl bench`` command (``skyrl bench dispatch``), which benchmarks
every registered dispatcher on a simulated workload (``dispatch.py``: virtual clock ``clock.py``, engine stand-in
``engine.py``) or on the real CPU stack (``real.py``)."""

from __future__ import annotations

from skyrl_core.hookspecs import hookimpl


@hookimpl(trylast=True)
def register_commands(register):
    from .cli import bench_app  # typer only; the simulation and matplotlib load inside the command

    register(bench_app, name="bench")
