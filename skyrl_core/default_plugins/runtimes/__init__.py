"""Built-in runtimes: ``sandbox`` (bubblewrap) and ``local`` (plain subprocesses); the ``local`` placement."""

from skyrl_core.hookspecs import hookimpl
from .placement import LocalPlacement
from .sandbox import LocalRuntime, LocalSandbox


@hookimpl(trylast=True)
def register_runtimes(register):
    register(LocalSandbox)
    register(LocalRuntime)


@hookimpl(trylast=True)
def register_placements(register):
    register(LocalPlacement())
