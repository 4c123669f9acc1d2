"""Reasoning Gym (``reasoning-gym`` 0.1.25, Apache-2.0) problem families as skyrl tasks.

A family is one of reasoning-gym's procedural generators (``basic_arithmetic``, ``leg_counting``, ...; ~100),
picked by name with its config fields. Problems are generated, never shipped: instance ``n`` of a split is item
``n`` of ``reasoning_gym.create_dataset(family, **config, seed=<split base>, size=size)``.

Split seeds (disjoint by construction): the train split uses base seed ``seed`` and the test split
``2**31 + seed`` (``seed`` is ``data.options.seed``, default 0, and ``seed + size <= 2**31``). Nearly every
family draws item ``n`` from ``random.Random(base + n)``, so train draws from seeds ``[seed, seed + size)`` and
test from ``[2**31 + seed, 2**31 + seed + size)``: no item seed is shared. Different seeds can still pose the
same text in a small family ("Calculate 2 + 3."), which is why the run's split-hygiene check
(``skyrl_core.rollout.clean_eval_split``, docs/training.md "Split hygiene") still compares question texts and
drops such eval items; the plugin's tests measure that overlap per named task.

Instance ``data``: ``question``, ``answer`` (reasoning-gym's reference), ``dataset`` (the family), ``config``
(the family config fields given), ``dataset_seed``, ``size`` and ``index`` (enough to regenerate the item where
it is scored), ``metadata`` (reasoning-gym's, JSON-safe). Ids are ``<split>-<index>``.

Options (``data.options``): ``dataset`` (the family; only for the generic ``reasoning_gym`` task), ``config``
(a mapping of the family's config fields), ``size`` (instances per split, default 500), ``seed`` (default 0).
An unknown family, option or config field, or a config the family rejects, is one ConfigError naming the task
and the culprit with the close valid names.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
from typing import Any

from skyrl_core import DataSpec, Instance, Task
from skyrl_core.errors import ConfigError

SPLITS = ("train", "test")
SEED_SPAN = 2**31
SPLIT_BASE = {"train": 0, "test": SEED_SPAN}
DEFAULT_SIZE = 500
OPTIONS = ("dataset", "config", "size", "seed")
# config fields the loader sets itself (from the split and data.options)
RESERVED_FIELDS = ("seed", "size")


def families() -> list[str]:
    """Every reasoning-gym family name, sorted."""
    import reasoning_gym

    return sorted(reasoning_gym.factory.DATASETS)


def _close(word: str, valid: list[str], n: int = 5) -> str:
    near = difflib.get_close_matches(word, valid, n=n, cutoff=0.5)
    return f"did you mean {', '.join(near)}? " if near else ""


def config_fields(family: str) -> list[str]:
    """The config fields a family accepts (without ``seed`` and ``size``, which the split sets)."""
    import reasoning_gym

    _, config_cls = reasoning_gym.factory.DATASETS[family]
    return [f.name for f in dataclasses.fields(config_cls) if f.name not in RESERVED_FIELDS]


def check_family(family: Any, task: str) -> str:
    """``family`` when it is a reasoning-gym family, else ConfigError naming it and the closest valid names."""
    valid = families()
    if not isinstance(family, str) or family not in valid:
        raise ConfigError(f"task '{task}': unknown reasoning-gym family {family!r}; "
                          f"{_close(str(family), valid)}{len(valid)} families: {', '.join(valid)}")
    return family


def make_dataset(family: str, config: dict[str, Any], seed: int, size: int, task: str = "reasoning_gym"):
    """``reasoning_gym.create_dataset(family, **config, seed=seed, size=size)`` with every failure a ConfigError
    naming the task, the family and the bad field (with the close valid field names)."""
    import reasoning_gym

    check_family(family, task)
    if not isinstance(config, dict):
        raise ConfigError(f"task '{task}': data.options.config must be a mapping of {family} config fields, "
                          f"got {type(config).__name__}")
    fields = config_fields(family)
    for key in config:
        if key not in fields:
            raise ConfigError(f"task '{task}': family '{family}' has no config field {key!r}; "
                              f"{_close(str(key), fields)}valid: {', '.join(fields)}")
    try:
        return reasoning_gym.create_dataset(family, **config, seed=seed, size=size)
    except Exception as exc:  # the family's own validation: AssertionError, ValueError, TypeError
        raise ConfigError(f"task '{task}': reasoning-gym rejected the config {json.dumps(config, default=str)} "
                          f"of family '{family}': {type(exc).__name__}: {exc or 'a config check failed'}") from None


def _json_safe(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


def load_family(spec: DataSpec, family: str | None = None, task: str = "reasoning_gym",
                base_config: dict[str, Any] | None = None) -> list[Instance]:
    """Generate one split of a family as instances (see the module docstring for seeds, data and options).

    Only the first ``offset + limit`` items are generated when the spec neither shuffles nor leaves the limit
    open. Raises ConfigError for an unknown split, option, family or config field, or a config the family
    rejects."""
    if spec.split not in SPLITS:
        raise ConfigError(f"task '{task}' has no split {spec.split!r}; valid: {', '.join(SPLITS)}")
    options = dict(spec.options)
    allowed = OPTIONS if family is None else tuple(o for o in OPTIONS if o != "dataset")
    for key in options:
        if key not in allowed:
            raise ConfigError(f"task '{task}': unknown data.options key {key!r}; {_close(key, list(allowed))}"
                              f"valid: {', '.join(allowed)}")
    if family is None:
        if "dataset" not in options:
            raise ConfigError(f"task '{task}' needs data.options.dataset, a reasoning-gym family name "
                              f"(e.g. basic_arithmetic, leg_counting; `python -c \"import reasoning_gym; "
                              f"print(sorted(reasoning_gym.factory.DATASETS))\"` lists them)")
        family = options["dataset"]
    config = {**(base_config or {}), **(options.get("config") or {})}
    size, seed = options.get("size", DEFAULT_SIZE), options.get("seed", 0)
    if not (isinstance(size, int) and isinstance(seed, int) and size > 0 and seed >= 0
            and seed + size <= SEED_SPAN):
        raise ConfigError(f"task '{task}': data.options size ({size!r}) and seed ({seed!r}) must be integers, "
                          f"size >= 1, seed >= 0, seed + size <= 2**31 (so train and test seeds never meet)")
    base = SPLIT_BASE[spec.split] + seed
    dataset = make_dataset(family, config, base, size, task)
    count = size if spec.shuffle or spec.limit is None else min(size, spec.offset + spec.limit)
    instances = []
    for index in range(count):
        item = dataset[index]
        instances.append(Instance(id=f"{spec.split}-{index}", data={
            "question": item["question"], "answer": str(item["answer"]), "dataset": family,
            "config": _json_safe(config), "dataset_seed": base, "size": size, "index": index,
            "metadata": _json_safe(item.get("metadata", {}))}))
    return instances


SYSTEM_PROMPT = (
    "Solve the problem. Use the python tool for every calculation: write code that prints the result, then read "
    "its output. When you know the answer, call the finish tool with only the final answer, written exactly in "
    "the format the question asks for."
)


def build_instruction(instance: Instance, task: Any = None) -> list[dict]:
    """Instruction builder ``reasoning_gym``: a system message (use python, then finish with the bare answer) and
    the generated question as the user turn. Tool schemas are rendered by the agent loop, not here."""
    return [{"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": instance.data["question"]}]


FEWSHOT_SYSTEM_PROMPT = (
    "You are a careful solver. Do every calculation with the python tool: write code that prints the result. "
    "After you see its output, reply with the final answer only."
)

# One worked example in OpenAI chat format (the agent loop writes the call the way the run's parser reads calls).
# Its numbers (three digits) are outside the named tasks' configs, so it is none of their problems. The answer is
# bare: reasoning-gym's default scorer gives an answer that merely contains the reference partial credit only.
FEWSHOT_DEMONSTRATION = (
    {"role": "user", "content": "Calculate 123 * 7 - 450."},
    {"role": "assistant", "content": "", "tool_calls": [
        {"id": "call_0", "type": "function",
         "function": {"name": "python", "arguments": json.dumps({"code": "print(123 * 7 - 450)"})}}]},
    {"role": "tool", "tool_call_id": "call_0", "content": "411"},
    {"role": "assistant", "content": "411"},
)


def build_instruction_fewshot(instance: Instance, task: Any = None) -> list[dict]:
    """Instruction builder ``reasoning_gym_fewshot``: a short system message, one worked example (a python call,
    its output, the bare answer) and the question; for small models that do not call tools from a description
    alone. The answer is then read from the final message (``finish`` is optional)."""
    return [{"role": "system", "content": FEWSHOT_SYSTEM_PROMPT},
            *[dict(m) for m in FEWSHOT_DEMONSTRATION],
            {"role": "user", "content": instance.data["question"]}]


def family_task(name: str, family: str | None, description: str, config: dict[str, Any] | None = None) -> Task:
    """A Task over one family (``family`` None: the generic task, the family comes from data.options.dataset),
    with the python and finish tools, the ``reasoning_gym_score`` verifier and the sandbox runtime."""
    def load(spec: DataSpec) -> list[Instance]:
        return load_family(spec, family, name, config)

    load.__doc__ = f"Loader of task '{name}': see skyrl_reasoning_gym.tasks.load_family."
    return Task(name=name, description=description, load=load, instruction_builder="reasoning_gym",
                tools=("python", "finish"), verifier="reasoning_gym_score", runtime="sandbox",
                default_data=DataSpec(split="train"), content_fields=("question",))


GENERIC_TASK = family_task(
    "reasoning_gym", None,
    "Any reasoning-gym family by name (data.options.dataset) and config (data.options.config); generated "
    "problems, train and test seeds disjoint; scored by the family's own score_answer")

# A few families under their own names, with configs small enough for a 135M model to sometimes succeed.
NAMED_TASKS = (
    family_task("rg_basic_arithmetic", "basic_arithmetic",
                "reasoning-gym basic_arithmetic: two 1-digit numbers added or multiplied (a small problem space)",
                {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1, "operators": ("+", "*"),
                 "allow_parentheses": False, "allow_negation": False}),
    family_task("rg_chain_sum", "chain_sum", "reasoning-gym chain_sum: sums of 2-3 numbers of 1-2 digits",
                {"min_terms": 2, "max_terms": 3, "min_digits": 1, "max_digits": 2}),
    family_task("rg_leg_counting", "leg_counting", "reasoning-gym leg_counting: legs of 1-2 kinds of animal",
                {"min_animals": 1, "max_animals": 2, "max_instances": 5}),
    family_task("rg_gcd", "gcd", "reasoning-gym gcd: greatest common divisor of two numbers up to 100",
                {"min_numbers": 2, "max_numbers": 2, "min_value": 2, "max_value": 100}),
)
