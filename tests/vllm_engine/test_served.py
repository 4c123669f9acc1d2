"""The vllm engine's served mode against a real vLLM OpenAI-compatible server (CPU) started by the fixture."""

from __future__ import annotations

import asyncio
import sys

import httpx
import pytest
import pytest_asyncio

from skyrl_core.errors import ConfigError
from skyrl_core.inference import EngineError, SamplingParams

from vllm_prompts import GREEDY_MAX, QUESTIONS, chat_ids, odd_ids

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.timeout(900)]

GREEDY = SamplingParams(temperature=0.0, max_tokens=GREEDY_MAX)
ATOL = 1e-3


@pytest.fixture(scope="module")
def server():
    from skyrl_core.default_plugins.engines.vllm_server import VLLMServer

    srv = VLLMServer(python=sys.executable, max_batch=4)
    try:
        srv.start(timeout_s=600)
        yield srv
    finally:
        proc = srv.proc
        srv.stop()
        if proc is not None:  # the API server and its engine core are gone, even after a failed test
            assert proc.poll() is not None
            with pytest.raises(httpx.TransportError):
                httpx.get(srv.url + "/health", timeout=2)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def served(server):
    from skyrl_core import plugins as plugins_mod
    from skyrl_core.config import Config, EngineConfig

    factory = plugins_mod.get_plugins().registry.get("inference_engines", "vllm")
    eng = await asyncio.to_thread(factory, Config(engine=EngineConfig(type="vllm", base_url=server.url,
                                                                      max_batch=4, timeout_s=120)))
    try:
        yield eng
    finally:
        await eng.close()


async def test_the_factory_picks_served_mode_and_checks_its_options(served, server):
    from skyrl_core import plugins as plugins_mod
    from skyrl_core.config import Config, EngineConfig
    from skyrl_core.default_plugins.engines.vllm import VLLMServedEngine

    assert isinstance(served, VLLMServedEngine) and served.name == "vllm" and served.token_prompts is True
    factory = plugins_mod.get_plugins().registry.get("inference_engines", "vllm")
    with pytest.raises(ConfigError, match="gpu_memory_utilization"):
        factory(Config(engine=EngineConfig(type="vllm", base_url=server.url,
                                           options={"gpu_memory_utilization": 0.5})))


async def test_served_greedy_ids_and_logprobs_equal_the_hf_engine(served, hf_engine):
    prompts = [chat_ids(served.tokenizer, q) for q in QUESTIONS]
    ours = await asyncio.gather(*[served.generate(p, GREEDY) for p in prompts])
    for p, a in zip(prompts, ours):
        b = await hf_engine.generate(p, GREEDY)
        assert a.output_ids == b.output_ids and a.finish_reason == b.finish_reason
        assert a.output_logprobs == pytest.approx(b.output_logprobs, abs=ATOL)
    short = await served.generate(prompts[3], SamplingParams(temperature=0.0, max_tokens=3))
    assert short.finish_reason == "length" and len(short.output_ids) == 3


async def test_served_token_id_prompts_round_trip(served, server, hf_engine):
    prompt = odd_ids(served.tokenizer, QUESTIONS[0])
    raw = httpx.post(server.url + "/v1/completions", timeout=120,
                     json={"model": server.served_name, "prompt": prompt, "max_tokens": 4, "temperature": 0,
                           "return_token_ids": True}).json()
    assert raw["choices"][0]["prompt_token_ids"] == prompt  # the server ran exactly these ids
    ours = await served.generate(prompt, GREEDY)
    assert ours.output_ids == (await hf_engine.generate(prompt, GREEDY)).output_ids
    assert raw["choices"][0]["token_ids"] == ours.output_ids[:4]


async def test_a_misspelt_field_is_caught_by_the_response_not_the_status(server):
    """vLLM answers 200 to unknown fields; the served engine refuses a reply without token ids."""
    from skyrl_core.default_plugins.engines.vllm import VLLMServedEngine

    raw = httpx.post(server.url + "/v1/completions", timeout=120,
                     json={"model": server.served_name, "prompt": [1, 2, 3], "max_tokens": 2,
                           "return_tokn_ids": True})
    assert raw.status_code == 200 and raw.json()["choices"][0].get("token_ids") is None
    eng = VLLMServedEngine(base_url=server.url, served_model=server.served_name, timeout_s=60)
    try:
        with pytest.raises(EngineError, match="no token ids"):
            eng._parse_exact(raw.json(), GREEDY)
    finally:
        await eng.close()


async def test_served_weight_updates_go_through_the_reload_route(served, hf_engine):
    prompt = chat_ids(served.tokenizer, QUESTIONS[1])
    before = await served.generate(prompt, GREEDY)
    original = {k: v.detach().clone() for k, v in hf_engine.model.state_dict().items()}
    flipped = {"model.norm.weight": -original["model.norm.weight"]}
    try:
        await served.update_weights(flipped)
        await hf_engine.update_weights(flipped)
        after, ref = await served.generate(prompt, GREEDY), await hf_engine.generate(prompt, GREEDY)
        assert after.output_ids == ref.output_ids != before.output_ids
        assert after.output_logprobs == pytest.approx(ref.output_logprobs, abs=ATOL)
    finally:
        await served.update_weights(original)
        await hf_engine.update_weights(original)
    assert (await served.generate(prompt, GREEDY)).output_ids == before.output_ids


async def test_the_sandbox_cannot_reach_the_servers_dev_routes(server):
    """The dev-mode routes run worker methods for any client that reaches the port; agent code in the sandbox
    has its own network namespace, so the host's 127.0.0.1 (and the server) is out of its reach."""
    from skyrl_core.default_plugins.runtimes.sandbox import LocalSandbox
    from skyrl_core.runtime import RuntimeSpec

    assert httpx.get(server.url + "/health", timeout=5).status_code == 200
    probe = (f"import urllib.request as u; r = u.Request('{server.url}/collective_rpc', "
             f"data=b'{{\"method\": \"shutdown\"}}', headers={{'Content-Type': 'application/json'}}); "
             f"print(u.urlopen(r, timeout=5).read())")
    async with LocalSandbox(RuntimeSpec()) as rt:
        res = await rt.exec(["python3", "-c", probe], timeout_s=30)
    assert res.exit_code != 0 and "Connection refused" in res.output
    assert httpx.get(server.url + "/health", timeout=5).status_code == 200


async def test_the_server_launcher_refuses_a_non_loopback_host():
    from skyrl_core.default_plugins.engines.vllm_server import VLLMServer

    with pytest.raises(ConfigError, match="loopback"):
        VLLMServer(host="0.0.0.0")
