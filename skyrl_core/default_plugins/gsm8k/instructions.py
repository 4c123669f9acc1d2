"""GSM8K instruction builders ``gsm8k`` (system prompt + question) and ``gsm8k_fewshot`` (one worked example)."""

from __future__ import annotations

import copy
import json
from typing import Any

from skyrl_core.tasks import Instance

SYSTEM_PROMPT = (
    "You solve math problems. Work step by step. Use the python tool to do every calculation: write code that "
    "prints the result, then read its output. When you know the final answer, call the finish tool with the "
    "final answer as a plain number (no units, no words)."
)


def build_instruction(instance: Instance, task: Any = None) -> list[dict]:
    """Instruction builder ``gsm8k``: a system message saying how to work, then the question as the user turn.

    Tool schemas and call syntax are not written here: the agent loop renders them through the chat template.
    """
    return [{"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": instance.data["question"]}]


FEWSHOT_SYSTEM_PROMPT = (
    "You are a careful calculator. Do every calculation with the python tool: write code that prints the result. "
    "After you see its output, reply with the final answer as a plain number."
)

# One worked example, in OpenAI chat format: the agent loop writes the call the way the run's parser reads calls.
# Its numbers are made up (not a GSM8K row), so no evaluation question is shown to the model.
FEWSHOT_DEMONSTRATION = (
    {"role": "user", "content": "Calculate 12*7."},
    {"role": "assistant", "content": "", "tool_calls": [
        {"id": "call_0", "type": "function",
         "function": {"name": "python", "arguments": json.dumps({"code": "print(12*7)"})}}]},
    {"role": "tool", "tool_call_id": "call_0", "content": "84"},
    {"role": "assistant", "content": "The answer is 84."},
)


def build_instruction_fewshot(instance: Instance, task: Any = None) -> list[dict]:
    """Instruction builder ``gsm8k_fewshot``: a short system message, one worked example (a python call, its
    output, the answer) and the question. For small models (SmolLM2-135M) that do not call tools from a
    description alone: measured on 24 train calculation steps with the ``codeblock`` parser, the example raised
    the share of trajectories calling python from 22 % to 60 % (temperature 0.7) and 19 % to 83 % (greedy).
    The answer is read from the final message (the example does not use ``finish``).
    """
    return [{"role": "system", "content": FEWSHOT_SYSTEM_PROMPT},
            *copy.deepcopy(FEWSHOT_DEMONSTRATION),
            {"role": "user", "content": instance.data["question"]}]
