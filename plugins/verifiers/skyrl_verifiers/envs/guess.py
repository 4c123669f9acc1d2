"""``skyrl-guess``: multi-turn. The env thinks of a number from 1 to 16; after each guess its scripted user says
whether its number is higher or lower (or ``correct``), for at most four guesses (the env's ``run`` drives the turns, so the next
user message depends on the model's reply). Rewards: ``solved`` (weight 1: a guess hit the number), metric
``guesses`` (guesses made).
"""

from __future__ import annotations

import random
import re

import verifiers.v1 as vf

MAX_GUESSES = 4
SYSTEM = ("Guess the number I am thinking of, from 1 to 16. Reply with one number only. After each guess I say "
          "higher, lower or correct.")
_NUMBER = re.compile(r"-?\d+")


def first_number(text: str | None) -> int | None:
    found = _NUMBER.search(text or "")
    return int(found.group()) if found else None


def feedback(guess: int | None, secret: int) -> str:
    """The scripted user's answer to one reply."""
    if guess is None:
        return "That is not a number. Reply with one number from 1 to 16."
    if guess == secret:
        return "correct"
    return f"My number is {'higher' if guess < secret else 'lower'} than {guess}."


class GuessData(vf.TaskData):
    answer: int
    """The secret number."""


class GuessTask(vf.Task[GuessData]):
    @vf.reward(weight=1.0)
    async def solved(self, trace: vf.Trace) -> float:
        return float(any(first_number(m.content) == self.data.answer for m in trace.assistant_messages))

    @vf.metric
    async def guesses(self, trace: vf.Trace) -> float:
        return float(len(trace.assistant_messages))


class GuessEnv(vf.SingleAgentEnv):
    """The scripted user: one answer per guess, until the number is hit or the guesses run out."""

    async def run(self, task, agents):
        async with agents.agent.interaction(task) as interaction:
            segment = await interaction.turn()
            for _ in range(MAX_GUESSES - 1):
                if segment.terminated:
                    break
                said = feedback(first_number(segment.last_reply), task.data.answer)
                if said == "correct":
                    break
                segment = await interaction.turn(said)


SEEDS = {"train": 1, "test": 2}


class GuessConfig(vf.TasksetConfig):
    dataset_split: str = "train"
    """``train`` or ``test``: each draws its numbers from its own seed (a number may recur; the prompt is the same
    for every task, so instances differ by their secret only)."""
    size: int = 6


class GuessTaskset(vf.Taskset[GuessTask, GuessConfig]):
    def load(self) -> list[GuessTask]:
        if self.config.dataset_split not in SEEDS:
            raise ValueError(f"skyrl-guess: dataset_split {self.config.dataset_split!r}; valid: {', '.join(SEEDS)}")
        rng = random.Random(SEEDS[self.config.dataset_split])
        return [GuessTask(GuessData(prompt="I am thinking of a number from 1 to 16. Your guess?", system_prompt=SYSTEM,
                                    answer=rng.randint(1, 16)), self.config.task)
                for _ in range(self.config.size)]


__all__ = ["GuessTaskset", "GuessEnv"]
