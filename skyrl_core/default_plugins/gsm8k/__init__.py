"""Built-in GSM8K tasks: ``gsm8k`` (word problems) and ``gsm8k_steps`` (their calculation steps), the ``gsm8k``
and ``gsm8k_fewshot`` instruction builders and the ``gsm8k_answer`` verifier. The logic lives beside this
module: ``dataset`` (loading, numbers), ``instructions``, ``verifiers``; the data in ``data/``."""

from __future__ import annotations

from skyrl_core.hookspecs import hookimpl
from skyrl_core.tasks import DataSpec, Task

from .dataset import load_gsm8k, load_gsm8k_steps
from .instructions import build_instruction, build_instruction_fewshot
from .verifiers import gsm8k_answer

GSM8K = Task(
    name="gsm8k",
    description="GSM8K grade-school math word problems (test 1319, train 7473; bundled, MIT); reward 1 when the "
                "final number is right",
    load=load_gsm8k,
    instruction_builder="gsm8k",
    tools=("python", "finish"),
    verifier="gsm8k_answer",
    runtime="sandbox",
    default_data=DataSpec(split="test"),
    content_fields=("question",),
)

GSM8K_STEPS = Task(
    name="gsm8k_steps",
    description="The <<48/2=24>> calculation steps of GSM8K's worked answers, each posed as a question "
                "('Calculate 48/2.'); easier, real data",
    load=load_gsm8k_steps,
    instruction_builder="gsm8k",
    tools=("python", "finish"),
    verifier="gsm8k_answer",
    runtime="sandbox",
    default_data=DataSpec(split="train"),
    content_fields=("question",),
)


@hookimpl(trylast=True)
def register_tasks(register):
    register(GSM8K)
    register(GSM8K_STEPS)


@hookimpl(trylast=True)
def register_instruction_builders(register):
    register(build_instruction, name="gsm8k")
    register(build_instruction_fewshot, name="gsm8k_fewshot")


@hookimpl(trylast=True)
def register_verifiers(register):
    register(gsm8k_answer, name="gsm8k_answer")
