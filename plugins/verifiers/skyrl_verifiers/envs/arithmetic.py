"""``skyrl-arithmetic``: single-turn. One sum of two or three integers; the reply puts the result inside
``<answer></answer>``. Rewards: ``correct`` (weight 1: the reply's answer equals the sum — the integer in its last
``<answer>`` tag, or without a tag its last integer, so a small model that skips the tags still gets a signal),
metric ``tagged`` (an ``<answer>`` tag was present). Rows are generated from a seed per split, so train and test never share a sum.
"""

from __future__ import annotations

import random
import re

import verifiers.v1 as vf

SYSTEM = "Add the numbers. Reply with the result inside <answer></answer> tags, for example <answer>12</answer>."
_ANSWER = re.compile(r"<answer>\s*(-?\d+)\s*</answer>")
_INTEGER = re.compile(r"-?\d+")
SEEDS = {"train": 1, "test": 2}


def tagged_integer(text: str | None) -> int | None:
    """The integer inside the last ``<answer>`` tag of ``text``, else None."""
    found = _ANSWER.findall(text or "")
    return int(found[-1]) if found else None


def answer_of(text: str | None) -> int | None:
    """The reply's answer: :func:`tagged_integer`, else the last integer in ``text``, else None."""
    tagged = tagged_integer(text)
    if tagged is not None:
        return tagged
    found = _INTEGER.findall(text or "")
    return int(found[-1]) if found else None


class ArithmeticData(vf.TaskData):
    answer: int
    """The sum."""


class ArithmeticTask(vf.Task[ArithmeticData]):
    @vf.stop
    async def answered(self, trace: vf.Trace) -> bool:
        return trace.num_turns >= 1  # one reply, no second turn

    @vf.reward(weight=1.0)
    async def correct(self, trace: vf.Trace) -> float:
        return float(answer_of(trace.last_reply) == self.data.answer)

    @vf.metric
    async def tagged(self, trace: vf.Trace) -> float:
        return float(tagged_integer(trace.last_reply) is not None)


class ArithmeticConfig(vf.TasksetConfig):
    dataset_split: str = "train"
    """``train`` or ``test``: each draws its sums from its own seed."""
    size: int = 8
    """How many sums."""


class ArithmeticTaskset(vf.Taskset[ArithmeticTask, ArithmeticConfig]):
    def load(self) -> list[ArithmeticTask]:
        split = self.config.dataset_split
        if split not in SEEDS:
            raise ValueError(f"skyrl-arithmetic: dataset_split {split!r}; valid: {', '.join(SEEDS)}")
        rng = random.Random(SEEDS[split])
        tasks = []
        for _ in range(self.config.size):
            terms = [rng.randint(1, 20) for _ in range(rng.choice((2, 3)))]
            tasks.append(ArithmeticTask(ArithmeticData(prompt=" + ".join(map(str, terms)) + " = ?",
                                                       system_prompt=SYSTEM, answer=sum(terms)),
                                        self.config.task))
        return tasks


__all__ = ["ArithmeticTaskset"]
