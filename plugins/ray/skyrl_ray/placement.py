"""``placement: ray``, the placement this plugin registers: a task's runtime, tools and verifier in Ray actors
(:mod:`skyrl_ray.runtimes`), the engine's replicas in Ray actors (:mod:`skyrl_ray.engines`), on the cluster of
``plugins.ray`` (:mod:`skyrl_ray.config`). Ray is imported when the first actor starts, not before."""

from __future__ import annotations

import asyncio
from typing import Any, Callable

from skyrl_core.placement import PlacedTask

from .config import check_config, cluster_config


class RayPlacement:
    """The registered ``ray`` placement (the contract is :class:`skyrl_core.placement.Placement`)."""

    name = "ray"

    def check(self, config: Any) -> None:
        """ConfigError naming the key for bad ``plugins.ray``, ``tasks.N.runtime.resources`` / ``max_actors``,
        ``engine.resources``, or ``engine.endpoints`` with ``engine.placement: ray``."""
        check_config(config)

    def place_task(self, spec: Any, runtime_cls: Callable, tools: dict[str, Any], verifier: Callable,
                   verifier_name: str, config: Any) -> PlacedTask:
        """The task's tools and verifier as remote calls into the trajectory's actor, and a stand-in for the runtime
        class that leases actors from the task's pool (whose counters are the rollout's ``actors_*`` metrics).
        Raises MissingExtraError when ray is not installed."""
        from .runtimes import RayTaskPlacement, _ray, remote_tool, remote_verifier

        _ray()
        task = RayTaskPlacement(runtime_cls, tools, verifier, verifier_name, spec, cluster_config(config))
        return PlacedTask(tools={name: remote_tool(t) for name, t in tools.items()},
                          verifier=remote_verifier(verifier_name), runtime_cls=task, stats=task.pool.stats,
                          close=task.shutdown)

    async def place_engine(self, factory: Callable, configs: list[Any]) -> list[Any]:
        """One engine actor per config (all of the run's config: ``engine.replicas`` of them), built with
        ``factory`` inside the actor; the tokenizer stays here."""
        from .engines import ray_replicas

        return await asyncio.to_thread(ray_replicas, factory, configs[0], len(configs))
