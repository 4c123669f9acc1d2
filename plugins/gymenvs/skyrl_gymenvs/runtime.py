"""The ``gymenv`` runtime: one ``skyrl_gym`` environment object per trajectory, and what it has reported.

``prepare(instance)`` makes the env (:func:`skyrl_gymenvs.envs.make_env`) and calls its ``init`` with the row's
prompt; :meth:`GymRuntime.step` runs the env's ``step`` on one action text (in a worker thread: the search env
calls HTTP, the sql env runs SQLite) and records its reward, ``done`` and metadata. The verifier reads those
records from here, where the agent cannot write: the agent's only input is the action text that the env parses.

A text2sql env on the shipped database gets a private copy of it in the runtime's own temporary directory, so
whatever SQL an agent runs (the env wraps each query in a transaction it rolls back) never reaches the shipped
file or another trajectory's copy; and SQL that does more than read never reaches the env
(:mod:`skyrl_gymenvs.sqlguard`: a rolled-back ``ATTACH`` still creates its file). ``exec`` runs no command: these environments are in-process text envs.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import threading
from typing import Any

from skyrl_core.runtime import ExecResult, Runtime, RuntimeSpec

from .envs import copy_sql_root, make_env, uses_shipped_sql
from .sqlguard import refused_sql


class EnvDone(RuntimeError):
    """``step`` after the env said ``done``: no further action is taken or rewarded."""


class ActionRefused(ValueError):
    """An action the runtime does not pass to the env (text2sql SQL that does more than read: :mod:`.sqlguard`);
    no step is taken, nothing is rewarded."""


class GymRuntime(Runtime):
    """A trajectory's skyrl-gym environment. After :meth:`prepare`: ``env`` (the env object), ``init_messages``
    (what its ``init`` returned), and after each :meth:`step` the lists ``rewards`` (floats), ``infos`` (its
    metadata dicts), ``done`` (bool) and ``step_errors`` (exceptions the env raised, as text)."""

    name = "gymenv"
    isolation = "in-process"

    def __init__(self, spec: RuntimeSpec | None = None, **kwargs: Any) -> None:
        super().__init__(spec or RuntimeSpec(type=self.name), **kwargs)
        self.env: Any = None
        self.env_id: str | None = None
        self.init_messages: list[dict] = []
        self.init_info: dict[str, Any] = {}
        self.rewards: list[float] = []
        self.infos: list[dict[str, Any]] = []
        self.step_errors: list[str] = []
        self.done = False
        self.refused = 0
        self._dir: str | None = None
        self._lock = threading.Lock()

    async def start(self) -> None:
        self._dir = tempfile.mkdtemp(prefix="skyrl-gymenv-")

    async def prepare(self, instance: Any) -> None:
        data = instance.data
        if "env" not in data or "row" not in data:
            raise ValueError(f"instance {instance.id!r} is not a gymenvs instance (it needs 'env' and 'row'); "
                             f"the gymenv runtime serves only the gymenvs task")
        self.env_id = data["env"]

        def build() -> None:
            sql_root = None
            if uses_shipped_sql(data["env"], dict(data.get("env_config") or {})):
                sql_root = copy_sql_root(self._dir)
            env = make_env(data, sql_root=sql_root)
            messages, info = env.init([dict(m) for m in data["row"]["prompt"]])
            self.env, self.init_messages, self.init_info = env, list(messages), dict(info or {})

        await asyncio.to_thread(build)

    def _step(self, action: str) -> dict[str, Any]:
        with self._lock:  # one action at a time: the envs keep turn counters and chat histories
            if self.env is None:
                raise RuntimeError("the gymenv runtime has no environment (prepare was not called)")
            if self.done:
                raise EnvDone("the environment has already finished; no further action is taken")
            db_file = getattr(self.env, "db_file", None) if self.env_id == "text2sql" else None
            if db_file is not None:
                reason = refused_sql(action, db_file)
                if reason is not None:
                    self.refused += 1
                    raise ActionRefused(f"SQL refused, only reading queries run: {reason}")
            try:
                out = self.env.step(action)
            except Exception as exc:
                self.step_errors.append(f"{type(exc).__name__}: {exc}")
                raise
            reward = float(out.get("reward") or 0.0)
            self.rewards.append(reward)
            self.infos.append(dict(out.get("metadata") or {}))
            self.done = bool(out.get("done"))
            return {"observations": list(out.get("observations") or []), "reward": reward, "done": self.done}

    async def step(self, action: str) -> dict[str, Any]:
        """Run the env's ``step`` on ``action``; returns ``observations`` (messages), ``reward`` and ``done``.
        Raises EnvDone after the env finished, and what the env raised (recorded in ``step_errors``)."""
        return await asyncio.to_thread(self._step, action)

    def env_metrics(self) -> dict[str, Any]:
        """The env's own ``get_metrics()`` (numbers and strings kept), empty before ``prepare``."""
        if self.env is None:
            return {}
        try:
            metrics = self.env.get_metrics() or {}
        except Exception as exc:  # a broken get_metrics costs the metrics, not the trajectory
            return {"get_metrics_error": f"{type(exc).__name__}: {exc}"}
        return {k: v for k, v in metrics.items() if isinstance(v, (int, float, str, bool))}

    async def exec(self, command, timeout_s: float = 30.0, stdin=None, env=None) -> ExecResult:
        return ExecResult(exit_code=None, output="the gymenv runtime runs no commands: its environment is a "
                                                 "skyrl_gym text env, acted on with the gym_step tool")

    async def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        env, self.env = self.env, None
        if env is not None:
            try:
                await asyncio.to_thread(env.close)
            except Exception:
                pass
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
