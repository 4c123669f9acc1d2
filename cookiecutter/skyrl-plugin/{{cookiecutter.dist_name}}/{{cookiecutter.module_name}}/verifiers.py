"""The example verifier: reward 1 when the trajectory's answer is exactly the true count.

Async, as verifiers should be: one that runs tests or calls a server awaits them without blocking the other
trajectories. It reads the answer the ``finish`` tool recorded, else the final assistant message, and accepts
only an answer holding exactly one integer — "2 or 3" or a list of every number earns nothing, so a policy cannot
raise its reward by hedging.
"""

import re

from skyrl_core import VerifierResult

_INT = re.compile(r"(?<![\d.])-?\d+(?![\d.])")


def _final_text(trajectory) -> str:
    if trajectory.answer not in (None, ""):
        return str(trajectory.answer)
    for message in reversed(trajectory.messages):
        if message.get("role") == "assistant" and message.get("content"):
            return str(message["content"])
    return ""


async def exact_count(trajectory, runtime, instance) -> VerifierResult:
    """Verifier ``{{ cookiecutter.entry_point }}_exact``: ``reward`` 1.0 or 0.0; ``metrics`` say what was read."""
    numbers = _INT.findall(_final_text(trajectory))
    parsed = int(numbers[0]) if len(numbers) == 1 else None
    correct = parsed is not None and parsed == instance.data["answer"]
    return VerifierResult(reward=float(correct), metrics={"parsed_answer": parsed, "numbers_found": len(numbers),
                                                         "correct": correct})
