"""The local trainer on a tiny randomly initialised Llama: loss, masks, micro-batching, NaN steps, LoRA and
checkpoints. The real SmolLM2 checkpoint is exercised by the slow tests and the quickstart."""

from __future__ import annotations

import math
import random

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from skyrl_core.config import Config, LoraConfig  # noqa: E402
from skyrl_core.default_plugins.trainer.local import LocalBackend, plan_micro_batches  # noqa: E402
from skyrl_core.default_plugins.trainer.losses import policy_loss  # noqa: E402
from skyrl_core.transitions import Datum, TrainingBatch  # noqa: E402

VOCAB = 97


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory):
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                                   tie_word_embeddings=True)
    model = transformers.LlamaForCausalLM(cfg)
    path = tmp_path_factory.mktemp("tiny-llama")
    model.save_pretrained(path)
    return str(path)


def make_config(model_dir, **backend):
    config = Config(model=model_dir)
    config.backend.lr = backend.pop("lr", 1e-2)
    for k, v in backend.items():
        setattr(config.backend, k, v)
    return config


def make_batch(seed=0, n=6, with_masked=False):
    rng = random.Random(seed)
    data = []
    for i in range(n):
        p = [rng.randrange(1, VOCAB) for _ in range(rng.randint(3, 9))]
        r = [rng.randrange(1, VOCAB) for _ in range(rng.randint(2, 8))]
        mask = [1] * len(r)
        if len(r) > 4:
            mask[2] = mask[3] = 0  # an observation inside the response
        data.append(Datum(prompt_ids=p, response_ids=r, response_mask=mask,
                          rollout_logprobs=[rng.uniform(-6, -3) if m else 0.0 for m in mask],
                          reward=float(i % 2), advantage=1.0 if i % 2 else -1.0, trajectory_id=f"t{i}",
                          group_id=f"g{i // 2}", is_last_step=True))
    if with_masked:
        data.append(Datum(prompt_ids=[5, 6, 7], response_ids=[8, 9, 10], response_mask=[1, 1, 1],
                          rollout_logprobs=None, reward=0.0, advantage=50.0, trajectory_id="masked",
                          group_id="g0", is_last_step=True, loss_mask=0))
    return TrainingBatch(data=data)


def flat_params(backend):
    return torch.cat([p.detach().reshape(-1).clone() for p in backend.params])


def pg_loss(backend, batch, old):
    """-token-mean(A * exp(lp - old)) on the loss tokens: the surrogate the step should lower."""
    lps = backend.compute_logprobs(batch.data)
    num = den = 0.0
    for d, lp, o in zip(batch.data, lps, old):
        if not d.loss_mask:
            continue
        for m, a, b in zip(d.response_mask, lp, o):
            if m:
                num += -d.advantage * float(torch.tensor(a - b).exp())
                den += 1
    return num / den


def test_plan_micro_batches_bounds_padded_tokens():
    lengths = [5, 30, 7, 12, 3, 40, 41]
    plan = plan_micro_batches(lengths, 64)
    assert sorted(i for mb in plan for i in mb) == list(range(7))
    for mb in plan:
        assert len(mb) == 1 or len(mb) * max(lengths[i] for i in mb) <= 64
    assert plan_micro_batches([100], 10) == [[0]]


def test_policy_loss_on_policy_clipping_and_tis():
    lp = torch.tensor([[-1.0, -2.0, -0.5]], requires_grad=True)
    adv = torch.tensor([[1.0, 1.0, 1.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    loss, m = policy_loss(lp, lp.detach(), adv, mask)
    assert float(loss.detach()) == pytest.approx(-1.0) and m["ratio_mean"] == 1.0 and m["clip_fraction"] == 0.0
    loss.backward()
    # on-policy: d loss / d logprob = -A / n_tokens on masked-in tokens, exactly the REINFORCE gradient
    assert lp.grad.tolist() == [[-0.5, -0.5, 0.0]]
    # ratio 1.5 > 1 + 0.2 with A > 0: clipped, no gradient through that token
    lp2 = torch.tensor([[0.0, 0.0]], requires_grad=True)
    old = torch.tensor([[-0.405465, 0.0]])
    loss2, m2 = policy_loss(lp2, old, torch.ones(1, 2), torch.ones(1, 2))
    loss2.backward()
    assert float(loss2.detach()) == pytest.approx(-(1.2 + 1.0) / 2, rel=1e-4)
    assert lp2.grad[0, 0] == 0.0 and lp2.grad[0, 1] == pytest.approx(-0.5)
    assert m2["clip_fraction"] == 0.5
    # truncated IS: weight min(exp(old - rollout), cap)
    lp3 = torch.zeros(1, 2)
    rollout = torch.tensor([[-1.0, 0.5]])
    loss3, m3 = policy_loss(lp3, lp3, torch.ones(1, 2), torch.ones(1, 2), tis_cap=2.0, rollout_logprobs=rollout)
    w = [min(float(torch.tensor(1.0).exp()), 2.0), float(torch.tensor(-0.5).exp())]
    assert float(loss3) == pytest.approx(-(w[0] + w[1]) / 2)
    assert m3["tis_weight_mean"] == pytest.approx(sum(w) / 2)
    with pytest.raises(ValueError, match="tis_cap needs rollout_logprobs"):
        policy_loss(lp3, lp3, lp3, lp3, tis_cap=2.0)
    with pytest.raises(ValueError, match="advantages has shape"):
        policy_loss(lp3, lp3, torch.zeros(2, 2), lp3)


def test_sampler_kl_metrics_estimate_kl_of_sampler_to_trainer_with_the_right_sign():
    """Tokens drawn from the sampler q = (0.8, 0.2) in exact proportion, scored by a trainer p = (0.5, 0.5):
    the token-mean of k1 and of k3 both equal KL(q || p) exactly (Schulman 2020); the old ``rollout_kl``,
    mean(trainer - rollout), was its negative."""
    import math

    q, p = [0.8, 0.2], [0.5, 0.5]
    kl = sum(qi * math.log(qi / pi) for qi, pi in zip(q, p))
    tokens = [0] * 8 + [1] * 2
    rollout = torch.tensor([[math.log(q[t]) for t in tokens]])
    trainer = torch.tensor([[math.log(p[t]) for t in tokens]])
    mask = torch.ones_like(rollout)
    _, m = policy_loss(trainer, trainer, torch.ones_like(mask), mask, rollout_logprobs=rollout)
    assert m["kl_sampler_trainer_k1"] == pytest.approx(kl, rel=1e-5) and kl == pytest.approx(0.1927, abs=1e-4)
    assert m["kl_sampler_trainer_k3"] == pytest.approx(kl, rel=1e-5)
    assert "rollout_kl" not in m
    # k3 is never negative on a single token; k1 can be
    one = torch.tensor([[math.log(0.2)]])
    _, m1 = policy_loss(torch.tensor([[math.log(0.5)]]), torch.tensor([[math.log(0.5)]]), torch.ones(1, 1),
                        torch.ones(1, 1), rollout_logprobs=one)
    assert m1["kl_sampler_trainer_k1"] < 0 < m1["kl_sampler_trainer_k3"]


def test_gspo_clips_whole_sequences_by_their_geometric_mean_ratio():
    import math

    from skyrl_core.config import BackendConfig
    from skyrl_core.default_plugins.trainer.losses import gspo_loss

    bc = BackendConfig(clip=0.1)
    # row 0: token log-ratios 0.3 and -0.1 -> sequence ratio exp(0.1) = 1.105 > 1.1 with A > 0: clipped;
    # row 1: one token, log-ratio 0.05 (the padded second position is out of the mask) -> 1.051, not clipped
    old = torch.zeros(2, 2)
    lp = torch.tensor([[0.3, -0.1], [0.05, 9.0]], requires_grad=True)
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    adv = torch.tensor([[1.0, 1.0], [-2.0, -2.0]])
    loss, m = gspo_loss(lp, old, adv, mask, bc)
    expected = (-(1.1 * 1.0) + -(-2.0 * math.exp(0.05))) / 2
    assert float(loss.detach()) == pytest.approx(expected, rel=1e-5)
    assert m["clip_fraction"] == 0.5 and m["ratio_max"] == pytest.approx(math.exp(0.1), rel=1e-5)
    loss.backward()
    assert lp.grad[0].tolist() == [0.0, 0.0]  # the clipped sequence gives no gradient, to any of its tokens
    # row 1: d/dlp of -(A * exp(lp)) / 2 rows, A = -2: exp(0.05); the masked position none
    assert lp.grad[1, 0] == pytest.approx(math.exp(0.05), rel=1e-5) and lp.grad[1, 1] == 0.0


def test_padding_does_not_change_logprobs(tiny_model_dir):
    backend = LocalBackend(make_config(tiny_model_dir))
    batch = make_batch()
    together = [backend.compute_logprobs([d])[0] for d in batch.data]
    mb = backend._collate(batch.data)
    with torch.no_grad():
        lp = backend._token_logprobs(backend._logits(backend.model, mb), mb["targets"])
    for i, d in enumerate(batch.data):
        n = len(d.response_ids)
        assert lp[i, -n:].tolist() == pytest.approx(together[i], abs=1e-5)


def test_one_step_lowers_the_loss_and_ignores_masked_data(tiny_model_dir):
    batch = make_batch(with_masked=True)
    backend = LocalBackend(make_config(tiny_model_dir))
    old = backend.compute_logprobs(batch.data)
    before = pg_loss(backend, batch, old)
    m = backend.train_step_sync(batch)
    assert m["updates"] == 1 and m["skipped"] == 0 and m["train_data"] == 6
    assert m["loss"] == pytest.approx(before, abs=1e-5)  # exactly on-policy: ratio 1, loss = -mean(A)
    assert m["ratio_mean"] == pytest.approx(1.0) and m["grad_norm"] > 0
    after = pg_loss(backend, batch, old)
    assert after < before - 1e-3
    # the masked datum (advantage 50) contributes nothing: same update without it
    ref = LocalBackend(make_config(tiny_model_dir))
    ref.train_step_sync(TrainingBatch(data=batch.data[:-1]))
    assert torch.equal(flat_params(ref), flat_params(backend))


def test_micro_batches_accumulate_to_the_same_gradient(tiny_model_dir):
    batch = make_batch(seed=3, n=8)
    grads = []
    for budget in (10_000, 16):
        backend = LocalBackend(make_config(tiny_model_dir, micro_batch_tokens=budget))
        loss, finite, _, tokens = backend.accumulate_gradients(batch.data)
        assert finite and tokens == sum(len(d.prompt_ids) + len(d.response_ids) for d in batch.data)
        grads.append((loss, torch.cat([p.grad.reshape(-1) for p in backend.params])))
    assert grads[0][0] == pytest.approx(grads[1][0], abs=1e-6)
    assert torch.allclose(grads[0][1], grads[1][1], atol=1e-6)
    assert grads[0][1].abs().sum() > 0


def test_mini_batches_and_kl_entropy_terms_run(tiny_model_dir):
    backend = LocalBackend(make_config(tiny_model_dir, mini_batches=2, kl_coef=0.1, entropy_coef=0.01, tis_cap=2.0))
    m = backend.train_step_sync(make_batch(seed=5))
    assert m["updates"] == 2 and m["kl_policy_ref_k3"] >= 0 and m["entropy"] > 0 and "tis_weight_mean" in m
    assert "kl_policy_ref_k1" in m and "kl_sampler_trainer_k3" in m


@pytest.mark.parametrize("loss_name", ["gspo", "reinforce"])
def test_the_configured_policy_loss_trains(tiny_model_dir, loss_name):
    backend = LocalBackend(make_config(tiny_model_dir, policy_loss=loss_name, mini_batches=2))
    m = backend.train_step_sync(make_batch(seed=3))
    assert m["updates"] == 2 and math.isfinite(m["loss"]) and "clip_fraction" in m


def test_nan_loss_skips_the_update_and_counts(tiny_model_dir):
    backend = LocalBackend(make_config(tiny_model_dir))
    batch = make_batch()
    batch.data[0].advantage = float("nan")
    before = flat_params(backend)
    for k in (1, 2):
        m = backend.train_step_sync(batch)
        assert m["skipped"] == 1 and backend.bad_steps == k
    assert torch.equal(before, flat_params(backend))
    assert backend.train_step_sync(make_batch())["skipped"] == 0 and backend.bad_steps == 0
    empty = backend.train_step_sync(TrainingBatch(data=[]))
    assert empty["empty"] == 1 and backend.bad_steps == 0


def test_checkpoint_resume_gives_identical_next_step(tiny_model_dir, tmp_path):
    b1, b2, b3 = make_batch(seed=1), make_batch(seed=2), make_batch(seed=3)
    straight = LocalBackend(make_config(tiny_model_dir))
    for b in (b1, b2, b3):
        straight.train_step_sync(b)
    first = LocalBackend(make_config(tiny_model_dir))
    first.train_step_sync(b1)
    first.train_step_sync(b2)
    first.save(tmp_path)
    resumed = LocalBackend(make_config(tiny_model_dir))
    resumed.load(tmp_path)
    assert resumed.updates == 2
    resumed.train_step_sync(b3)
    assert torch.equal(flat_params(straight), flat_params(resumed))


def test_lora_trains_only_adapters_and_round_trips(tiny_model_dir, tmp_path):
    pytest.importorskip("peft")
    config = make_config(tiny_model_dir, lora=LoraConfig(r=4, alpha=8, target_modules=["q_proj", "v_proj"]))
    backend = LocalBackend(config)
    assert all("lora_" in n for n, p in backend.model.named_parameters() if p.requires_grad)
    base_before = backend.policy_state_dict()
    backend.train_step_sync(make_batch())
    backend.train_step_sync(make_batch(seed=4))
    merged = backend.policy_state_dict()
    assert set(merged) == set(base_before) and not any("lora_" in k for k in merged)
    assert not torch.equal(merged["model.layers.0.self_attn.q_proj.weight"],
                           base_before["model.layers.0.self_attn.q_proj.weight"])
    assert torch.equal(merged["model.layers.0.mlp.up_proj.weight"], base_before["model.layers.0.mlp.up_proj.weight"])
    backend.save(tmp_path)
    again = LocalBackend(config)
    again.load(tmp_path)
    batch = make_batch(seed=9)
    flat = lambda lps: [x for lp in lps for x in lp]  # noqa: E731
    assert flat(again.compute_logprobs(batch.data)) == pytest.approx(flat(backend.compute_logprobs(batch.data)),
                                                                     abs=1e-6)
    with pytest.raises(Exception, match="LoRA"):
        LocalBackend(make_config(tiny_model_dir)).load(tmp_path)
    with pytest.raises(Exception, match="target_modules"):
        LocalBackend(make_config(tiny_model_dir, lora=LoraConfig(target_modules=["nope"])))


@pytest.fixture(scope="module")
def tiny_engine_dir(tiny_model_dir, tmp_path_factory):
    """The tiny model plus the real SmolLM2 tokenizer, so the real hf engine can load it."""
    import shutil

    from skyrl_core.default_plugins.engines.models import load_tokenizer

    path = tmp_path_factory.mktemp("tiny-engine")
    shutil.copytree(tiny_model_dir, path, dirs_exist_ok=True)
    load_tokenizer("smollm2-135m-instruct").save_pretrained(path)
    return str(path)


async def test_hf_engine_shares_the_trained_module(tiny_engine_dir):
    from skyrl_core.inference.base import SamplingParams
    from skyrl_core.default_plugins.engines.hf import HFEngine

    engine = HFEngine(model=tiny_engine_dir, max_batch=2, device="cpu")
    try:
        backend = LocalBackend(make_config(tiny_engine_dir), engine)
        assert backend.model is engine.model and backend.shared
        version = engine._weights_version
        before = engine.model.model.embed_tokens.weight.detach().clone()
        metrics = await backend.train_step(make_batch())
        # the local backend does the process's memory accounting (the loop logs these as train/rss_mb, ...)
        assert 0 < metrics["rss_mb"] <= metrics["peak_rss_mb"] * 1.01
        await backend.sync_weights(engine)
        assert not torch.equal(before, engine.model.model.embed_tokens.weight)  # trained in place, no copy
        assert engine._weights_version == version + 1  # the engine drops caches built with old weights
        out = await engine.generate([5, 6, 7], SamplingParams(temperature=0.0, max_tokens=4))
        assert len(out.output_ids) >= 1 and not engine.model.training
    finally:
        await engine.close()


async def test_weights_are_pushed_to_an_engine_with_its_own_copy(tiny_engine_dir):
    from skyrl_core.default_plugins.engines.hf import HFEngine

    engine = HFEngine(model=tiny_engine_dir, max_batch=2, device="cpu")
    try:
        backend = LocalBackend(make_config(tiny_engine_dir))  # its own copy, as with an openai/vllm engine
        await backend.train_step(make_batch())
        assert not torch.equal(engine.model.model.norm.weight, backend.model.model.norm.weight)
        await backend.sync_weights(engine)
        for name, tensor in backend.policy_state_dict().items():
            assert torch.equal(engine.model.state_dict()[name], tensor), name
    finally:
        await engine.close()


@pytest.mark.parametrize("temperature", [0.7, 1.0])
async def test_trainer_logprobs_are_the_sampling_policys(tiny_engine_dir, temperature):
    """On-policy means the trainer scores a rollout's tokens with the distribution they were sampled from:
    at T=0.7 the engine's logprobs are log softmax(logits / 0.7), and so are the trainer's."""
    from skyrl_core.inference.base import SamplingParams
    from skyrl_core.default_plugins.engines.hf import HFEngine

    engine = HFEngine(model=tiny_engine_dir, max_batch=2, device="cpu")
    try:
        config = make_config(tiny_engine_dir)
        config.sampling.temperature = temperature
        backend = LocalBackend(config, engine)
        prompt = [5, 6, 7, 8]
        out = await engine.generate(prompt, SamplingParams(temperature=temperature, max_tokens=12, seed=3,
                                                           logprobs=True))
        datum = Datum(prompt_ids=prompt, response_ids=list(out.output_ids), response_mask=[1] * len(out.output_ids),
                      rollout_logprobs=list(out.output_logprobs), reward=1.0, advantage=0.0, trajectory_id="t",
                      group_id="g", is_last_step=True)
        trainer_lps = backend.compute_logprobs([datum])[0]
        assert len(trainer_lps) == len(out.output_ids) >= 2
        assert trainer_lps == pytest.approx(list(out.output_logprobs), abs=1e-4)
        if temperature != 1.0:  # and they are not the T=1 logprobs
            backend.temperature = 1.0
            assert backend.compute_logprobs([datum])[0] != pytest.approx(list(out.output_logprobs), abs=1e-3)
    finally:
        await engine.close()
