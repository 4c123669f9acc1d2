"""skyrl-skyrl-train: train skyrl agents with SkyRL-train. The hookimpls only; SkyRL-train itself is imported
lazily by the modules that need it (``compat``, ``generator``, ``launcher``)."""

from __future__ import annotations

from skyrl_core import hookimpl
from skyrl_core.errors import SkyrlError


def skyrl_train_backend(config, engine=None):
    """Backend ``skyrl-train``. SkyRL-train runs its own training loop (Ray workers, vLLM servers), so there is
    no in-process ``train_step``: ``skyrl train`` calls :func:`skyrl_train_backend.launch` instead of building
    this. Raises SkyrlError saying so when something tries to build it as an in-process backend."""
    raise SkyrlError("backend 'skyrl-train' runs SkyRL-train's own trainer: start it with `skyrl train CONFIG "
                     "backend=skyrl-train` (which calls skyrl_skyrl_train.launcher.launch), not as an in-process "
                     "backend")


def _launch(config, *, output, resume=False):
    from .launcher import launch

    launch(config, output=output, resume=resume)


skyrl_train_backend.launch = _launch


@hookimpl
def register_backends(register):
    register(skyrl_train_backend, name="skyrl-train")


@hookimpl
def register_commands(register):
    from .launcher import skyrl_train_app

    register(skyrl_train_app, name="skyrl-train")
