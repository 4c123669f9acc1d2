"""Asynchronous training (``train.max_staleness: 1``, local backend) with the engine in a Ray actor
(``engine.placement: ray``): the trainer in the driver keeps its own copy of the model and pushes its weights
through ``engine.update_weights`` (a Ray call) after each step; they must reach the engine in the actor."""

from __future__ import annotations

import json

import pytest

from skyrl_core import VerifierResult, hookimpl

pytestmark = pytest.mark.timeout(600)


class TokenParity:
    """Reward 1 when the sum of a trajectory's generated token ids is even: the random model's samples differ in
    reward, so the steps have advantages and really change the weights (gsm8k would reward it 0 everywhere)."""

    @hookimpl
    def register_verifiers(self, register):
        def parity(trajectory, runtime, instance):
            total = sum(sum(t.output_ids) for t in trajectory.transitions)
            return VerifierResult(reward=float(trajectory.transitions != [] and total % 2 == 0))

        register(parity, name="token_parity")


def actor_weights(engine) -> dict:
    """The engine's weights as the actor holds them (copies), asked in the actor."""

    def read(actor_self):  # nested: pickled by value
        return {k: v.detach().clone() for k, v in actor_self.engine.model.state_dict().items()}

    return engine.actor.__ray_call__.remote(read)


def stop_often(engine):
    """Make every fifth token id a stop token of the engine in the actor (like vLLM's ``stop_token_ids``), so the
    random model ends most replies by itself (trained) instead of at ``sampling.max_tokens`` (loss-masked)."""

    def edit(actor_self):  # nested: pickled by value, the actor cannot import this test module
        eng = actor_self.engine
        eng.eos_token_ids = frozenset(eng.eos_token_ids | set(range(0, len(eng.tokenizer), 5)))

    return engine.actor.__ray_call__.remote(edit)


async def test_async_training_pushes_weights_into_the_engine_actor(ray_cluster, plugins, tiny_chat_model_dir,
                                                                   tmp_path):
    """Two steps of ``max_staleness: 1`` with ``decoupled_ppo`` and the hf engine in a Ray actor: both steps
    train, each push is the trainer's full float32 state dict and afterwards the actor's weights equal it exactly
    (and differ from the initial ones once a step updated), the actor's engine counts one weight version per step,
    and every trained transition is at most one version old."""
    import torch

    from skyrl_core.config import load_config
    from skyrl_core.rollout import RolloutSession
    from skyrl_core.training import TrainRun
    from skyrl_ray.engines import RayEngine

    plugins.register_plugin(TokenParity(), "token_parity")
    path = tmp_path / "tiny.yaml"
    path.write_text(f"""\
model: {tiny_chat_model_dir}
engine: {{type: hf, max_batch: 8, placement: ray, resources: {{num_cpus: 1}}}}
tasks:
  - name: gsm8k_steps
    verifier: token_parity
    data: {{split: train, limit: 16}}
agent: {{max_turns: 2, max_context_tokens: 1024}}
sampling: {{max_tokens: 8, n_samples: 4}}
dispatcher: {{type: async_pipeline, max_parallel_agents: 8}}
backend: {{policy_loss: decoupled_ppo, lr: 1.0e-3}}
train: {{steps: 2, batch_size: 2, eval_every: 0, eval_at_start: false, checkpoint_every: 0, max_staleness: 1}}
""")
    cfg = load_config(path)
    pushes: list[dict] = []
    seen: dict = {}

    async def factory(config):
        session = await RolloutSession.create(config)
        engine = session.engine
        seen["engine"] = engine
        seen["initial"] = await actor_weights(engine)
        await stop_often(engine)
        real = engine.update_weights

        async def push_and_read_back(state_dict=None):
            await real(state_dict)
            pushes.append({"sent": state_dict, "in_actor": await actor_weights(engine),
                           "version": await engine.actor.__ray_call__.remote(
                               lambda actor_self: actor_self.engine._weights_version)})

        engine.update_weights = push_and_read_back
        return session

    run = TrainRun(cfg, tmp_path / "run", session_factory=factory)
    summary = await run.run()

    assert isinstance(seen["engine"], RayEngine)
    assert summary["steps"] == 2 and summary["steps_updated"] >= 1
    assert [p["version"] for p in pushes] == [1, 2]
    initial = seen["initial"]
    for p in pushes:
        sent, got = p["sent"], p["in_actor"]
        assert sent is not None and set(sent) == set(got)  # a full state dict, not the shared-module signal
        assert {str(v.dtype) for v in sent.values()} == {"torch.float32"}
        assert all(torch.equal(sent[k], got[k]) for k in sent)
    last = pushes[-1]["in_actor"]
    assert any(not torch.equal(last[k], initial[k]) for k in last)  # a step updated: the actor serves new weights
    records = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in records if r["kind"] == "train"]
    assert [r["step"] for r in train] == [1, 2]
    assert max(r["async/staleness_max"] for r in train) <= 1
    for r in train:
        assert all(r["step"] - 2 <= v <= r["step"] - 1 for v in r["async/group_versions"])
