"""verifiers (v1) environments as skyrl tasks: an installed taskset by id, its rollout driven through the
recording gateway (docs/gateway.md), its rubric as the verifier (docs/plugins/verifiers.md).

Hook implementations only: each hook receives a ``register`` callback, so skyrl knows which plugin registered
what (``skyrl plugins``) and reports name clashes. The implementations live in one module per concept.
"""

from skyrl_core import hookimpl

from .tasks import build_instructions, verifiers_task
from .verifiers import rubric_score


@hookimpl
def register_instruction_builders(register):
    register(build_instructions, name="verifiers_prompt")


@hookimpl
def register_verifiers(register):
    register(rubric_score, name="verifiers_rubric")


@hookimpl
def register_tasks(register):
    register(verifiers_task)
