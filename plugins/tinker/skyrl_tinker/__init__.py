"""skyrl-tinker: train skyrl agents through the Tinker API. The hookimpls only; the tinker SDK is imported by
the modules that need it (``engine``, ``backend``, ``datums``, ``client``) when a run builds them."""

from __future__ import annotations

from skyrl_core import hookimpl


@hookimpl
def register_inference_engines(register):
    from .engine import tinker_engine

    register(tinker_engine, name="tinker")


@hookimpl
def register_backends(register):
    from .backend import tinker_backend

    register(tinker_backend, name="tinker")


@hookimpl
def register_commands(register):
    from .cli import tinker_app

    register(tinker_app, name="tinker")
