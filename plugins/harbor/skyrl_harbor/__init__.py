"""skyrl-harbor: Harbor task directories (task.toml, instruction.md, environment/, tests/, solution/) as skyrl
tasks — a terminal tool, a sandbox laid out as the task's image, and the task's tests as the verifier.

Hook implementations only: each hook receives a ``register`` callback, so skyrl knows which plugin registered
what (``skyrl plugins``) and reports name clashes. The implementations live in one module per concept.
"""

from skyrl_core import hookimpl

from .tasks import build_instructions, harbor_task
from .tools import terminal_tool
from .verifiers import harbor_tests


@hookimpl
def register_tools(register):
    register(terminal_tool)


@hookimpl
def register_runtimes(register):
    from .runtime import HarborSandbox

    register(HarborSandbox)


@hookimpl
def register_instruction_builders(register):
    register(build_instructions, name="harbor")


@hookimpl
def register_verifiers(register):
    register(harbor_tests, name="harbor_tests")


@hookimpl
def register_tasks(register):
    register(harbor_task)


@hookimpl
def register_commands(register):
    from .cli import harbor_app

    register(harbor_app, name="harbor")
