"""skyrl-tinker: train skyrl agents through the Tinker API. The hookimpls only; the tinker SDK is imported by
the modules that need it (``engine``, ``backend``, ``datums``, ``client``) when a run builds them."""

from __future__ import annotations

from skyrl_core import hookimpl


def tinker_engine(config):
    """Engine factory ``tinker``: a Tinker sampling client (:class:`skyrl_tinker.engine.TinkerEngine`)."""
    from .engine import TinkerEngine

    return TinkerEngine(config)


def tinker_backend(config, engine=None):
    """Backend factory ``tinker``: LoRA training on a Tinker service (:class:`skyrl_tinker.backend.TinkerBackend`)."""
    from .backend import TinkerBackend

    return TinkerBackend(config, engine)


@hookimpl
def register_inference_engines(register):
    register(tinker_engine, name="tinker")


@hookimpl
def register_backends(register):
    register(tinker_backend, name="tinker")


@hookimpl
def register_commands(register):
    from .cli import tinker_app

    register(tinker_app, name="tinker")
