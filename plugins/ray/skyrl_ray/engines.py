"""Inference engines in Ray actors: ``engine.placement: ray`` builds each replica of ``engine.type`` inside an
actor placed by ``engine.resources`` (``num_gpus: 1`` on a GPU cluster), behind the router
(:mod:`skyrl_core.default_plugins.engines.router`). The tokenizer is loaded in the driver from ``config.model`` (the agent
loop tokenises there); only token ids and sampling settings travel, and token ids and logprobs come back.

A dead engine actor raises EngineError from its calls; behind a router with another replica up, the request is
retried there and the dead replica passed over, so it costs no trajectory.
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Any, Callable

from skyrl_core.inference.base import Engine, EngineError, GenerationOutput, SamplingParams

log = logging.getLogger(__name__)


class EngineActor:
    """The body of an engine actor: builds ``factory(config)`` in the actor's process and serves it."""

    def __init__(self, factory: Callable, config: Any) -> None:
        self.engine = factory(config)

    def info(self) -> dict[str, Any]:
        import ray

        return {"pid": os.getpid(), "node": ray.get_runtime_context().get_node_id(),
                "capacity": int(getattr(self.engine.stats, "capacity", 1)),
                "max_context": int(getattr(self.engine, "max_context", 2048)), "name": self.engine.name}

    async def generate(self, input_ids: list[int], sampling: SamplingParams) -> GenerationOutput:
        return await self.engine.generate(input_ids, sampling)

    def stats(self) -> dict[str, float]:
        return self.engine.stats.snapshot()

    async def update_weights(self, state_dict: Any) -> None:
        await self.engine.update_weights(state_dict)

    async def close(self) -> None:
        await self.engine.close()


class RayEngine(Engine):
    """The driver-side handle of one engine actor. ``stats`` counts the requests sent to it (``capacity`` is the
    remote engine's); ``remote`` holds the actor's ``pid``, ``node`` and engine ``name``. Build with
    :meth:`create`. Raises EngineError when the actor is gone."""

    name = "ray"

    def __init__(self, actor: Any, tokenizer: Any, info: dict[str, Any]) -> None:
        super().__init__()
        self.actor = actor
        self.tokenizer = tokenizer
        self.remote = info
        self.max_context = info["max_context"]
        self.stats.capacity = info["capacity"]
        self.name = f"ray:{info['name']}"

    @classmethod
    def create(cls, factory: Callable, config: Any, options: dict[str, Any], tokenizer: Any) -> "RayEngine":
        """Start one engine actor (blocking: the model loads in the actor) and wrap it."""
        import ray

        actor = ray.remote(EngineActor).options(max_restarts=0, **options).remote(factory, config)
        try:
            info = ray.get(actor.info.remote())
        except Exception as exc:
            ray.kill(actor, no_restart=True)
            raise EngineError(f"engine actor for engine.type '{config.engine.type}' failed to start: "
                              f"{type(exc).__name__}: {str(exc)[:500]}") from None
        return cls(actor, tokenizer, info)

    async def generate(self, input_ids: list[int], sampling: SamplingParams) -> GenerationOutput:
        import ray.exceptions as rex

        self.stats.started(len(input_ids))
        out = None
        ref = self.actor.generate.remote(list(input_ids), sampling)
        try:
            out = await ref
            return out
        except asyncio.CancelledError:
            import ray

            ray.cancel(ref)
            raise
        except rex.RayTaskError as exc:
            self.stats.errors += 1
            cause = getattr(exc, "cause", None)
            raise (cause if isinstance(cause, Exception) else EngineError(str(exc)[:500])) from None
        except rex.RayError as exc:
            self.stats.errors += 1
            raise EngineError(f"engine actor (pid {self.remote.get('pid')}) is gone: {type(exc).__name__}: "
                              f"{str(exc)[:300]}") from None
        finally:
            self.stats.finished(len(out.output_ids) if out is not None else 0)

    async def update_weights(self, state_dict: Any) -> None:
        await self.actor.update_weights.remote(state_dict)

    async def close(self) -> None:
        import ray

        try:
            await asyncio.wait_for(self.actor.close.remote(), 30)
        except Exception:  # already dead, or stuck: killed below either way
            pass
        ray.kill(self.actor, no_restart=True)


def ray_replicas(factory: Callable, config: Any, n: int) -> list[Engine]:
    """``n`` engine actors of ``config.engine.type`` (``engine.resources`` each, default 1 CPU) on the cluster of
    ``plugins.ray``; the tokenizer of ``config.model`` is loaded here once and shared. Blocking."""
    from skyrl_core.default_plugins.engines.models import load_tokenizer

    from .config import cluster_config
    from .runtimes import actor_options, ensure_ray

    ensure_ray(cluster_config(config))
    tokenizer = load_tokenizer(config.model)
    options = actor_options(config.engine.resources)
    replicas: list[Engine] = []
    try:
        for _ in range(n):
            replicas.append(RayEngine.create(factory, config, options, tokenizer))
    except BaseException:
        import ray

        for r in replicas:
            ray.kill(r.actor, no_restart=True)
        raise
    return replicas
