"""skyrl-verl: train skyrl agents with VeRL. The hookimpls only; VeRL itself is imported lazily by the modules
that need it (``convert``, ``algorithms``, ``backend``, ``agent_loop``, ``launcher``)."""

from __future__ import annotations

from skyrl_core import hookimpl


@hookimpl
def register_backends(register):
    from .factories import verl_backend

    register(verl_backend, name="verl")


@hookimpl
def register_commands(register):
    from .launcher import verl_app

    register(verl_app, name="verl")
