"""skyrl-reasoning-gym: reasoning-gym's procedural problem families as skyrl tasks, scored by reasoning-gym's own
``score_answer`` in a sandbox.

Hook implementations only: each hook receives a ``register`` callback, so skyrl knows which plugin registered
what (``skyrl plugins``) and reports name clashes. The logic lives in ``tasks`` (families, seeds, loaders,
instruction builders) and ``verifiers`` (the scorer); the example config in ``examples/``. The tools are the
core's ``python`` and ``finish``.
"""

from skyrl_core import hookimpl

from .tasks import GENERIC_TASK, NAMED_TASKS, build_instruction, build_instruction_fewshot
from .verifiers import reasoning_gym_score


@hookimpl
def register_instruction_builders(register):
    register(build_instruction, name="reasoning_gym")
    register(build_instruction_fewshot, name="reasoning_gym_fewshot")


@hookimpl
def register_verifiers(register):
    register(reasoning_gym_score, name="reasoning_gym_score")


@hookimpl
def register_tasks(register):
    register(GENERIC_TASK)
    for task in NAMED_TASKS:
        register(task)
