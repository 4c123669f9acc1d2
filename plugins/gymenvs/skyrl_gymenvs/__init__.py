"""skyrl-gymenvs: any environment of NovaSky's skyrl-gym (0.4.0) as a skyrl task — the env's ``init`` builds the
instruction, its ``step`` is the agent's ``gym_step`` tool, its reward and metrics the verifier's. Hook
implementations only."""

from skyrl_core import hookimpl


@hookimpl
def register_tools(register):
    from .tools import gym_step_tool

    register(gym_step_tool)


@hookimpl
def register_runtimes(register):
    from .runtime import GymRuntime

    register(GymRuntime)


@hookimpl
def register_instruction_builders(register):
    from .tasks import build_instructions

    register(build_instructions, name="gymenvs")


@hookimpl
def register_verifiers(register):
    from .verifiers import gymenv_reward

    register(gymenv_reward, name="gymenv_reward")


@hookimpl
def register_tasks(register):
    from .tasks import gymenvs_task

    register(gymenvs_task)
