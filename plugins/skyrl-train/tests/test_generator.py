"""The generator on real hf-engine rollouts of SmolLM2-135M, judged by SkyRL-train's own code.

Two batches go through the whole SkyRL-train data path: the rows come from the launcher's dataset file read by
SkyRL-train's ``PromptDataset`` and repeated by its ``prepare_generator_input``; skyrl's dispatcher and agent
loop roll them out through :class:`EngineInferenceClient` (the hf engine behind SkyRL-train's client
interface); the ``GeneratorOutput`` passes ``validate_generator_output`` (step-wise too) and goes through the
real ``RayPPOTrainer``'s ``postprocess_generator_output``, ``convert_to_training_input`` and
``compute_advantages_and_returns`` with truncated importance sampling on. Its advantages and loss masks must
equal skyrl's local trainer's (``build_training_batch``) on the same trajectories, for grpo and rloo.

- GSM8K (``gsm8k_steps``, python tool, codeblock parser, 2 instances x 3 samples, max 2 turns): real rewards,
  trajectories cut off by max_turns/max_tokens (masked), and one whose first engine call fails (masked, no
  tokens) — the inference client raises on its very first request.
- Multi-context (MemAgent-style): every reply is the agent's memory; the ``next_chunk`` tool resets the context
  to the memory plus the next chunk of the question, then finishes — two training datums per trajectory.

Tolerances: advantages 1e-6 absolute (float32 on both paths); logprobs against a fresh forward pass 2e-3.
"""

from __future__ import annotations

import asyncio
import copy
import functools
import json
import math
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from skyrl_core import hookimpl
from skyrl_core.config import config_from_dict
from skyrl_core.default_plugins.parsers import ParseResult
from skyrl_core.postprocess import build_training_batch, pack_transitions
from skyrl_core.tools import Tool, ToolCall, ToolResult

from skyrl_skyrl_train import compat
from skyrl_skyrl_train.engine import EngineInferenceClient
from skyrl_skyrl_train.generator import SkyrlAgentGenerator
from skyrl_skyrl_train.launcher import write_dataset

pytestmark = pytest.mark.slow

N_SAMPLES = 3
N_INSTANCES = 2
GSM8K = {
    "model": "smollm2-135m-instruct",
    # engine.timeout_s bounds a stall (no token for 300 s once admitted), not a slow call on a shared CPU
    "engine": {"type": "hf", "max_batch": 16, "device": "cpu", "dtype": "float32", "timeout_s": 300},
    "tasks": [{"name": "gsm8k_steps", "tools": ["python"], "instruction_builder": "gsm8k_fewshot",
               "verifier": "shaped_answer", "data": {"split": "train", "limit": N_INSTANCES}}],
    "agent": {"max_turns": 2, "max_context_tokens": 1024, "parser": "codeblock", "hints": {"turns_left": False}},
    "sampling": {"temperature": 1.0, "max_tokens": 32, "n_samples": N_SAMPLES, "seed": 11},
    "dispatcher": {"type": "async_pipeline", "max_parallel_agents": 16},
}
MEMAGENT = {**GSM8K, "tasks": [{"name": "gsm8k", "tools": ["next_chunk"], "verifier": "shaped_answer",
                                "data": {"split": "test", "limit": 1}}],
            "agent": {"max_turns": 3, "max_context_tokens": 1024, "parser": "memory_reply",
                      "hints": {"turns_left": False}},
            "sampling": {"temperature": 1.0, "max_tokens": 32, "n_samples": 2, "seed": 5}}


class MemoryReplyParser:
    """MemAgent's protocol: the whole reply is the agent's memory, handed to ``next_chunk``."""

    name = "memory_reply"

    def parse(self, text: str, finish_reason: str = "stop") -> ParseResult:
        return ParseResult(calls=[ToolCall(name="next_chunk", arguments={"memory": text[:400]}, id="call_0")],
                           content="")


async def next_chunk(args: dict, ctx) -> ToolResult:
    """First call: reset the context to the memory and the question's last sentence; second call: finish with
    the memory as the answer."""
    read = ctx.state.memory.get("chunks_read", 0) + 1
    ctx.state.memory["chunks_read"] = read
    if read >= 2:
        return ToolResult(output="done", finish=True, answer=args["memory"])
    question = ctx.instance.data.get("question", "") if hasattr(ctx.instance, "data") else ""
    tail = question.rsplit(".", 2)[-2:] if question else [""]
    return ToolResult(output="next chunk", reset_messages=[
        {"role": "user", "content": f"Your memory so far: {args['memory'][:300]}\nLast chunk: {'.'.join(tail)}\n"
                                    f"Reply with the final number only."}])


def shaped_answer(trajectory, runtime=None, instance=None):
    """Test verifier: ``gsm8k_answer``'s 1.0 for the right number, otherwise a small shaped reward (the share of
    digits in the agent's messages, at most 0.5), so the groups of a small batch have distinct rewards."""
    from skyrl_core.plugins import get_registry
    from skyrl_core.tasks import VerifierResult

    exact = get_registry().get("verifiers", "gsm8k_answer")(trajectory, runtime, instance)
    if exact.reward >= 1.0:
        return exact
    text = " ".join(str(m.get("content") or "") for m in trajectory.messages if m.get("role") == "assistant")
    return VerifierResult(reward=round(min(0.5, sum(c.isdigit() for c in text) / max(len(text), 1)), 4))


class MemAgentPlugin:
    @hookimpl
    def register_verifiers(self, register):
        register(shaped_answer, name="shaped_answer")

    @hookimpl
    def register_tools(self, register):
        register(Tool(name="next_chunk", description="Store your memory and read the next chunk.",
                      parameters={"type": "object", "properties": {"memory": {"type": "string"}},
                                  "required": ["memory"]}, handler=next_chunk))

    @hookimpl
    def register_parsers(self, register):
        register(MemoryReplyParser(), name="memory_reply")


class FirstRequestFails:
    """The inference client failing once: its very first request raises (a crashed server), later ones are
    served by ``inner``."""

    def __init__(self, inner: EngineInferenceClient) -> None:
        self.inner = inner
        self.calls = 0

    async def generate(self, input_batch, model=None):
        self.calls += 1
        if self.calls == 1:
            raise ConnectionError("inference server at 127.0.0.1 closed the connection")
        return await self.inner.generate(input_batch, model)


def _generator_input(api, config, tokenizer, tmp: Path, n_samples: int, stop=None):
    """SkyRL-train's own path from the launcher's dataset file to a GeneratorInput (n samples made here)."""
    dataset_mod = compat.module("dataset.dataset", api)
    gen_utils = compat.module("generators.utils", api)
    cfg_mod = compat.module("config", api)
    path = tmp / "train.jsonl"
    rows = write_dataset(config, "train", path)
    ds = dataset_mod.PromptDataset([str(path)], tokenizer, max_prompt_length=2048, num_workers=1)
    assert len(ds) == rows
    batch = ds.collate_fn([ds[i] for i in range(len(ds))])
    from skyrl.backends.skyrl_train.inference_servers.engine_utils import get_sampling_params_for_backend

    sp = cfg_mod.SamplingParams(max_generate_length=config.sampling.max_tokens, temperature=1.0, stop=stop)
    gi, uids = gen_utils.prepare_generator_input(batch, n_samples, get_sampling_params_for_backend("vllm", sp),
                                                 "skyrl", "train", 1)
    return gi, uids


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    from skyrl_core import plugins as plugins_mod
    from skyrl_core.default_plugins.engines.hf import HFEngine

    api = compat.load()
    plugins_mod.reset_plugins()
    plugins_mod.get_plugins().register_plugin(MemAgentPlugin(), "memagent_test")

    async def run():
        engine = HFEngine("smollm2-135m-instruct", max_batch=16, device="cpu", dtype="float32")
        try:
            out = {}
            # the MemAgent replies end at their first sentence: SkyRL-train's stop strings reach the engine
            for name, raw, client, stop in (
                    ("gsm8k", GSM8K, FirstRequestFails(EngineInferenceClient(engine)), None),
                    ("memagent", MEMAGENT, EngineInferenceClient(engine), ["\n", "."])):
                config = config_from_dict(copy.deepcopy(raw))
                gi, uids = _generator_input(api, config, engine.tokenizer, tmp_path_factory.mktemp(name),
                                            config.sampling.n_samples, stop=stop)
                gen = SkyrlAgentGenerator(config, client, engine.tokenizer, step_wise=True)
                output = await gen.generate(gi)
                out[name] = SimpleNamespace(config=config, input=gi, uids=uids, output=output,
                                            trajectories=gen.last_trajectories, client=client)
            return out, engine.model, engine.tokenizer
        finally:
            await engine.close()

    try:
        yield api, *asyncio.run(run())
    finally:
        plugins_mod.reset_plugins()


@functools.lru_cache(maxsize=1)
def _trainer_tokenizer():
    """The tokenizer as SkyRL-train's ``BasePPOExp`` loads it (its ``get_tokenizer``: pad = EOS when unset)."""
    from skyrl.utils.tok import get_tokenizer

    from skyrl_core.default_plugins.engines.models import resolve_model

    return get_tokenizer(str(resolve_model("smollm2-135m-instruct")), padding_side="left")


def _trainer(api, tokenizer, method: str, n_samples: int, n_prompts: int, tis: bool = True):
    """SkyRL-train's real RayPPOTrainer, built on CPU without Ray (no workers: its dispatch is a stand-in that
    reports one data-parallel rank, which is all ``convert_to_training_input`` asks of it). ``tokenizer`` is
    replaced by SkyRL-train's own loading of the same model."""
    tokenizer = _trainer_tokenizer()
    cfg_mod = compat.module("config", api)
    overrides = {
        "trainer.algorithm.advantage_estimator": method, "trainer.algorithm.grpo_norm_by_std": False,
        "generator.step_wise_trajectories": True, "generator.n_samples_per_prompt": n_samples,
        "generator.inference_engine.enable_ray_prometheus_stats": False, "trainer.enable_ray_gpu_monitor": False,
        "trainer.train_batch_size": n_prompts, "trainer.policy_mini_batch_size": n_prompts,
        "trainer.logger": "console", "trainer.policy.model.path": "smollm2-135m-instruct",
    }
    if tis:
        overrides.update({"trainer.algorithm.off_policy_correction.tis_ratio_type": "token",
                          "trainer.algorithm.off_policy_correction.token_tis_ratio_clip_high": 2.0})
    cfg = cfg_mod.SkyRLTrainConfig.from_cli_overrides(overrides)
    trainer = api.trainer.RayPPOTrainer(cfg=cfg, tracker=None, tokenizer=tokenizer, train_dataset=None,
                                        inference_engine_client=None, generator=None)
    trainer.dispatch = SimpleNamespace(get_lcm_dp_size=lambda: 1)
    return trainer


def _skyrl_train_advantages(api, tokenizer, run, method: str, tis: bool = True):
    """(per-row scalar advantage, loss_mask rows, TrainingInputBatch) from SkyRL-train's own trainer code."""
    output = copy.deepcopy(run.output)
    output.pop("rollout_metrics", None)
    n_prompts = len(run.input["prompts"]) // run.config.sampling.n_samples
    trainer = _trainer(api, tokenizer, method, run.config.sampling.n_samples, n_prompts, tis=tis)
    api.validate_generator_output(len(run.input["prompts"]), output, step_wise=True)
    uids = [t.instance_id for t in output["trajectory_ids"]]
    output, uids = trainer.postprocess_generator_output(output, uids)
    data = trainer.convert_to_training_input(output, uids)
    data["values"] = None
    data = trainer.compute_advantages_and_returns(data)
    advs, masks = [], []
    for j, resp in enumerate(run.output["response_ids"]):
        real = data["response_mask"][j].bool()  # the row's response positions in SkyRL-train's padded layout
        assert int(real.sum()) == len(resp)
        row = data["advantages"][j][real]
        assert torch.allclose(row, row[0].expand_as(row), atol=1e-7), "advantage not broadcast over the row"
        advs.append(float(row[0]))
        masks.append([int(x) for x in data["loss_mask"][j][real].tolist()])
    return advs, masks, data


def _local(run, method: str):
    """skyrl's local trainer's data on the same trajectories, keyed like the generator's rows."""
    batch = build_training_batch(run.trajectories, advantage=method, std_normalize=False, skip_zero_advantage=False)
    return batch


def _rows_of(run):
    """For each generator row, the (trajectory, datum index or None) it came from."""
    rows = []
    for traj in run.trajectories:
        seqs = pack_transitions(traj.transitions)
        rows += [(traj, i) for i in range(len(seqs))] if seqs else [(traj, None)]
    return rows


def test_rollouts_are_real_varied_and_one_failed(runs):
    api, out, _, tok = runs
    g = out["gsm8k"]
    assert len(g.trajectories) == len(g.input["prompts"]) == N_INSTANCES * N_SAMPLES
    rewards = [t.reward for t in g.trajectories]
    assert len(set(rewards)) > 1, rewards
    failed = [t for t in g.trajectories if not t.transitions]
    assert len(failed) == 1 and failed[0].finish_reason == "error_run" and failed[0].masked
    assert "closed the connection" in failed[0].error
    assert any(t.masked and t.transitions for t in g.trajectories), "expected a truncated (masked) trajectory"
    # the group of a row is SkyRL-train's uid; its repetition is the sample index
    assert [t.group_id for t in g.trajectories] == g.uids
    assert sorted({t.sample_index for t in g.trajectories}) == list(range(N_SAMPLES))


def test_logprobs_are_the_samplers_own(runs):
    api, out, model, tok = runs
    g = out["gsm8k"]
    lps = [x for row, mask in zip(g.output["rollout_logprobs"], g.output["loss_masks"]) for x, m in zip(row, mask)
           if m]
    assert lps and all(x <= 0 for x in lps) and sum(1 for x in lps if x < -1e-3) > len(lps) // 2
    # recompute the first trainable row's logprobs with a forward pass of the same weights
    j = next(i for i, m in enumerate(g.output["loss_masks"]) if sum(m) > 3)
    prompt, resp = g.output["prompt_token_ids"][j], g.output["response_ids"][j]
    ids = torch.tensor([prompt + resp])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, len(prompt) - 1: -1].float()
    ref = torch.log_softmax(logits, -1).gather(-1, torch.tensor(resp)[:, None])[:, 0]
    mask = torch.tensor(g.output["loss_masks"][j], dtype=torch.bool)
    got = torch.tensor(g.output["rollout_logprobs"][j])
    assert torch.allclose(got[mask], ref[mask], atol=2e-3), (got[mask][:8], ref[mask][:8])
    assert torch.all(got[~mask] == 0.0)


def test_output_passes_skyrl_trains_validation_both_generations(runs):
    api, out, _, _ = runs
    for run in out.values():
        n = len(run.input["prompts"])
        api.validate_generator_output(n, copy.deepcopy(run.output), step_wise=True)
        assert all(type(x) is bool for x in run.output["is_last_step"])
        assert len(run.output["trajectory_generation_times"]) == len(run.trajectories)
    # the GSM8K batch has one row per trajectory, so it is valid in non-step-wise mode as well
    g = out["gsm8k"]
    api.validate_generator_output(len(g.input["prompts"]), copy.deepcopy(g.output), step_wise=False)
    try:
        old = compat.load("skyrl_train")
    except Exception as exc:  # noqa: BLE001
        pytest.skip(f"skyrl-train 0.3.1 is not importable here: {exc}")
    old_output = {k: v for k, v in copy.deepcopy(g.output).items()
                  if k in old.base.GeneratorOutput.__annotations__}
    old.validate_generator_output(len(g.input["prompts"]), old_output)


def test_multi_context_trajectories_give_contiguous_step_wise_rows(runs):
    api, out, _, tok = runs
    m = out["memagent"]
    assert len(m.trajectories) == 2
    reset = [t for t in m.trajectories if len(pack_transitions(t.transitions)) == 2]
    assert reset, [t.finish_reason for t in m.trajectories]
    rows = _rows_of(m)
    assert len(m.output["response_ids"]) == len(rows)
    for j, (traj, i) in enumerate(rows):
        last = i is None or i == len(pack_transitions(traj.transitions)) - 1
        assert m.output["is_last_step"][j] is last
        assert m.output["trajectory_ids"][j].instance_id == traj.group_id
    # the second datum of a reset trajectory starts from the reset context, not the first prompt
    traj = reset[0]
    j = next(k for k, (t, i) in enumerate(rows) if t is traj and i == 1)
    assert "Your memory so far" in tok.decode(m.output["prompt_token_ids"][j])


@pytest.mark.parametrize("method", ["grpo", "rloo"])
@pytest.mark.parametrize("batch", ["gsm8k", "memagent"])
def test_advantages_and_masks_equal_the_local_trainers(runs, method, batch):
    api, out, _, tok = runs
    run = out[batch]
    advs, masks, data = _skyrl_train_advantages(api, tok, run, method, tis=True)
    assert data["rollout_logprobs"] is not None  # TIS on: the trainer checked they arrived
    local = _local(run, method)
    by_traj: dict[str, list] = {}
    for d in local.data:
        by_traj.setdefault(d.trajectory_id, []).append(d)
    checked = 0
    # skyrl's local trainer leaves a trajectory that failed before its first LLM call out of its group's
    # baseline (it has no datum); SkyRL-train's estimators see that row (reward 0, loss mask 0) as a group
    # member. So advantages are compared on the groups without such a trajectory (README: "Where SkyRL-train
    # and the local trainer differ"); masks are compared everywhere.
    no_datum_groups = {t.group_id for t in run.trajectories if not pack_transitions(t.transitions)}
    for j, (traj, i) in enumerate(_rows_of(run)):
        if i is None:  # failed before its first call: no local datum; SkyRL-train's row trains nothing
            assert masks[j] == [0] * len(run.output["response_ids"][j])
            continue
        d = by_traj[traj.id][i]
        assert masks[j] == [m * d.loss_mask for m in d.response_mask]
        if traj.group_id in no_datum_groups:
            continue
        assert math.isclose(advs[j], d.advantage, abs_tol=1e-6), (j, advs[j], d.advantage)
        checked += 1
    assert checked == sum(1 for d in local.data if d.group_id not in no_datum_groups) > 0
    assert any(abs(a) > 1e-3 for a in advs), "all advantages zero: the batch tests nothing"
    if batch == "gsm8k":
        assert any(d.loss_mask == 0 for d in local.data), "no masked datum on the local side"


def test_grpo_with_std_differs_by_the_unbiased_std_factor(runs):
    api, out, _, tok = runs
    run = out["gsm8k"]
    trainer = _trainer(api, tok, "grpo", N_SAMPLES, N_INSTANCES)
    trainer.cfg.trainer.algorithm.grpo_norm_by_std = True
    output = copy.deepcopy(run.output)
    output.pop("rollout_metrics", None)
    uids = [t.instance_id for t in output["trajectory_ids"]]
    output, uids = trainer.postprocess_generator_output(output, uids)
    data = trainer.convert_to_training_input(output, uids)
    data["values"] = None
    data = trainer.compute_advantages_and_returns(data)
    local = build_training_batch(run.trajectories, advantage="grpo", std_normalize=True, skip_zero_advantage=False)
    factor = math.sqrt((N_SAMPLES - 1) / N_SAMPLES)
    by_id = {d.trajectory_id: d for d in local.data}
    compared = 0
    no_datum_groups = {t.group_id for t in run.trajectories if not pack_transitions(t.transitions)}
    for j, (traj, i) in enumerate(_rows_of(run)):
        if i is None or traj.group_id in no_datum_groups or abs(by_id[traj.id].advantage) < 1e-6:
            continue
        real = data["response_mask"][j].bool()
        assert math.isclose(float(data["advantages"][j][real][0]), by_id[traj.id].advantage * factor, rel_tol=1e-4)
        compared += 1
    assert compared > 0


def test_tis_needs_the_logprobs_and_zeros_are_not_them(runs):
    """With TIS on, SkyRL-train's trainer refuses output without rollout logprobs; the published integration's
    all-zero stand-ins pass that check, which is why the generator never makes them up."""
    api, out, _, tok = runs
    run = out["gsm8k"]
    trainer = _trainer(api, tok, "grpo", N_SAMPLES, N_INSTANCES, tis=True)
    output = copy.deepcopy(run.output)
    output.pop("rollout_metrics", None)
    output["rollout_logprobs"] = None
    uids = [t.instance_id for t in output["trajectory_ids"]]
    output, uids = trainer.postprocess_generator_output(output, uids)
    with pytest.raises(AssertionError, match="rollout logprobs"):
        trainer.convert_to_training_input(output, uids)
    assert any(x != 0.0 for row in run.output["rollout_logprobs"] for x in row)


def test_rollout_metrics_are_reported(runs):
    api, out, _, _ = runs
    metrics = out["gsm8k"].output["rollout_metrics"]
    assert metrics["skyrl/rows"] == len(out["gsm8k"].output["response_ids"])
    assert metrics["skyrl/masked_fraction"] > 0 and metrics["skyrl/dropped_reset_rows"] == 0
    assert json.dumps(metrics)  # plain floats: SkyRL-train's tracker logs them as they are
