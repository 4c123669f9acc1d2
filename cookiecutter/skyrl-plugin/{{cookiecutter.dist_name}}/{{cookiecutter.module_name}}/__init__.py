"""{{ cookiecutter.description }}

Hook implementations only: each hook receives a ``register`` callback, so skyrl knows which plugin registered
what (``skyrl plugins``) and reports name clashes. The implementations live in one module per concept.
"""

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
