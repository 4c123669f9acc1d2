"""skyrl-skyrl-train: train skyrl agents with SkyRL-train. The hookimpls only; SkyRL-train itself is imported
lazily by the modules that need it (``compat``, ``generator``, ``launcher``)."""

from __future__ import annotations

from skyrl_core import hookimpl


@hookimpl
def register_backends(register):
    from .backend import skyrl_train_backend

    register(skyrl_train_backend, name="skyrl-train")


@hookimpl
def register_commands(register):
    from .launcher import skyrl_train_app

    register(skyrl_train_app, name="skyrl-train")
