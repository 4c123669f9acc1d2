"""skyrl-swe: software-engineering agents — bash, a file editor and AST code search over sandboxed repositories,
SWE-bench data, test-based rewards and a task generator. Hook implementations only."""

from skyrl_core import hookimpl


@hookimpl
def register_tools(register):
    from .tools import TOOLS

    for tool in TOOLS:
        register(tool)


@hookimpl
def register_runtimes(register):
    from .docker_runtime import DockerRuntime
    from .runtime import SweSandbox

    register(SweSandbox)
    register(DockerRuntime)


@hookimpl
def register_instruction_builders(register):
    from .tasks import build_mini_swe_agent_instructions, build_swe_instructions

    register(build_swe_instructions, name="swe")
    register(build_mini_swe_agent_instructions, name="mini_swe_agent")


@hookimpl
def register_verifiers(register):
    from .verifiers import swe_tests

    register(swe_tests, name="swe_tests")


@hookimpl
def register_tasks(register):
    from .tasks import mini_swe_agent_task, r2e_gym_task, swe_task

    register(swe_task)
    register(mini_swe_agent_task)
    register(r2e_gym_task)


@hookimpl
def register_eval_writers(register):
    from .predictions import swe_predictions_writer

    register(swe_predictions_writer)


@hookimpl
def register_commands(register):
    from .cli import swe_app

    register(swe_app, name="swe")
