"""Backend ``skyrl-train``: SkyRL-train runs its own training loop (Ray workers, vLLM servers), so the registered
backend is a launcher, not an in-process ``train_step`` (:func:`skyrl_train_backend`)."""

from __future__ import annotations

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
