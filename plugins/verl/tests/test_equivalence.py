"""VeRL's own advantage estimators and policy loss equal skyrl's local trainer on a batch built from real
hf-engine rollouts of SmolLM2-135M (GSM8K questions, with one context-reset trajectory).

Tolerances: advantages 1e-6 absolute (both float; VeRL in float32), losses 1e-6 absolute and gradients 1e-6
relative (same float32 tensors through two implementations), one full optimiser step 1e-6 on parameters.
"""

from __future__ import annotations

import asyncio
import math
import re

import pytest
import torch

from skyrl_core.postprocess import build_training_batch
from skyrl_core.transitions import Trajectory, Transition
from skyrl_verl.algorithms import actor_config, verl_advantages, verl_policy_loss
from skyrl_verl.convert import to_dataproto

pytestmark = pytest.mark.slow

QUESTIONS = ["Tom has 3 apples and buys 5 more. How many apples does he have?",
             "A box holds 12 eggs. How many eggs are in 3 boxes?",
             "Sara reads 10 pages a day. How many pages does she read in 4 days?"]
ANSWERS = ["8", "36", "40"]


def _reward(text: str, answer: str) -> float:
    """Exact answer 1.0; otherwise a small shaped reward (share of digits), so groups have distinct rewards."""
    if re.search(rf"\b{answer}\b", text):
        return 1.0
    return round(sum(c.isdigit() for c in text) / max(len(text), 1), 4)


@pytest.fixture(scope="module")
def rollouts():
    from skyrl_core.inference.base import SamplingParams
    from skyrl_core.default_plugins.engines.hf import HFEngine

    async def run():
        engine = HFEngine("smollm2-135m-instruct", max_batch=16, device="cpu", dtype="float32",
                           timeout_s=300.0)  # a stall bound, not wall time (issue #37 item 12)
        tok = engine.tokenizer
        try:
            trajs, jobs = [], []
            for qi, (q, a) in enumerate(zip(QUESTIONS, ANSWERS)):
                prompt = list(tok.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True,
                                                      tokenize=True, return_dict=False))
                for s in range(4):
                    sp = SamplingParams(temperature=1.0, max_tokens=20, seed=1000 * qi + s)
                    jobs.append((qi, s, a, prompt, engine.generate(prompt, sp)))
            outs = await asyncio.gather(*(j[-1] for j in jobs))
            for (qi, s, a, prompt, _), out in zip(jobs, outs):
                text = tok.decode(out.output_ids)
                trajs.append(Trajectory(instance_id=f"q{qi}", sample_index=s, task="gsm8k", group_id=f"g{qi}",
                                        reward=_reward(text, a), transitions=[Transition(
                                            prompt, out.output_ids, out.output_logprobs, out.finish_reason)]))
            # a context reset: the last trajectory continues from a fresh prompt (a new datum, same trajectory)
            last = trajs[-1]
            p2 = list(tok.apply_chat_template([{"role": "user", "content": "Summary: pages per day times days. "
                                               "Answer now."}], add_generation_prompt=True, tokenize=True,
                                              return_dict=False))
            out2 = await engine.generate(p2, SamplingParams(temperature=1.0, max_tokens=12, seed=7))
            last.transitions.append(Transition(p2, out2.output_ids, out2.output_logprobs, out2.finish_reason,
                                               new_context=True))
            return trajs, engine.model
        finally:
            await engine.close()

    return asyncio.run(run())


def _batch(rollouts, method="rloo", std=False):
    trajs, _ = rollouts
    return build_training_batch(trajs, advantage=method, std_normalize=std, skip_zero_advantage=False)


def test_rollouts_are_real_and_varied(rollouts):
    trajs, _ = rollouts
    assert all(t.transitions[0].output_ids and t.transitions[0].output_logprobs for t in trajs)
    for g in ("g0", "g1", "g2"):
        assert len({t.reward for t in trajs if t.group_id == g}) > 1, "a group without reward variance tests nothing"
    batch = _batch(rollouts)
    assert len(batch.data) == len(trajs) + 1  # the context reset made one extra datum


@pytest.mark.parametrize("method, std", [("rloo", False), ("grpo", False)])
def test_verl_advantages_equal_local(rollouts, method, std):
    batch = _batch(rollouts, method, std)
    dp = to_dataproto(batch)
    adv, per_row = verl_advantages(dp, method, norm_adv_by_std_in_grpo=std)
    ours = torch.tensor([d.advantage for d in batch.data])
    assert torch.allclose(per_row.double(), ours.double(), atol=1e-6), (per_row, ours)
    # broadcast over the generated tokens, as VeRL's actor reads it
    for i, d in enumerate(batch.data):
        n = len(d.response_ids)
        assert torch.allclose(adv[i, :n], d.advantage * torch.tensor(d.response_mask, dtype=torch.float32),
                              atol=1e-6)
    # both rows of the context-reset trajectory carry the same advantage
    reset = [i for i, d in enumerate(batch.data) if d.trajectory_id == "gsm8k:q2#3"]
    assert len(reset) == 2 and per_row[reset[0]] == per_row[reset[1]] != 0


def test_verl_grpo_std_uses_unbiased_std(rollouts):
    """The one documented difference: VeRL's GRPO divides by torch.std (Bessel), skyrl by the population std."""
    batch = _batch(rollouts, "grpo", True)
    _, per_row = verl_advantages(to_dataproto(batch), "grpo", norm_adv_by_std_in_grpo=True)
    k = 4
    ours = torch.tensor([d.advantage for d in batch.data], dtype=torch.float64)
    assert torch.allclose(per_row.double(), ours * math.sqrt((k - 1) / k), atol=1e-5)


def _tensors(rollouts, batch):
    """Current-policy logprobs (with grad) of each datum's response tokens under the rollout model."""
    from skyrl_core.default_plugins.trainer.local import LocalBackend

    _, model = rollouts
    # LocalBackend's collation and logprob code, on the very module the engine sampled from
    backend = LocalBackend.__new__(LocalBackend)
    backend.device, backend.pad_id, backend.autocast_dtype = torch.device("cpu"), 0, None
    backend.temperature = 1.0  # the rollouts above were sampled at temperature 1
    mb = backend._collate(batch.data)
    lp = backend._token_logprobs(backend._logits(model, mb), mb["targets"])
    return mb, lp


@pytest.mark.parametrize("shift, tis_cap", [(0.0, None), (0.35, None), (0.35, 1.5)])
def test_verl_policy_loss_equals_local(rollouts, shift, tis_cap):
    """Old logprobs = the sampler's, optionally shifted token-wise (+/- ``shift``) so ratios leave the clip range
    on both sides (but stay below VeRL's dual-clip bound 3); TIS caps the sampler/trainer ratio."""
    from skyrl_core.default_plugins.trainer.losses import policy_loss
    from verl.trainer.ppo.rollout_corr_helper import compute_rollout_correction_weights

    batch = _batch(rollouts)
    mb, lp = _tensors(rollouts, batch)
    mask, adv, rlp = mb["loss_tokens"], mb["advantages"], mb["rollout_logprobs"]
    sign = torch.where(torch.arange(lp.numel()).view_as(lp) % 2 == 0, 1.0, -1.0)
    old = (rlp + shift * sign) * mask
    lp_a = lp.detach().clone().requires_grad_(True)
    lp_b = lp.detach().clone().requires_grad_(True)
    ours, m = policy_loss(lp_a, old, adv, mask, clip_low=0.2, tis_cap=tis_cap,
                          rollout_logprobs=rlp if tis_cap else None)
    weights = None
    if tis_cap:
        weights, _ = compute_rollout_correction_weights(old - rlp, mask, rollout_is="token",
                                                        rollout_is_threshold=tis_cap)
    theirs, vm = verl_policy_loss(lp_b, old, adv, mask, actor_config(clip=0.2), rollout_is_weights=weights)
    ratio = torch.exp(lp.detach() - old)[mask.bool()]
    assert ratio.max() < 3.0  # below VeRL's dual-clip bound: the two objectives coincide here
    if shift:
        assert m["clip_fraction"] > 0.1  # the clip is exercised
    assert float(ours.detach()) == pytest.approx(float(theirs.detach()), abs=1e-6)
    # (the clip-fraction metrics differ by definition: skyrl counts ratios outside the range, VeRL only tokens
    # where the clipped term is the active one)
    if shift:
        assert 0 < vm["actor/pg_clipfrac"] <= m["clip_fraction"]
    ours.backward()
    theirs.backward()
    assert torch.allclose(lp_a.grad, lp_b.grad, rtol=1e-6, atol=1e-9)
    assert lp_a.grad.abs().sum() > 0


def test_verl_backend_step_equals_local_step(rollouts):
    """One full optimiser step: backend ``verl`` and backend ``local`` from the same weights on the same batch
    give the same loss and the same new weights."""
    from skyrl_core.config import config_from_dict
    from skyrl_core.default_plugins.trainer.local import LocalBackend
    from skyrl_verl.backend import VerlBackend

    from skyrl_core.transitions import TrainingBatch

    full = _batch(rollouts, "grpo")
    # one group (with the context-reset trajectory) keeps the two full training steps affordable on CPU
    batch = TrainingBatch(data=[d for d in full.data if d.group_id == "g2"], metrics=full.metrics)
    assert len(batch.data) == 5
    results = {}
    for name, cls in (("local", LocalBackend), ("verl", VerlBackend)):
        config = config_from_dict({"backend": {"type": name, "advantage": "grpo", "lr": 1e-4,
                                               "micro_batch_tokens": 512}})
        backend = cls(config, None)
        before = backend.model.model.layers[0].self_attn.q_proj.weight.detach().clone()
        metrics = backend.train_step_sync(batch)
        after = backend.model.model.layers[0].self_attn.q_proj.weight.detach().clone()
        results[name] = (metrics, before, after)
        del backend
    (ml, bl, al), (mv, bv, av) = results["local"], results["verl"]
    assert torch.equal(bl, bv)
    assert ml["loss"] == pytest.approx(mv["loss"], abs=1e-6)
    assert ml["grad_norm"] == pytest.approx(mv["grad_norm"], rel=1e-5)
    assert (al - bl).abs().max() > 0  # the step moved the weights
    assert torch.allclose(al, av, atol=1e-6)


def test_a_trajectory_without_a_datum_is_in_neither_baseline(rollouts):
    """A sample whose runtime failed before its first LLM call yields no datum. The local trainer kept its
    reward 0 in its group's baseline while VeRL (which only sees data) did not; the one rule now is: out of
    both. A loss-masked sample with data (a max-token cut-off) stays in both."""
    trajs, _ = rollouts
    failed = Trajectory(instance_id="q0", sample_index=4, task="gsm8k", group_id="g0", reward=0.0)
    failed.fail("error_init", "runtime start raised OSError: no space left on device")
    cut = Trajectory(instance_id="q1", sample_index=4, task="gsm8k", group_id="g1", reward=1.0, masked=True,
                     finish_reason="max_tokens", transitions=list(trajs[4].transitions))
    batch = build_training_batch([*trajs, failed, cut], advantage="rloo", skip_zero_advantage=False)
    assert batch.metrics["trajectories_without_data"] == 1.0
    _, per_row = verl_advantages(to_dataproto(batch), "rloo")
    ours = torch.tensor([d.advantage for d in batch.data])
    assert torch.allclose(per_row.double(), ours.double(), atol=1e-6), (per_row, ours)
    g0 = [t.reward for t in trajs if t.group_id == "g0"]
    first = next(d for d in batch.data if d.trajectory_id == "gsm8k:q0#0")
    assert first.advantage == pytest.approx(g0[0] - sum(g0[1:]) / 3, abs=1e-6)  # 4 samples, not 5
    cut_row = next(d for d in batch.data if d.trajectory_id == "gsm8k:q1#4")
    assert cut_row.loss_mask == 0
