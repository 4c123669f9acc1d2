"""The engine router over real engines: two in-process hf engines, and two ``skyrl serve`` servers on 127.0.0.1
reached through ``engine.endpoints``. Requests go to the replica with the fewest outstanding tokens, a trajectory
can stay on one replica, a failing replica is passed over, and the router's load is what the dispatcher reads."""

from __future__ import annotations

import asyncio

import pytest

torch = pytest.importorskip("torch")

from skyrl_core.inference.base import SamplingParams  # noqa: E402
from skyrl_core.default_plugins.engines.router import EngineRouter  # noqa: E402
from skyrl_core.inference.base import routing_key  # noqa: E402

pytestmark = pytest.mark.timeout(600)
SHORT = SamplingParams(temperature=0.0, max_tokens=4)


@pytest.fixture(scope="module")
def two_engines(tiny_chat_model_dir):
    """Two real hf engines on the 1-layer model (one intra-op thread while they live)."""
    from skyrl_core.default_plugins.engines.hf import HFEngine

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    engines = [HFEngine(model=tiny_chat_model_dir, max_batch=4, device="cpu") for _ in range(2)]
    try:
        yield engines
    finally:
        for engine in engines:
            asyncio.run(engine.close())
        torch.set_num_threads(threads)


def prompt(engine, text: str) -> list[int]:
    return list(engine.tokenizer(text, add_special_tokens=False)["input_ids"])


async def test_equal_requests_are_spread_evenly_over_two_real_engines(two_engines):
    router = EngineRouter(two_engines)
    before = [e.stats.requests for e in two_engines]
    ids = prompt(two_engines[0], "Count from one to ten.")
    outs = await asyncio.gather(*(router.generate(ids, SHORT) for _ in range(8)))
    assert all(o.output_ids for o in outs)
    assert router.routed == [4, 4]
    # the engines themselves served them (their own counters), and the router's stats saw all 8
    assert [e.stats.requests - b for e, b in zip(two_engines, before)] == [4, 4]
    assert router.stats.requests == 8 and router.stats.in_flight == 0 and router.outstanding == [0, 0]
    assert router.stats.capacity == 8  # 4 + 4 batch slots: what the auto pipeline sizes its run stage by


async def test_requests_go_to_the_replica_with_the_fewest_outstanding_tokens(two_engines):
    """A long request (512 tokens of budget) holds replica 0; the three short ones after it all go to replica 1,
    whose outstanding tokens stay below replica 0's (a least-requests or round-robin router would send the
    second short one to replica 0)."""
    router = EngineRouter(two_engines)
    ids = prompt(two_engines[0], "Tell a long story.")
    long_task = asyncio.ensure_future(router.generate(ids, SamplingParams(temperature=0.0, max_tokens=512)))
    await asyncio.sleep(0)  # the long request is routed (routing happens before its first await)
    assert router.in_flight == [1, 0] and router.outstanding[0] == len(ids) + 512
    shorts = [asyncio.ensure_future(router.generate(ids, SHORT)) for _ in range(3)]
    await asyncio.sleep(0)
    assert router.in_flight == [1, 3] and router.outstanding[1] == 3 * (len(ids) + 4)
    snap = router.stats.snapshot()
    assert snap["in_flight"] == 4 and snap["outstanding_tokens"] == sum(router.outstanding)
    await asyncio.gather(long_task, *shorts)
    assert router.routed == [1, 3] and router.outstanding == [0, 0]
    assert [r["routed"] for r in router.load()] == [1, 3]


async def test_sticky_routing_keeps_each_trajectory_on_one_replica(two_engines):
    router = EngineRouter(two_engines, sticky=True)
    ids = prompt(two_engines[0], "Hello there.")

    async def trajectory(key: str) -> None:
        routing_key.set(key)
        for turn in range(3):
            await router.generate(ids + [turn], SHORT)

    await asyncio.gather(*(asyncio.ensure_future(trajectory(f"t{k}")) for k in range(4)))
    # the four first calls alternate over the replicas; every later call of a trajectory follows its first
    assert router.sticky_hits == 8  # 4 trajectories x 2 follow-up calls
    assert router.routed == [6, 6]
    assert set(router._keys.values()) == {0, 1}


async def test_a_failing_replica_is_passed_over_and_the_request_retried(tiny_chat_model_dir, two_engines):
    from skyrl_core.default_plugins.engines.hf import HFEngine

    broken = HFEngine(model=tiny_chat_model_dir, max_batch=2, device="cpu")
    await broken.close()  # a closed engine refuses every request
    router = EngineRouter([broken, two_engines[1]], names=["closed", "healthy"])
    ids = prompt(two_engines[0], "Hi.")
    outs = [await router.generate(ids, SHORT) for _ in range(3)]
    assert all(o.output_ids for o in outs)
    load = {r["name"]: r for r in router.load()}
    assert load["closed"]["errors"] == 1 and not load["closed"]["up"]  # tried once, then passed over
    assert load["healthy"]["routed"] == 3 and router.stats.errors == 1


async def test_engine_endpoints_route_a_rollout_over_two_servers(tiny_chat_model_dir):
    """``engine.endpoints`` with two real ``skyrl serve`` servers: RolloutSession builds the router, the rollout's
    requests are spread over both, and the dispatcher's engine metrics come from the router's stats."""
    pytest.importorskip("fastapi")
    from test_serve import Server

    from skyrl_core.config import load_config
    from skyrl_core.rollout import RolloutSession

    servers = [Server("--model", tiny_chat_model_dir), Server("--model", tiny_chat_model_dir)]
    try:
        cfg = load_config(None, [f"model={tiny_chat_model_dir}", "engine.type=openai",
                                 f"engine.endpoints=[{servers[0].url}, {servers[1].url}]", "engine.max_batch=4",
                                 "tasks.0.name=gsm8k", "tasks.0.data={split: test, limit: 6}",
                                 "tasks.0.tools=[python, finish]", "tasks.0.runtime={type: local}",
                                 "sampling.n_samples=1", "sampling.max_tokens=8", "sampling.temperature=0",
                                 "agent.max_turns=1", "dispatcher.max_parallel_agents=6"])
        session = await RolloutSession.create(cfg)
        try:
            router = session.engine
            assert isinstance(router, EngineRouter) and router.names == [s.url for s in servers]
            trajs, metrics = await session.rollout(session.load_instances("train"), 1)
        finally:
            await session.close()
        assert len(trajs) == 6 and all(t.transitions for t in trajs), [t.error for t in trajs]
        assert sorted(router.routed) == [3, 3], router.load()
        assert metrics["engine_requests"] == 6 == sum(router.routed)
        assert metrics["engine_busy"] > 0
    finally:
        for s in servers:
            s.stop()
