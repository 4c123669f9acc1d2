"""The example task: how many times does a letter occur in a word?"""

from skyrl_core import DataSpec, Instance, Task

WORDS = ["banana", "mississippi", "committee", "bookkeeper", "assessment", "parallel", "referee", "tattoo"]


def load(spec: DataSpec) -> list[Instance]:
    rows = []
    for i, word in enumerate(WORDS):
        letter = max(set(word), key=word.count)
        rows.append(Instance(id=str(i), data={"word": word, "letter": letter, "answer": word.count(letter)}))
    return rows


def build_instructions(instance: Instance, task: Task) -> list[dict]:
    return [
        {"role": "system", "content": "Use the tools to answer, then call finish with the number."},
        {"role": "user", "content": f"How many times does '{instance.data['letter']}' occur in "
                                    f"'{instance.data['word']}'?"},
    ]


count_task = Task(
    name="{{ cookiecutter.entry_point }}_count",
    description="Count a letter in a word (example task from the skyrl plugin template).",
    load=load,
    instruction_builder="{{ cookiecutter.entry_point }}_count",
    tools=("{{ cookiecutter.entry_point }}_count_letters", "finish"),
    verifier="{{ cookiecutter.entry_point }}_exact",
    runtime="local",
)
