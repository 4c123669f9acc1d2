"""Built-in runtimes: ``sandbox`` (bubblewrap) and ``local`` (plain subprocesses)."""

from ..hookspecs import hookimpl
from ..runtime import LocalRuntime, LocalSandbox


@hookimpl(trylast=True)
def register_runtimes(register):
    register(LocalSandbox)
    register(LocalRuntime)
