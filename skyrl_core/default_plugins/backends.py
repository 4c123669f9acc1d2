"""Built-in training backend ``local`` and the ``skyrl train`` command. Imports stay light: torch loads only when
a backend is built or the command runs."""

from __future__ import annotations

from skyrl_core import hookimpl


def local_backend(config, engine=None):
    """Build the local torch trainer (:class:`skyrl_core.trainer.local.LocalBackend`)."""
    from skyrl_core.trainer.local import LocalBackend

    return LocalBackend(config, engine)


local_backend.name = "local"


@hookimpl(trylast=True)
def register_backends(register):
    register(local_backend, name="local")



@hookimpl(trylast=True)
def register_commands(register):
    from skyrl_core.trainer.cli import train_app

    register(train_app, name="train")
