"""Installed verifiers (v1, ``verifiers`` 0.4.0) environments, loaded by taskset id and run through skyrl's
recording gateway.

A verifiers environment is a taskset (its tasks: data, ``@vf.reward`` functions, ``@vf.stop`` conditions) played
by an ``Env`` (``SingleAgentEnv`` or the taskset's own, e.g. one whose ``run()`` scripts a user over several turns)
whose agent is a verifiers *harness*: a program that talks to an OpenAI-compatible endpoint through verifiers'
interception server, which relays each call to the ``ModelContext``'s client. Here that client's ``base_url`` is
the skyrl trajectory's gateway session, so every model call the environment makes is recorded as a transition with
the engine's exact token ids (docs/gateway.md), and the environment's own rollout logic stays verifiers'.

The agent is verifiers' own chat program (the one its ``null`` harness launches: a plain chat loop, MCP tools when
the taskset has some). verifiers prepares it with ``uv`` (``uv sync --script``), which downloads its dependencies;
:class:`VenvChatHarness` runs the same program with this Python instead (every dependency it declares —
``openai``, ``mcp``, ``httpx``, ``httpx2``, ``tenacity``, ``certifi`` — comes with ``verifiers`` itself), so an
episode needs no network beyond 127.0.0.1. It is registered for verifiers' harness loader as
``skyrl-venv-chat`` (verifiers imports a harness id as a top-level module exporting its ``Harness``).

Scoring is deferred in the run (``Task.defer_scoring()``): the task's rubric (``Task.score``: its rewards, metrics
and judges on the recorded trace) runs in skyrl's eval stage, by the ``verifiers_rubric`` verifier.
"""

from __future__ import annotations

import functools
import hashlib
import json
import sys
import threading
from typing import Any

HARNESS_ID = "skyrl-venv-chat"
_HARNESS_MODULE = HARNESS_ID.replace("-", "_")
MODEL_NAME = "skyrl"  # the model name the harness sends; the gateway serves whichever engine it fronts

# trajectory id -> (verifiers task, recorded trace): the run stage leaves it, the eval stage takes it
_RECORDED: dict[str, tuple[Any, Any]] = {}
_LOCK = threading.Lock()


def _vf() -> Any:
    try:
        import verifiers.v1 as vf
    except ImportError as exc:  # pragma: no cover - the distribution depends on it
        raise ImportError("skyrl-verifiers needs the 'verifiers' package (0.4.0): pip install verifiers==0.4.0") \
            from exc
    return vf


def _harness_class() -> type:
    """:class:`VenvChatHarness`, made on first use (it subclasses verifiers' ``NullHarness``) and published as the
    top-level module verifiers' harness loader imports for :data:`HARNESS_ID`."""
    module = sys.modules.get(_HARNESS_MODULE)
    if module is not None:
        return module.VenvChatHarness
    import types

    from verifiers.v1.harnesses.null import NullHarness, NullHarnessConfig

    class _VenvScripts:
        """A verifiers runtime whose PEP 723 scripts run with this Python (no uv, no download)."""

        def __init__(self, runtime: Any) -> None:
            self._runtime = runtime

        def __getattr__(self, name: str) -> Any:
            return getattr(self._runtime, name)

        async def prepare_uv_script(self, script: str | bytes, env: dict | None = None, *,
                                    activate: bool = True) -> list[str]:
            data = script.encode() if isinstance(script, str) else script
            path = f"{self._runtime.scripts_dir}/{hashlib.sha256(data).hexdigest()}.py"
            await self._runtime.write(path, data)
            return [sys.executable, path]

    class VenvChatHarnessConfig(NullHarnessConfig):
        pass

    class VenvChatHarness(NullHarness):
        """verifiers' ``null`` harness (its chat program) run with this Python instead of a uv environment."""

        async def setup(self, runtime: Any) -> None:
            await super().setup(_VenvScripts(runtime))

        async def launch(self, ctx: Any, trace: Any, runtime: Any, *args: Any, **kwargs: Any) -> Any:
            return await super().launch(ctx, trace, _VenvScripts(runtime), *args, **kwargs)

    VenvChatHarness.__module__ = VenvChatHarnessConfig.__module__ = _HARNESS_MODULE
    module = types.ModuleType(_HARNESS_MODULE, VenvChatHarness.__doc__)
    module.VenvChatHarness, module.VenvChatHarnessConfig = VenvChatHarness, VenvChatHarnessConfig
    module.__all__ = ["VenvChatHarness", "VenvChatHarnessConfig"]
    sys.modules[_HARNESS_MODULE] = module
    return VenvChatHarness


@functools.lru_cache(maxsize=16)
def _loaded(key: str) -> tuple[Any, list[Any]]:
    taskset, options, take = json.loads(key)
    return load_environment(taskset, options, take)


def load_environment(taskset: str, options: dict | None = None, take: int | None = None) -> tuple[Any, list[Any]]:
    """The verifiers ``Env`` for the installed taskset ``taskset`` (its id, e.g. ``reverse-text``, or one this
    plugin ships: ``skyrl-arithmetic``, ``skyrl-codebook``, ``skyrl-guess``) and its tasks.

    ``options`` are the taskset's config fields (``TasksetConfig``: e.g. ``dataset_name``, ``dataset_split``);
    ``take`` bounds a taskset that generates tasks without end (its first ``take``; required for one).
    Its agent runs :class:`VenvChatHarness` unless the taskset ships its own harness. Raises ValueError naming the
    taskset when it is not installed, its options do not validate, or its task stream is unbounded without
    ``take``."""
    _vf()
    from verifiers.v1.utils.loaders import default_harness_id, load_environment as vf_load, resolve_env_config

    from .envs import publish

    publish()  # the tasksets this plugin ships (skyrl-arithmetic, skyrl-codebook, skyrl-guess), by id
    _harness_class()
    try:
        # verifiers' default runtime is Prime's hosted sandbox: the agent's program runs here, as a subprocess
        raw: dict[str, Any] = {"taskset": {"id": taskset, **(options or {})}, "agent": {"runtime": {"type": "subprocess"}}}
        if default_harness_id(taskset) == "bash":  # no harness of its own: the plain chat program, offline
            raw["agent"]["harness"] = {"id": HARNESS_ID}
        env = vf_load(resolve_env_config(raw))
    except ModuleNotFoundError as exc:
        raise ValueError(f"verifiers taskset {taskset!r} is not installed ({exc}); install its package "
                         f"(e.g. `pip install ./environments/<name>` from the verifiers repository)") from exc
    except (ValueError, TypeError) as exc:  # pydantic's ValidationError is a ValueError
        raise ValueError(f"verifiers taskset {taskset!r}: bad options {options!r}: {exc}") from exc
    if env.taskset.bounded:
        return env, list(env.taskset)
    if take is None:
        raise ValueError(f"verifiers taskset {taskset!r} generates tasks without end; bound it with data.limit")
    return env, list(env.taskset.take(take))  # a seeded stream: its first ``take`` tasks, the same in every process


def environment(taskset: str, options: dict | None = None, take: int | None = None) -> tuple[Any, list[Any]]:
    """:func:`load_environment`, cached per (taskset, options, take) for the process."""
    return _loaded(json.dumps([taskset, dict(options or {}), take], sort_keys=True, default=str))


class _SharedServing:
    """``Env.serving()`` entered once for all the episodes running at the same time in one event loop: it holds
    env-wide state (the interception server, shared tool servers), so a second concurrent ``serving()`` on the same
    env would replace the first one's and tear it down under its episodes. The first episode enters it, the last
    one to finish leaves it."""

    def __init__(self, env: Any, key: tuple[int, int]) -> None:
        import asyncio

        self.env, self.key, self.users, self.lock, self.context = env, key, 0, asyncio.Lock(), None

    async def __aenter__(self) -> None:
        async with self.lock:
            if self.users == 0:
                context = self.env.serving()
                await context.__aenter__()
                self.context = context
            self.users += 1

    async def __aexit__(self, *exc: Any) -> None:
        async with self.lock:
            self.users -= 1
            if self.users == 0:
                context, self.context = self.context, None
                _SERVINGS.pop(self.key, None)  # a later loop (another asyncio.run) starts afresh
                await context.__aexit__(None, None, None)


_SERVINGS: dict[tuple[int, int], _SharedServing] = {}


def _serving(env: Any) -> _SharedServing:
    import asyncio

    key = (id(env), id(asyncio.get_running_loop()))
    if key not in _SERVINGS:
        _SERVINGS[key] = _SharedServing(env, key)
    return _SERVINGS[key]


async def run_episode(base_url: str, trajectory: Any, runtime: Any, instance: Any, sampling: Any = None) -> None:
    """The harness of the ``verifiers`` task (``Task.harness``): one verifiers episode of ``instance``'s task, its
    agent's model calls sent to ``base_url`` (the trajectory's gateway session). The recorded trace is kept for the
    eval stage (:func:`take_recorded`). ``sampling`` (skyrl's ``SamplingParams``: the run's ``sampling.*``) becomes
    the episode's ``temperature``, ``top_p`` and ``max_tokens``. Raises RuntimeError with verifiers' errors when the episode failed (the
    run then ends ``error_run``, masked)."""
    vf = _vf()
    env, tasks = environment(instance.data["taskset"], instance.data.get("options"), instance.data.get("take"))
    task = tasks[instance.data["index"]].defer_scoring()
    knobs = {} if sampling is None else {"temperature": sampling.temperature, "top_p": sampling.top_p,
                                         "max_tokens": sampling.max_tokens}
    ctx = vf.ModelContext(model=MODEL_NAME, client=vf.EvalClientConfig(base_url=base_url,
                                                                       api_key_var="SKYRL_GATEWAY_TOKEN"),
                          sampling=vf.Sampling(**knobs))
    async with _serving(env):
        episode = await env.run_episode(task, ctx)
    if not episode.traces:
        raise RuntimeError(f"the verifiers episode ran no agent: {[e.message for e in episode.errors]}")
    with _LOCK:
        _RECORDED[trajectory.id] = (tasks[instance.data["index"]], episode.traces[-1])
    failures = [e.message for e in episode.errors] + [e.message for t in episode.traces for e in t.errors]
    if failures:
        raise RuntimeError(f"the verifiers episode failed: {'; '.join(failures)[:1500]}")


def take_recorded(trajectory_id: str) -> tuple[Any, Any] | None:
    """The (verifiers task, trace) the run stage recorded for a trajectory, removed; None when there is none."""
    with _LOCK:
        return _RECORDED.pop(trajectory_id, None)
