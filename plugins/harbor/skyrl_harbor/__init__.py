"""skyrl-harbor: Harbor task directories (task.toml, instruction.md, environment/, tests/, solution/) as skyrl
tasks — a terminal tool, a sandbox laid out as the task's image, and the task's tests as the verifier.

Hook implementations only: each hook receives a ``register`` callback, so skyrl knows which plugin registered
what (``skyrl plugins``) and reports name clashes. The implementations live in one module per concept.
"""

from skyrl_core import hookimpl

from .tasks import build_instructions, harbor_docker_task, harbor_task
from .tools import terminal_tool
from .verifiers import harbor_tests


@hookimpl
def register_tools(register):
    register(terminal_tool)


@hookimpl
def register_runtimes(register):
    from .runtime import HarborSandbox

    register(HarborSandbox)
    try:  # the docker path runs on skyrl-swe's docker runtime: registered where skyrl-swe is installed
        from .runtime_docker import docker_runtime_class

        register(docker_runtime_class())
    except RuntimeError:
        pass


@hookimpl
def register_instruction_builders(register):
    register(build_instructions, name="harbor")


@hookimpl
def register_verifiers(register):
    register(harbor_tests, name="harbor_tests")


@hookimpl
def register_tasks(register):
    register(harbor_task)
    register(harbor_docker_task)


@hookimpl
def register_commands(register):
    from .cli import harbor_app

    register(harbor_app, name="harbor")
