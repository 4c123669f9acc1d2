"""Building a ``skyrl_gym`` environment for one instance: the id checked against skyrl-gym's registry, its config
filled from the env's own config dataclass, and the plugin's shipped assets (the text2sql database, the search
retriever) put in place where the config does not name the user's own.

An environment is made with ``skyrl_gym.make(id, env_config=<DictConfig>, extras=<the instance's row>)`` — how
skyrl-gym 0.4.0's envs take their arguments (``BaseTextEnv.__init__(env_config, extras)``).
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import os
import shutil
import sqlite3
import tempfile
from importlib import resources
from pathlib import Path
from typing import Any

from skyrl_core.errors import ConfigError

SQL_DB_ID = "concert"  # the shipped database (data/concert.sql), laid out as skyrl-gym's text2sql env reads it
SQL_LAYOUT = {"spider": "spider/database", "bird": "bird/train/train_databases", "synsql": "SynSQL-2.5M/databases"}


def registered_ids() -> list[str]:
    """The env ids in skyrl-gym's registry (importing ``skyrl_gym`` registers its built-in envs)."""
    import skyrl_gym

    return sorted(skyrl_gym.registry)


def check_env_id(env_id: Any, where: str) -> str:
    """``env_id`` when skyrl-gym has registered it; else ConfigError naming ``where`` and every valid id."""
    valid = registered_ids()
    if not isinstance(env_id, str) or env_id not in valid:
        raise ConfigError(f"{where}: unknown skyrl_gym env id {env_id!r}; registered: {', '.join(valid)}")
    return env_id


def env_config(env_id: str, overrides: dict[str, Any]) -> Any:
    """The ``env_config`` for ``env_id``: the env module's ``*Config`` dataclass defaults (e.g. ``SearchEnvConfig``,
    ``Text2SQLEnvConfig``) updated with ``overrides``, as an OmegaConf DictConfig (what the envs expect). An env
    without such a dataclass gets ``overrides`` alone. Raises ConfigError on a key the dataclass does not have."""
    from omegaconf import OmegaConf
    import skyrl_gym

    entry = skyrl_gym.spec(env_id).entry_point
    defaults: dict[str, Any] = {}
    if isinstance(entry, str):
        module = importlib.import_module(entry.split(":")[0])
        classes = [v for k, v in vars(module).items() if k.endswith("Config") and dataclasses.is_dataclass(v)
                   and getattr(v, "__module__", None) == module.__name__]
        if classes:
            defaults = dataclasses.asdict(classes[0]())
            bad = sorted(set(overrides) - set(defaults))
            if bad:
                raise ConfigError(f"data.options.env_config for env {env_id!r}: unknown key(s) {', '.join(bad)}; "
                                  f"valid: {', '.join(sorted(defaults))}")
    return OmegaConf.create({**defaults, **overrides})


@functools.lru_cache(maxsize=None)
def shipped_sql_root() -> str:
    """A directory holding the shipped database in every layout text2sql reads (``spider/database/concert/
    concert.sqlite``, ...), built once per process from ``data/concert.sql``; never handed to an agent's env
    (each trajectory's runtime works on its own copy, :func:`copy_sql_root`)."""
    script = resources.files(__package__).joinpath("data", "concert.sql").read_text(encoding="utf-8")
    root = Path(tempfile.mkdtemp(prefix="skyrl-gymenvs-sql-"))
    for layout in SQL_LAYOUT.values():
        folder = root / layout / SQL_DB_ID
        folder.mkdir(parents=True)
        conn = sqlite3.connect(folder / f"{SQL_DB_ID}.sqlite")
        try:
            conn.executescript(script)
            conn.commit()
        finally:
            conn.close()
    return str(root)


def copy_sql_root(into: str) -> str:
    """A private copy of the shipped database tree under ``into``; returns its root."""
    target = os.path.join(into, "sql")
    shutil.copytree(shipped_sql_root(), target)
    return target


def uses_shipped_sql(env_id: str, overrides: dict[str, Any]) -> bool:
    return env_id == "text2sql" and "db_path" not in overrides


def uses_shipped_retriever(env_id: str, overrides: dict[str, Any]) -> bool:
    return env_id == "search" and "search_url" not in overrides


def make_env(data: dict[str, Any], sql_root: str | None = None) -> Any:
    """A new environment for one instance's ``data`` (``env``, ``env_config``, ``row``): the shipped database
    at ``sql_root`` (or the process's shared build) and the shipped retriever where the config names neither."""
    import skyrl_gym

    env_id = data["env"]
    overrides = dict(data.get("env_config") or {})
    if uses_shipped_sql(env_id, overrides):
        overrides["db_path"] = sql_root or shipped_sql_root()
    if uses_shipped_retriever(env_id, overrides):
        from .retriever import shipped_retriever_url

        overrides["search_url"] = shipped_retriever_url()
    extras = dict(data["row"])
    extras.setdefault("extra_info", {})
    return skyrl_gym.make(env_id, env_config=env_config(env_id, overrides), extras=extras)
