"""{{ cookiecutter.description }} Hook implementations only."""

from skyrl_core import hookimpl

from .tasks import build_instructions, count_task
from .tools import count_letters_tool
from .verifiers import exact_count


@hookimpl
def register_tools(register):
    register(count_letters_tool)


@hookimpl
def register_instruction_builders(register):
    register(build_instructions, name="{{ cookiecutter.entry_point }}_count")


@hookimpl
def register_verifiers(register):
    register(exact_count, name="{{ cookiecutter.entry_point }}_exact")


@hookimpl
def register_tasks(register):
    register(count_task)
