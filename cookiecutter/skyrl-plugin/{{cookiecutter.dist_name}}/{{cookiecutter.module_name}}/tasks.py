"""The example task: how many times does a letter occur in a word?

The rows are fixed files shipped in the package (``data/train.jsonl``, ``data/test.jsonl``): the word, the letter
asked for and the answer are all data, so the same split gives the same questions in every process and run (a
resumed run and the stage-cost memory rely on that). The two splits share no word.
"""

import json
from importlib import resources

from skyrl_core import DataSpec, Instance, Task

SPLITS = ("train", "test")


def load(spec: DataSpec) -> list[Instance]:
    """Read one split's rows as instances (``id``, ``data = {word, letter, answer}``).

    Raises ValueError naming the valid splits when ``spec.split`` is another name.
    """
    if spec.split not in SPLITS:
        raise ValueError(f"task '{{ cookiecutter.entry_point }}_count' has no split {spec.split!r}; "
                         f"valid: {', '.join(SPLITS)}")
    text = resources.files(__package__).joinpath("data", f"{spec.split}.jsonl").read_text(encoding="utf-8")
    rows = [json.loads(line) for line in text.splitlines() if line.strip()]
    return [Instance(id=row.pop("id"), data=row) for row in rows]


def build_instructions(instance: Instance, task: Task) -> list[dict]:
    """The instruction builder: the opening messages of one trajectory (OpenAI chat format)."""
    return [
        {"role": "system", "content": "Answer the question. Use the tools when they help, then call finish "
                                      "with the number."},
        {"role": "user", "content": f"How many times does the letter '{instance.data['letter']}' occur in "
                                    f"the word '{instance.data['word']}'?"},
    ]


count_task = Task(
    name="{{ cookiecutter.entry_point }}_count",
    description="Count a letter in a word (16 train, 8 test rows; example task from the skyrl plugin template).",
    load=load,
    instruction_builder="{{ cookiecutter.entry_point }}_count",
    tools=("{{ cookiecutter.entry_point }}_count_letters", "finish"),
    verifier="{{ cookiecutter.entry_point }}_exact",
    runtime="sandbox",            # every trajectory gets its own bubblewrap sandbox (see docs/runtimes.md)
    default_data=DataSpec(split="train"),
)
