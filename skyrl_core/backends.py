"""Training backends: what turns a :class:`~skyrl_core.transitions.TrainingBatch` into a policy update.

A backend is registered through ``register_backends`` as ``register(cls_or_factory, name="...")`` and built as
``cls(config: Config, engine)``. The built-in one is ``local``
(:mod:`skyrl_core.default_plugins.trainer.local`, a torch trainer in this process); bridges to VeRL, SkyRL-train and Tinker are plugins that translate the same batch format.
A factory with a ``launch(config, *, output, resume)`` attribute owns the whole loop (rollouts included, e.g.
SkyRL-train's Ray trainer): ``skyrl train`` calls it instead of running :class:`~skyrl_core.training.TrainRun`.
"""

from __future__ import annotations

import abc
import os
from typing import Any

from .contracts import display_name, member
from .errors import ConfigError, SkyrlError


class TrainingDivergedError(SkyrlError):
    """Too many training steps in a row had a non-finite loss or gradient (see ``train.max_bad_steps``)."""


class Backend(abc.ABC):
    """A training backend bound to one run.

    ``train_step`` runs one update (possibly several optimizer steps when ``backend.mini_batches`` > 1) and
    returns float metrics; ``sync_weights`` makes ``engine`` sample from the updated policy; ``save``/``load``
    write and read everything the backend needs to continue (weights, optimizer state) in a directory.
    ``bad_steps`` counts consecutive skipped (non-finite) updates; the training loop stops at
    ``train.max_bad_steps``.
    """

    name: str = "backend"

    def __init__(self, config: Any, engine: Any = None) -> None:
        self.config = config
        self.engine = engine
        self.bad_steps = 0

    @abc.abstractmethod
    async def train_step(self, batch: Any) -> dict[str, float]:
        """Update the policy on ``batch`` (a TrainingBatch); return metrics such as ``loss``, ``grad_norm``."""

    @abc.abstractmethod
    async def sync_weights(self, engine: Any) -> None:
        """Make ``engine`` generate with the current policy weights."""

    @abc.abstractmethod
    def save(self, directory: str | os.PathLike) -> None:
        """Write the backend state into ``directory`` (which exists and is empty)."""

    @abc.abstractmethod
    def load(self, directory: str | os.PathLike) -> None:
        """Restore the state written by :meth:`save`. Raises SkyrlError naming the missing file."""

    async def close(self) -> None:
        """Release resources. Safe to call twice."""


def create_backend(config: Any, engine: Any = None) -> Backend:
    """Build the backend named by ``config.backend.type`` from the plugin registry."""
    from .plugins import get_registry

    factory = get_registry().get("backends", config.backend.type)
    return factory(config, engine)


def refuse_scripted_policy(engine: Any, where: str = "skyrl train") -> None:
    """Raise ConfigError when ``engine`` is a scripted policy (the engine contract's ``scripted_policy``: a benchmark
    fixture, :mod:`skyrl_core.default_plugins.eval.scripted`): ``where`` (a training run) cannot learn from it."""
    if member(engine, "inference_engines", "scripted_policy"):
        name = display_name(engine, "inference_engines")
        raise ConfigError(f"{where}: engine '{name}' is a scripted policy (a benchmark "
                          f"fixture that ignores weight updates), so nothing it samples could be trained; run it "
                          f"with its plugin's scaffold-check command, and train with a model engine")
