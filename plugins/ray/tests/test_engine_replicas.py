"""``engine.placement: ray``: engine replicas built in Ray actors behind the core's router."""

from __future__ import annotations

import asyncio

import pytest

from skyrl_core.default_plugins.engines.router import EngineRouter
from skyrl_core.inference.base import SamplingParams

pytestmark = pytest.mark.timeout(600)
SHORT = SamplingParams(temperature=0.0, max_tokens=4)


def prompt(engine, text: str) -> list[int]:
    return list(engine.tokenizer(text, add_special_tokens=False)["input_ids"])


async def test_two_engine_actors_on_ray_behind_the_router(ray_cluster, tiny_chat_model_dir):
    """``engine.placement: ray`` with two replicas: two hf engines in Ray actors behind the router; killing one
    actor costs no request (the router retries on the other and passes the dead one over)."""
    from skyrl_core.config import load_config
    from skyrl_core.default_plugins.engines.router import build_engine
    from skyrl_core.plugins import get_registry

    cfg = load_config(None, [f"model={tiny_chat_model_dir}", "engine.type=hf", "engine.device=cpu",
                             "engine.max_batch=4", "engine.replicas=2", "engine.placement=ray",
                             "engine.resources={num_cpus: 0.5}"])
    router = await build_engine(cfg, get_registry())
    try:
        assert isinstance(router, EngineRouter) and len({r.remote["pid"] for r in router.replicas}) == 2
        ids = prompt(router, "Count from one to ten.")
        outs = await asyncio.gather(*(router.generate(ids, SHORT) for _ in range(8)))
        assert all(o.output_ids for o in outs) and router.routed == [4, 4]
        assert [r.stats.requests for r in router.replicas] == [4, 4]
        remote_counts = [await r.actor.stats.remote() for r in router.replicas]
        assert [s["requests"] for s in remote_counts] == [4, 4]  # the engines in the actors served them
        ray_cluster.kill(router.replicas[0].actor, no_restart=True)
        again = [await router.generate(ids, SHORT) for _ in range(3)]
        assert all(o.output_ids for o in again)
        load = router.load()
        assert load[0]["errors"] == 1 and not load[0]["up"] and load[1]["routed"] == 4 + 3
    finally:
        await router.close()
