"""The ``local`` placement: runtimes, tools, verifiers and engine replicas in this process, unchanged (the default
of ``tasks.N.runtime.placement`` and ``engine.placement``; the contract is :class:`skyrl_core.placement.Placement`)."""

from __future__ import annotations

import asyncio
from typing import Any, Callable

from skyrl_core.errors import ConfigError
from skyrl_core.placement import PlacedTask


class LocalPlacement:
    """``placement: local``: runtimes and engines in this process, unchanged. Takes no ``resources`` or
    ``max_actors`` (ConfigError naming the key)."""

    name = "local"

    def check(self, config: Any) -> None:
        for i, tc in enumerate(config.tasks):
            rt = tc.runtime
            if rt is not None and rt.placement == "local" and (rt.resources or rt.max_actors is not None):
                key = "resources" if rt.resources else "max_actors"
                raise ConfigError(f"config key 'tasks.{i}.runtime.{key}' only applies with a placement other than "
                                  f"local (such as ray, from the skyrl-ray plugin); the runtime is placed locally")
        if config.engine.placement == "local" and config.engine.resources:
            raise ConfigError("config key 'engine.resources' only applies with a placement other than local "
                              "(such as engine.placement: ray, from the skyrl-ray plugin)")

    def place_task(self, spec: Any, runtime_cls: Callable, tools: dict[str, Any], verifier: Callable,
                   verifier_name: str, config: Any) -> PlacedTask:
        return PlacedTask(tools=tools, verifier=verifier, runtime_cls=runtime_cls)

    async def place_engine(self, factory: Callable, configs: list[Any]) -> list[Any]:
        """Each replica built in a worker thread, one after the other (a model load blocks)."""
        replicas: list[Any] = []
        try:
            for cfg in configs:
                replicas.append(await asyncio.to_thread(factory, cfg))
        except BaseException:
            await asyncio.gather(*(r.close() for r in replicas), return_exceptions=True)
            raise
        return replicas
