"""The ``gymenvs`` task: any environment in skyrl-gym's registry, by id, as a skyrl task.

Data (``data`` / ``eval_data``)::

    data: {options: {env: gsm8k_multi_turn}}                  # the plugin's shipped rows for that env
    data: {path: rows.jsonl, options: {env: text2sql, env_config: {db_path: /data/sql}, max_turns: 5}}

``path`` is a JSONL (or ``.parquet``) file of rows in skyrl-gym's dataset format: ``prompt`` (chat messages),
``reward_spec`` (``ground_truth``), ``extra_info`` and the env's own fields (``db_id``, ``data`` for text2sql);
a row may name its own ``env_class``. Without a path, the shipped rows of ``gsm8k_multi_turn``, ``search`` or
``text2sql`` are read (``data/``, see ``data/SOURCE.md``). ``options``: ``env`` (a registered id; required unless
every row has ``env_class``), ``env_config`` (the env's config, checked against its ``*Config`` dataclass),
``max_turns`` (the env's turn limit, written into each row). Every env id is checked at load: an unknown one is
one ConfigError listing the registered ids.

The instruction builder is the env's ``init``: the row's prompt goes through it (on a throwaway env: the runtime
calls ``init`` again on the trajectory's own env), and one system line says how to act (the ``gym_step`` tool).
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Any

from skyrl_core import DataSpec, Instance, Task
from skyrl_core.errors import ConfigError

from .envs import check_env_id, make_env

SHIPPED = ("gsm8k_multi_turn", "search", "text2sql")
OPTIONS = ("env", "env_config", "max_turns")
ACT_HINT = ("You act by calling the tool `gym_step`; its `action` argument is your whole reply, written in the "
            "format the instructions below ask for (their tags or markers). The result is the environment's answer.")


def _rows(spec: DataSpec, env_id: str | None) -> tuple[list[dict], str]:
    if spec.path:
        path = Path(spec.path)
        if not path.is_file():
            raise ConfigError(f"task 'gymenvs': data.path {spec.path!r} is not a file")
        if path.suffix == ".parquet":
            import pandas as pd

            return pd.read_parquet(path).to_dict(orient="records"), str(path)
        text, where = path.read_text(encoding="utf-8"), str(path)
    else:
        if env_id not in SHIPPED:
            raise ConfigError(f"task 'gymenvs': no shipped rows for env {env_id!r}; set data.path to a JSONL of "
                              f"skyrl-gym rows, or use an env with shipped rows: {', '.join(SHIPPED)}")
        text = resources.files(__package__).joinpath("data", f"{env_id}.jsonl").read_text(encoding="utf-8")
        where = f"{env_id}.jsonl (shipped)"
    rows = []
    for n, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise ConfigError(f"task 'gymenvs': {where} line {n} is not JSON: {exc.msg}") from None
    return rows, where


def load(spec: DataSpec) -> list[Instance]:
    """The instances of ``spec`` (see the module docstring): ``data = {env, env_config, row}``.

    Raises ConfigError naming the option, file or row at fault (an unknown option, an unknown env id with the
    registered ones, a row without ``prompt`` messages)."""
    options = dict(spec.options)
    bad = sorted(set(options) - set(OPTIONS))
    if bad:
        raise ConfigError(f"task 'gymenvs': unknown data.options key(s) {', '.join(bad)}; valid: {', '.join(OPTIONS)}")
    env_id = options.get("env")
    if env_id is not None:
        check_env_id(env_id, "task 'gymenvs' data.options.env")
    env_config = options.get("env_config") or {}
    if not isinstance(env_config, dict):
        raise ConfigError(f"task 'gymenvs': data.options.env_config must be a mapping, got {env_config!r}")
    rows, where = _rows(spec, env_id)
    instances = []
    for n, row in enumerate(rows):
        row = dict(row)
        row_env = env_id or row.get("env_class")
        if row_env is None:
            raise ConfigError(f"task 'gymenvs': {where} row {n} names no env_class and data.options.env is unset")
        check_env_id(row_env, f"task 'gymenvs': {where} row {n}")
        prompt = row.get("prompt")
        if not isinstance(prompt, list) or not all(isinstance(m, dict) and "content" in m for m in prompt):
            raise ConfigError(f"task 'gymenvs': {where} row {n}: 'prompt' must be a list of chat messages")
        if "max_turns" in options:
            row["max_turns"] = int(options["max_turns"])
        row_id = str(row.pop("id", None) or f"{row_env}-{spec.split}-{n}")
        instances.append(Instance(id=row_id, data={"env": row_env, "env_config": dict(env_config), "row": row}))
    return instances


def build_instructions(instance: Instance, task: Any = None) -> list[dict]:
    """The env's ``init`` on the row's prompt (its first messages), after a system line naming the tool."""
    env = make_env(instance.data)
    try:
        messages, _ = env.init([dict(m) for m in instance.data["row"]["prompt"]])
    finally:
        env.close()
    messages = [dict(m) for m in messages]
    if messages and messages[0].get("role") == "system":
        messages[0]["content"] = f"{ACT_HINT}\n\n{messages[0]['content']}"
        return messages
    return [{"role": "system", "content": ACT_HINT}, *messages]


gymenvs_task = Task(
    name="gymenvs",
    description="Any registered skyrl_gym environment (data.options.env: gsm8k_multi_turn, search, text2sql, ...): "
                "its init builds the prompt, its step is the gym_step tool, its reward the verifier's",
    load=load,
    instruction_builder="gymenvs",
    tools=("gym_step",),
    verifier="gymenv_reward",
    runtime="gymenv",
    default_data=DataSpec(split="test", options={"env": "gsm8k_multi_turn"}),
)
