"""Placements through the ``register_placements`` hook: the rollout runs a task's runtime, tools and verifier as
the placement its config names returns them, merges the placement's counters into its metrics and closes it
once; ``local`` is the built-in identity; an unknown name, a local placement given resources, and the old
top-level ``ray:`` section are refused naming the key."""

from __future__ import annotations

import asyncio
import json

import pytest

from skyrl_core import hookimpl
from skyrl_core.config import load_config
from skyrl_core.errors import ConfigError, UnknownComponentError
from skyrl_core.inference.base import Engine, GenerationOutput
from skyrl_core.default_plugins.runtimes.placement import LocalPlacement
from skyrl_core.placement import PlacedTask, Placement
from skyrl_core.rollout import RolloutSession
from skyrl_core.tools import Tool


class FinishEngine(Engine):
    """Replies with one ``finish`` tool call answering 18 (SmolLM2's real tokenizer and chat template)."""

    name = "finish-18"

    def __init__(self) -> None:
        super().__init__()
        from skyrl_core.default_plugins.engines.models import load_tokenizer

        self.tokenizer = load_tokenizer("smollm2-135m-instruct")

    async def generate(self, input_ids, sampling):
        reply = f"<tool_call>\n{json.dumps({'name': 'finish', 'arguments': {'answer': '18'}})}\n</tool_call>"
        ids = self.tokenizer(reply, add_special_tokens=False)["input_ids"]
        ids.append(self.tokenizer.convert_tokens_to_ids("<|im_end|>"))
        return GenerationOutput(output_ids=ids, output_logprobs=[0.0] * len(ids), finish_reason="stop", text=reply)


class CountingPlacement:
    """A placement that wraps what it is given and counts every use of it."""

    name = "counting"

    def __init__(self) -> None:
        self.counts = {"checks": 0, "runtimes": 0, "tool_calls": 0, "verifies": 0, "closes": 0, "engines": 0}

    def check(self, config):
        self.counts["checks"] += 1
        if config.plugins.get("counting", {}).get("limit", 1) < 1:
            raise ConfigError("config key 'plugins.counting.limit' must be at least 1")

    def place_task(self, spec, runtime_cls, tools, verifier, verifier_name, config):
        counts = self.counts

        def runtime(spec):
            counts["runtimes"] += 1
            return runtime_cls(spec)

        def wrap(tool):
            async def handler(args, ctx):
                counts["tool_calls"] += 1
                return await tool.call(args, ctx)

            return Tool(name=tool.name, description=tool.description, parameters=tool.parameters, handler=handler)

        async def verify(trajectory, rt, instance):
            counts["verifies"] += 1
            from skyrl_core.rollout import call_verifier

            return await call_verifier(verifier, trajectory, rt, instance)

        async def close():
            counts["closes"] += 1

        return PlacedTask(tools={n: wrap(t) for n, t in tools.items()}, verifier=verify, runtime_cls=runtime,
                          stats=lambda: {"counting_runtimes": counts["runtimes"]}, close=close)

    async def place_engine(self, factory, configs):
        self.counts["engines"] += len(configs)
        return await LocalPlacement().place_engine(factory, configs)


def gsm8k(*extra: str):
    return load_config(None, ["tasks.0.name=gsm8k", "tasks.0.data={split: test, limit: 3}",
                              "tasks.0.tools=[python, finish]", "sampling.n_samples=1", "agent.max_turns=2", *extra])


@pytest.fixture
def counting(plugins) -> CountingPlacement:
    """A CountingPlacement registered by a plugin of its own ("counting-plugin") in the fresh plugin manager."""
    placement = CountingPlacement()

    class Plugin:
        @hookimpl
        def register_placements(self, register):
            register(placement)

    plugins.register_plugin(Plugin(), "counting-plugin")
    return placement


def test_hook_register_placements(plugins, counting):
    placement = counting
    assert isinstance(placement, Placement) and isinstance(plugins.registry.get("placements", "local"), Placement)
    assert plugins.registry.entries["placements"]["counting"].plugin == "counting-plugin"
    cfg = gsm8k("tasks.0.runtime={type: local, placement: counting}")

    async def roll():
        session = await RolloutSession.create(cfg, engine=FinishEngine(), registry=plugins.registry)
        try:
            return await session.rollout(session.load_instances("train"), 1)
        finally:
            await session.close()

    trajs, metrics = asyncio.run(roll())
    assert [t.finish_reason for t in trajs] == ["finished"] * 3, [t.error for t in trajs]
    # every trajectory's runtime, finish call and verifier went through the placement; closed once at the end
    assert placement.counts == {"checks": 2, "runtimes": 3, "tool_calls": 3, "verifies": 3, "closes": 1,
                                "engines": 0}
    assert metrics["counting_runtimes"] == 3
    assert [t.reward for t in trajs] == [1.0, 0.0, 0.0]  # the gsm8k verifier's: only the first answer is 18
    with pytest.raises(ConfigError, match="plugins.counting.limit"):
        asyncio.run(RolloutSession.create(gsm8k("plugins.counting={limit: 0}"), engine=FinishEngine(),
                                          registry=plugins.registry))


def test_engine_replicas_are_built_by_the_named_placement(plugins, counting, tiny_chat_model_dir):
    from skyrl_core.default_plugins.engines.router import EngineRouter, build_engine

    placement = counting
    cfg = load_config(None, [f"model={tiny_chat_model_dir}", "engine.device=cpu", "engine.replicas=2",
                             "engine.placement=counting"])
    router = asyncio.run(build_engine(cfg, plugins.registry))
    try:
        assert isinstance(router, EngineRouter) and placement.counts["engines"] == 2
        assert router.names == ["hf-0", "hf-1"]
    finally:
        asyncio.run(router.close())


def test_an_unknown_placement_names_the_registered_ones(plugins):
    for override in ("tasks.0.runtime={type: local, placement: cluster}", "engine.placement=cluster"):
        with pytest.raises(UnknownComponentError, match="no placement named 'cluster' is registered; registered: "
                                                        "local"):
            asyncio.run(RolloutSession.create(gsm8k(override), engine=FinishEngine(), registry=plugins.registry))


@pytest.mark.parametrize("override, key", [("tasks.0.runtime={type: local, resources: {num_cpus: 1}}",
                                            "tasks.0.runtime.resources"),
                                           ("tasks.0.runtime={type: local, max_actors: 2}", "tasks.0.runtime.max_actors"),
                                           ("engine.resources={num_gpus: 1}", "engine.resources")])
def test_local_placement_refuses_the_keys_of_other_placements(plugins, override, key):
    with pytest.raises(ConfigError, match=f"'{key}' only applies with a placement other than local"):
        asyncio.run(RolloutSession.create(gsm8k(override), engine=FinishEngine(), registry=plugins.registry))


def test_the_old_ray_section_names_its_new_key():
    for overrides in (["ray.address=auto"], ["ray={num_cpus: 2}"]):
        with pytest.raises(ConfigError, match="config key 'ray' is now 'plugins.ray'"):
            load_config(None, overrides)
    assert load_config(None, ["plugins.ray.address=auto"]).plugins == {"ray": {"address": "auto"}}
