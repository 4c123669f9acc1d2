"""Built-in runtimes: ``sandbox`` (bubblewrap) and ``local`` (plain subprocesses)."""

from skyrl_core.hookspecs import hookimpl
from .sandbox import LocalRuntime, LocalSandbox


@hookimpl(trylast=True)
def register_runtimes(register):
    register(LocalSandbox)
    register(LocalRuntime)
