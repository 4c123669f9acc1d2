"""The hf engine against the real SmolLM2-135M-Instruct model (CPU), and the engine factories.

The openai engine is tested against a real ``skyrl serve`` subprocess in tests/test_serve.py.
"""

from __future__ import annotations

import asyncio
import importlib.util
import time

import pytest

torch = pytest.importorskip("torch")

from skyrl_core.errors import MissingExtraError, SkyrlError  # noqa: E402
from skyrl_core.inference import EngineError, SamplingParams  # noqa: E402

GREEDY = SamplingParams(temperature=0.0, max_tokens=16)


@pytest.fixture(scope="module")
def engine(hf_engine):
    return hf_engine


def chat(engine, text: str) -> list[int]:
    out = engine.tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                               tokenize=True)
    return list(out["input_ids"] if hasattr(out, "keys") else out)


QUESTIONS = ["What is 2+2?", "Name a color.", "Write a haiku about the sea.", "Hi", "What is the capital of France?",
             "Count from one to five.", "Say something nice about cats, dogs and birds in one sentence.", "Why?"]


def hf_greedy(engine, prompt: list[int], n: int) -> list[int]:
    with torch.no_grad():
        out = engine.model.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                                    max_new_tokens=n, do_sample=False, pad_token_id=engine._pad_id)
    return out[0, len(prompt):].tolist()


async def test_greedy_is_deterministic_and_matches_transformers_generate(engine):
    prompt = chat(engine, QUESTIONS[0])
    a = await engine.generate(prompt, GREEDY)
    b = await engine.generate(prompt, GREEDY)
    assert a.output_ids == b.output_ids
    ref = hf_greedy(engine, prompt, GREEDY.max_tokens)
    # model.generate stops after EOS; ours includes the EOS token too
    assert a.output_ids == ref[:len(a.output_ids)]
    assert a.text == engine.tokenizer.decode(a.output_ids, skip_special_tokens=True)
    assert len(a.output_logprobs) == len(a.output_ids)
    assert a.finish_reason in ("stop", "length")


async def test_concurrent_requests_are_batched_and_match_sequential(engine):
    prompts = [chat(engine, q) for q in QUESTIONS]
    sequential = [await engine.generate(p, GREEDY) for p in prompts]
    before = engine.stats.snapshot()
    batched = await asyncio.gather(*[engine.generate(p, GREEDY) for p in prompts])
    after = engine.stats.snapshot()
    steps = after["decode_steps"] - before["decode_steps"]
    rows = after["decode_rows"] - before["decode_rows"]
    generated = sum(len(o.output_ids) for o in batched)
    # sequential decoding needs one forward per generated token (minus each request's prefill-sampled first one)
    assert steps < generated - len(prompts)
    assert steps <= GREEDY.max_tokens  # all 8 decoded side by side
    assert rows / steps > 2.0
    assert engine.stats.max_batch_seen == len(prompts)
    # left padding, masks and position ids must not change greedy results
    assert [o.output_ids for o in batched] == [o.output_ids for o in sequential]
    assert engine.stats.in_flight == 0 and engine.stats.queued == 0


async def test_request_joins_a_running_batch(engine):
    long_prompt, short_prompt = chat(engine, QUESTIONS[2]), chat(engine, QUESTIONS[3])
    long_sp = SamplingParams(temperature=0.0, max_tokens=40)
    solo_long = await engine.generate(long_prompt, long_sp)
    solo_short = await engine.generate(short_prompt, GREEDY)
    steps0 = engine.stats.decode_steps
    long_task = asyncio.create_task(engine.generate(long_prompt, long_sp))
    while engine.stats.decode_steps < steps0 + 3:  # the long request is decoding
        await asyncio.sleep(0.01)
    engine.stats.max_batch_seen = 0
    short = await engine.generate(short_prompt, GREEDY)
    assert not long_task.done()  # the newcomer finished while the long one still decodes
    long = await long_task
    assert engine.stats.max_batch_seen == 2  # it joined the running batch instead of waiting for it
    assert short.output_ids == solo_short.output_ids
    assert long.output_ids == solo_long.output_ids


async def test_logprobs_at_temperature_one_equal_a_recomputed_forward(engine):
    prompt = chat(engine, QUESTIONS[4])
    sp = SamplingParams(temperature=1.0, max_tokens=12, seed=1234)
    # run it next to another request so the cached, left-padded batch path is what we check
    out, _ = await asyncio.gather(engine.generate(prompt, sp), engine.generate(chat(engine, QUESTIONS[6]), sp))
    ids = torch.tensor([prompt + out.output_ids])
    with torch.no_grad():
        logits = engine.model(input_ids=ids).logits[0, len(prompt) - 1:-1].float()
    expected = torch.log_softmax(logits, -1).gather(-1, torch.tensor(out.output_ids)[:, None])[:, 0]
    # float32 on CPU: KV-cached padded decoding vs one full forward differ by ~2e-5 (measured)
    assert torch.allclose(torch.tensor(out.output_logprobs), expected, atol=1e-3, rtol=0)
    again = await engine.generate(prompt, sp)
    assert again.output_ids == out.output_ids  # the seed makes sampling reproducible


async def test_tempered_logprobs_are_under_the_sampling_distribution(engine):
    prompt = chat(engine, QUESTIONS[1])
    sp = SamplingParams(temperature=0.7, top_k=20, max_tokens=6, seed=7)
    out = await engine.generate(prompt, sp)
    with torch.no_grad():
        logits = engine.model(input_ids=torch.tensor([prompt + out.output_ids])).logits[0, len(prompt) - 1:-1]
    scaled = logits.float() / 0.7
    kth = scaled.topk(20, dim=-1).values[:, -1:]
    dist = torch.log_softmax(scaled.masked_fill(scaled < kth, float("-inf")), -1)
    expected = dist.gather(-1, torch.tensor(out.output_ids)[:, None])[:, 0]
    assert torch.allclose(torch.tensor(out.output_logprobs), expected, atol=1e-3, rtol=0)
    raw = torch.log_softmax(logits.float(), -1).gather(-1, torch.tensor(out.output_ids)[:, None])[:, 0]
    assert not torch.allclose(torch.tensor(out.output_logprobs), raw, atol=1e-3)


async def test_max_tokens_finishes_with_length(engine):
    out = await engine.generate(chat(engine, QUESTIONS[2]), SamplingParams(temperature=0.0, max_tokens=5))
    assert out.finish_reason == "length" and len(out.output_ids) == 5 and len(out.output_logprobs) == 5


async def test_eos_finishes_with_stop_and_is_kept(engine):
    out = await engine.generate(chat(engine, QUESTIONS[3]), SamplingParams(temperature=0.0, max_tokens=64))
    assert out.finish_reason == "stop"
    assert out.output_ids[-1] in engine.eos_token_ids
    assert engine.tokenizer.eos_token not in out.text


async def test_stop_string_ends_generation_and_stays_in_output(engine):
    prompt = chat(engine, QUESTIONS[5])
    full = await engine.generate(prompt, SamplingParams(temperature=0.0, max_tokens=24))
    # choose a word from the middle of the greedy answer as the stop string
    stop = full.text.split()[3]
    out = await engine.generate(prompt, SamplingParams(temperature=0.0, max_tokens=24, stop=(stop,)))
    assert out.finish_reason == "stop"
    assert stop in out.text and len(out.output_ids) < len(full.output_ids)
    assert out.output_ids == full.output_ids[:len(out.output_ids)]
    assert stop not in engine.tokenizer.decode(out.output_ids[:-1])  # stopped at the first token completing it


async def test_context_window_gives_length(engine):
    from skyrl_core.default_plugins.engines.hf import HFEngine

    small = HFEngine(max_batch=2, device="cpu", max_context=40)
    try:
        prompt = chat(small, QUESTIONS[0])  # ~30 tokens
        out = await small.generate(prompt, SamplingParams(temperature=0.0, max_tokens=100))
        assert out.finish_reason == "length" and len(prompt) + len(out.output_ids) == 40
        full = await small.generate(list(range(5, 50)), SamplingParams(max_tokens=4))
        assert full.output_ids == [] and full.finish_reason == "length"
    finally:
        await small.close()
    with pytest.raises(EngineError, match="closed"):
        await small.generate(prompt, GREEDY)


async def test_timeout_cancels_cleanly_and_engine_keeps_working(engine):
    prompt = chat(engine, QUESTIONS[2])
    with pytest.raises(asyncio.TimeoutError):
        await asyncio.wait_for(engine.generate(prompt, SamplingParams(temperature=0.0, max_tokens=400)), 0.5)
    out = await asyncio.wait_for(engine.generate(prompt, SamplingParams(temperature=0.0, max_tokens=3)), 60)
    assert len(out.output_ids) == 3
    for _ in range(100):
        if engine.stats.in_flight == 0:
            break
        await asyncio.sleep(0.05)
    assert engine.stats.in_flight == 0 and engine.stats.queued == 0


async def test_bad_requests_raise_clear_errors(engine):
    with pytest.raises(SkyrlError, match="empty"):
        await engine.generate([], GREEDY)
    with pytest.raises(SkyrlError, match="outside the vocabulary"):
        await engine.generate([1, 10**9], GREEDY)
    with pytest.raises(SkyrlError, match="top_p"):
        await engine.generate([1, 2, 3], SamplingParams(top_p=0.0))


async def test_update_weights_changes_generation_and_restores(engine):
    prompt = chat(engine, QUESTIONS[0])
    before = await engine.generate(prompt, GREEDY)
    name = "model.norm.weight"
    original = engine.model.state_dict()[name].clone()
    await engine.update_weights({name: -original})
    flipped = await engine.generate(prompt, GREEDY)
    assert flipped.output_ids != before.output_ids
    await engine.update_weights({name: original})
    assert (await engine.generate(prompt, GREEDY)).output_ids == before.output_ids
    with pytest.raises(SkyrlError, match="unknown parameter"):
        await engine.update_weights({"no.such.weight": original})
    with pytest.raises(SkyrlError, match="shape mismatch"):
        await engine.update_weights({name: original[:3]})


async def test_weight_update_mid_generation_recomputes_the_cache(engine):
    """A request running across a weight update continues with the new weights (its KV cache is rebuilt):
    its tokens after the update are exactly what the new weights give for the same prefix."""
    prompt = chat(engine, QUESTIONS[2])
    name = "model.norm.weight"
    original = engine.model.state_dict()[name].clone()
    sp = SamplingParams(temperature=0.0, max_tokens=30)
    task = asyncio.create_task(engine.generate(prompt, sp))
    steps0 = engine.stats.decode_steps
    while engine.stats.decode_steps < steps0 + 4:
        await asyncio.sleep(0.005)
    try:
        await engine.update_weights({name: original * 0.5})
        out = await task
        # replay: under the new weights, every token after the first few must be the greedy choice
        with torch.no_grad():
            logits = engine.model(input_ids=torch.tensor([prompt + out.output_ids])).logits[0, len(prompt) - 1:-1]
        greedy = logits.argmax(-1).tolist()
        k = next(i for i in range(len(out.output_ids)) if out.output_ids[i:] == greedy[i:])
        assert k <= 12  # switched to the new weights within a few steps, not at the end
    finally:
        await engine.update_weights({name: original})


def test_factories_are_registered_and_build_from_config(plugins):
    from skyrl_core.config import Config, EngineConfig

    registry = plugins.registry
    assert {"hf", "openai", "vllm"} <= {r.name for r in registry.items("inference_engines")}
    eng = registry.get("inference_engines", "hf")(Config(engine=EngineConfig(max_batch=3, device="cpu",
                                                                             options={"max_context": 512})))
    try:
        assert eng.max_batch == 3 and eng.stats.capacity == 3 and eng.max_context == 512
    finally:
        asyncio.run(eng.close())
    with pytest.raises(SkyrlError, match="max_contxt"):
        registry.get("inference_engines", "hf")(Config(engine=EngineConfig(options={"max_contxt": 5})))


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vllm is installed; see test_vllm_engine")
def test_vllm_factory_without_vllm_names_the_extra(plugins):
    from skyrl_core.config import Config, EngineConfig

    with pytest.raises(MissingExtraError, match="vllm"):
        plugins.registry.get("inference_engines", "vllm")(Config(engine=EngineConfig(type="vllm")))


# -- timeouts that catch a stall, not a slow machine (docs/engines.md, "Timeouts") ---------------------------
async def test_a_stall_fails_the_admitted_call_while_a_queued_one_waits_unharmed(tiny_chat_model_dir):
    """engine.timeout_s was one call's wall time, queueing included: on a loaded machine every call timed out
    before it was answered. Now it bounds a stall (no token for N s once admitted). The forward lock is held for
    three stall limits: the admitted call fails naming the bound, the call queued behind it all that time (max
    batch 1) is answered once the engine moves."""
    from skyrl_core.default_plugins.engines.hf import HFEngine
    from skyrl_core.inference.base import EngineStalled

    eng = HFEngine(model=tiny_chat_model_dir, max_batch=1, device="cpu", timeout_s=2.0)
    prompt = eng.tokenizer.encode("Hi")
    try:
        eng._step_lock.acquire()  # the worker admits a request, then waits here for its forward pass
        try:
            first = asyncio.ensure_future(eng.generate(prompt, SamplingParams(temperature=0.0, max_tokens=4)))
            await asyncio.sleep(0.2)
            second = asyncio.ensure_future(eng.generate(prompt, SamplingParams(temperature=0.0, max_tokens=4)))
            with pytest.raises(EngineStalled) as stalled:
                await asyncio.wait_for(asyncio.shield(first), 60)
            await asyncio.sleep(4.0)  # the second call has now queued for longer than two stall limits
            assert not second.done()
        finally:
            eng._step_lock.release()
        out = await asyncio.wait_for(second, 120)
        assert len(out.output_ids) == 4
        assert eng.stats.queue_wait_s >= 4.0  # the queueing is reported apart, in the engine's stats
        message = str(stalled.value)
        assert message.startswith("engine 'hf' produced no token for 2 s (engine.timeout_s) after 0 tokens")
        assert isinstance(stalled.value, TimeoutError)  # the agent loop ends the trajectory `timeout`
    finally:
        await eng.close()


async def test_the_whole_call_bound_counts_queueing_and_says_how_long_it_queued():
    from skyrl_core.default_plugins.engines.calls import CallClock, bounded_call
    from skyrl_core.inference.base import EngineStalled

    clock = CallClock()
    never = asyncio.get_running_loop().create_future()  # a call that waits for a slot that never frees
    with pytest.raises(EngineStalled, match=r"did not finish the call within 0.3 s \(engine.call_timeout_s\) after "
                                            r"0 tokens; the call had waited 0 s in the engine's queue"):
        await bounded_call(never, clock, stall_s=0.1, total_s=0.3, engine="hf")
    assert never.cancelled()

    clock = CallClock()

    async def steady():  # admitted at once, one token every 0.05 s for 0.6 s: slow, never stalled
        clock.admit()
        for _ in range(12):
            await asyncio.sleep(0.05)
            clock.tick()
        return "answered"

    assert await bounded_call(steady(), clock, stall_s=0.3, total_s=None, engine="hf") == "answered"
    assert clock.tokens == 12


def test_factories_pass_the_stall_and_call_bounds(plugins):
    from skyrl_core.config import Config, EngineConfig

    cfg = Config(engine=EngineConfig(device="cpu", timeout_s=45, call_timeout_s=900))
    eng = plugins.registry.get("inference_engines", "hf")(cfg)
    try:
        assert (eng.timeout_s, eng.call_timeout_s) == (45, 900)
    finally:
        asyncio.run(eng.close())
    assert Config().engine.call_timeout_s == 3600.0


class _FlakyCompletions:
    """A real HTTP server on 127.0.0.1 whose /v1/completions answers 503 ``failures`` times, then a vLLM-shaped
    completion with token ids."""

    def __init__(self, failures: int) -> None:
        import json
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        owner = self
        self.failures, self.times = failures, []

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's name
                self.rfile.read(int(self.headers["Content-Length"]))
                owner.times.append(time.monotonic())
                ok = len(owner.times) > owner.failures
                answer = {"choices": [{"text": "ok", "finish_reason": "length", "token_ids": [28, 29]}]} if ok \
                    else {"error": {"message": "overloaded"}}
                data = json.dumps(answer).encode()
                self.send_response(200 if ok else 503)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


async def test_openai_engine_retries_503_with_backoff_then_recovers():
    """tenacity's retry: two 503 answers are retried after 0.5 s and 1 s; one retry fewer is an error naming the
    URL, the attempts and the server's message."""
    from skyrl_core.default_plugins.engines.openai import OpenAIEngine

    server = _FlakyCompletions(failures=2)
    eng = OpenAIEngine(base_url=server.url, retries=2, max_context=2048)
    try:
        out = await eng.generate([1, 2, 3], SamplingParams(temperature=0.0, max_tokens=2))
        assert out.output_ids == [28, 29] and out.finish_reason == "length"
        assert len(server.times) == 3
        gaps = [b - a for a, b in zip(server.times, server.times[1:])]
        assert gaps[0] >= 0.45 and gaps[1] >= 0.95, gaps  # exponential: 0.5 s, then 1 s
    finally:
        await eng.close()
        server.close()

    server = _FlakyCompletions(failures=2)
    eng = OpenAIEngine(base_url=server.url, retries=1, max_context=2048)
    try:
        with pytest.raises(EngineError, match=r"POST http://127.0.0.1:\d+/v1/completions failed after 2 attempt\(s\): "
                                              r"HTTP 503: overloaded"):
            await eng.generate([1, 2, 3], SamplingParams(temperature=0.0, max_tokens=2))
        assert len(server.times) == 2
    finally:
        await eng.close()
        server.close()
