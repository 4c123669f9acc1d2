"""The built-in local trainer: training backend ``local`` (``local.py``, with its memory accounting in
``memory.py``), the RL pieces a run swaps by name — advantage estimators (``rloo``, ``grpo``, ``none``:
``advantages.py``; the core's training batch takes them from the registry), policy losses
(``ppo_clip``, ``gspo``, ``reinforce``: ``losses.py``), metric loggers (``jsonl``, ``tensorboard``, ``wandb``:
``metrics.py``; ``plot``: ``plots.py``; ``run``, the run's own logger that writes to the others and keeps the
rollouts with their figures: ``runlog.py``) — and the ``skyrl train`` command with its console
(``train_command.py``). The core's :mod:`skyrl_core.training` runs the loop and reaches all of these through the
registry. Imports stay light: torch loads only when a backend is built, a loss is first called or the command
runs."""

from __future__ import annotations

from skyrl_core import hookimpl


def local_backend(config, engine=None):
    """Build the local torch trainer (:class:`skyrl_core.default_plugins.trainer.local.LocalBackend`)."""
    from .local import LocalBackend

    return LocalBackend(config, engine)


local_backend.name = "local"
local_backend.max_staleness = float("inf")  # asynchronous training: any lag (LocalBackend declares it too)


@hookimpl(trylast=True)
def register_backends(register):
    register(local_backend, name="local")


class _PolicyLoss:
    """A built-in policy loss of :mod:`.losses`, imported (with torch) on first call."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __call__(self, *args, **kwargs):
        from .losses import POLICY_LOSSES

        return POLICY_LOSSES[self.name](*args, **kwargs)

    @property
    def __doc__(self) -> str:  # what `skyrl plugins` and help() show: the loss's own docstring
        from .losses import POLICY_LOSSES

        return POLICY_LOSSES[self.name].__doc__ or ""


@hookimpl(trylast=True)
def register_advantage_estimators(register):
    from .advantages import METHODS, Estimator

    for method in METHODS:
        register(Estimator(method), name=method)


@hookimpl(trylast=True)
def register_policy_losses(register):
    for name in ("ppo_clip", "gspo", "reinforce", "decoupled_ppo"):
        register(_PolicyLoss(name), name=name)


@hookimpl(trylast=True)
def register_loggers(register):
    from .metrics import BUILTIN_LOGGERS
    from .plots import PlotLogger
    from .runlog import MetricsLogger

    for name, factory in {**BUILTIN_LOGGERS, "plot": PlotLogger, "run": MetricsLogger}.items():
        register(factory, name=name)


@hookimpl(trylast=True)
def register_commands(register):
    from .train_command import train_app

    register(train_app, name="train")
