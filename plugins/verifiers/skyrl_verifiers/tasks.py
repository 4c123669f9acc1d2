"""The ``verifiers`` task: any installed verifiers (v1) taskset, by id, as a skyrl task.

``data.name`` is the taskset's id (``reverse-text``, ``glossary``, ...); ``data.options`` are its config fields
(``TasksetConfig``: a local ``dataset_name``, a ``dataset_split``, ...; ``data.split`` fills ``dataset_split`` when
the taskset has that field and options do not set it; ``shipped_data: NAME`` sets ``dataset_name`` to the rows this
plugin ships in ``data/NAME/``, written for its tests and examples). Each of the taskset's tasks is one instance. The run stage
is an external harness (``Task.harness``, docs/gateway.md): the environment's own rollout, its model calls sent to
the trajectory's gateway session; the eval stage is the ``verifiers_rubric`` verifier.
"""

from __future__ import annotations

from importlib import resources

from skyrl_core import DataSpec, Instance, Task

from .environments import environment, run_episode


def load(spec: DataSpec) -> list[Instance]:
    """The taskset ``spec.name``'s tasks as instances (``id`` ``<taskset>-<index>``; ``data``: ``taskset``,
    ``options``, ``index`` in the taskset, ``prompt`` — the task's prompt text, for display).

    Raises ValueError when ``data.name`` is missing, or (from :func:`~.environments.load_environment`) naming the
    taskset when it is not installed or its options do not validate."""
    if not spec.name:
        raise ValueError("task 'verifiers' needs data.name: the id of an installed verifiers taskset "
                         "(e.g. reverse-text)")
    options = dict(spec.options)
    shipped = options.pop("shipped_data", None)
    if shipped is not None:  # rows this plugin ships (data/<name>/<split>.jsonl) as the taskset's local dataset
        root = resources.files(__package__).joinpath("data", str(shipped))
        if not root.is_dir():
            raise ValueError(f"task 'verifiers': data.options.shipped_data {shipped!r} is not shipped; valid: "
                             f"{', '.join(sorted(p.name for p in resources.files(__package__).joinpath('data').iterdir()))}")
        options["dataset_name"] = str(root)
    take = None if spec.limit is None else spec.offset + spec.limit  # bounds an endless taskset; select slices
    env, tasks = environment(spec.name, options, take)
    if "dataset_split" in type(env.config.taskset).model_fields and "dataset_split" not in options and spec.split:
        options["dataset_split"] = spec.split
        env, tasks = environment(spec.name, options, take)
    return [Instance(id=f"{spec.name}-{i}", data={"taskset": spec.name, "options": options, "take": take,
                                                  "index": i, "prompt": task.data.prompt_text})
            for i, task in enumerate(tasks)]


def build_instructions(instance: Instance, task: Task) -> list[dict]:
    """The trajectory's opening messages before the run: the verifiers task's prompt (the harness sends its own;
    the trajectory's messages become what the gateway recorded)."""
    return [{"role": "user", "content": instance.data["prompt"]}]


verifiers_task = Task(
    name="verifiers",
    description="An installed verifiers (v1) taskset by id (data.name), run by its environment through the "
                "recording gateway and scored by its rubric.",
    load=load,
    instruction_builder="verifiers_prompt",
    tools=(),
    verifier="verifiers_rubric",
    runtime="local",  # the episode runs in verifiers' own runtime (a subprocess); skyrl's holds nothing
    default_data=DataSpec(split="train"),
    harness=run_episode,
)
