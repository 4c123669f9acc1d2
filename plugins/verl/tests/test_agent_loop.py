"""The registered VeRL agent loop ``skyrl`` runs a real skyrl trajectory (gsm8k task, python/finish tools, the
sandbox runtime, the gsm8k_answer verifier) against the real hf engine, which is put behind VeRL's
server-manager interface by ``HFServerManager`` (an adapter, named as one), and returns AgentLoopOutputs."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.slow

# The engine's bound is a stall (no token for this many seconds once a call is admitted), never a call's wall
# time: on a loaded machine a slow but decoding engine must not time every trajectory out (issue #37 item 12).
STALL_S = 300.0


class SessionLedger:
    """Records every skyrl RolloutSession built and every one closed (the real class, its methods wrapped)."""

    def __init__(self, monkeypatch):
        from skyrl_core.rollout import RolloutSession

        self.opened, self.closed = [], []
        init, close = RolloutSession.__init__, RolloutSession.close
        ledger = self

        def tracked_init(session, *args, **kwargs):
            init(session, *args, **kwargs)
            ledger.opened.append(id(session))

        async def tracked_close(session):
            await close(session)
            ledger.closed.append(id(session))

        monkeypatch.setattr(RolloutSession, "__init__", tracked_init)
        monkeypatch.setattr(RolloutSession, "close", tracked_close)

    def assert_all_closed(self):
        assert self.opened, "no RolloutSession was built"
        assert sorted(self.opened) == sorted(self.closed), \
            "a RolloutSession (its placements' runtimes) outlived its row"


@pytest.fixture
def sessions(monkeypatch):
    return SessionLedger(monkeypatch)


@pytest.fixture(scope="module")
def verl_cfg():
    from skyrl_core.config import load_config
    from skyrl_verl.launcher import REPO_EXAMPLE, build_verl_config

    config = load_config(REPO_EXAMPLE, ["engine=vllm", "data.limit=2", "agent.max_turns=2",
                                        "sampling.max_tokens=48", "sampling.seed=3", "agent.max_context_tokens=1024"])
    return build_verl_config(config)


async def test_agent_loop_output_from_a_real_rollout(verl_cfg, sessions):
    from verl.experimental.agent_loop.agent_loop import (AgentLoopOutput, DictConfigWrap, _agent_loop_registry)
    from verl.utils.dataset.rl_dataset import RLHFDataset

    from skyrl_core.default_plugins.engines.hf import HFEngine
    from skyrl_core.plugins import get_registry
    from skyrl_verl.agent_loop import HFServerManager, SkyrlAgentLoop
    from skyrl_verl.launcher import write_task_parquet

    assert _agent_loop_registry["skyrl"]["_target_"] == "skyrl_verl.agent_loop.SkyrlAgentLoop"
    engine = HFEngine("smollm2-135m-instruct", max_batch=4, device="cpu", dtype="float32", timeout_s=STALL_S)
    try:
        server = HFServerManager(engine)
        loop = SkyrlAgentLoop(trainer_config=DictConfigWrap(verl_cfg), server_manager=server,
                              tokenizer=engine.tokenizer, processor=None, dataset_cls=RLHFDataset,
                              data_config=DictConfigWrap(verl_cfg.data))
        task = get_registry().get("tasks", "gsm8k")
        instance = task.select(loop.skyrl_config.tasks[0].data)[0]
        outputs = await loop.run_outputs({"temperature": 1.0, "top_p": 1.0, "top_k": -1, "logprobs": True},
                                         extra_info={"task_index": 0, "instance_id": instance.id, "split": "train",
                                                     "index": 0},
                                         raw_prompt=[])
    finally:
        await engine.close()
    sessions.assert_all_closed()  # the row's session (tasks' placements, runtimes) is gone with its rollout
    assert outputs and all(isinstance(o, AgentLoopOutput) for o in outputs)
    assert server.requests >= 1  # every LLM call went through VeRL's generate interface
    last = outputs[-1]
    tok = engine.tokenizer
    # the prompt is the instance's question under the chat template; the model's tokens are the response
    assert instance.data["question"][:40] in tok.decode(outputs[0].prompt_ids)
    for o in outputs:
        assert len(o.response_ids) == len(o.response_mask) == len(o.response_logprobs) > 0
        assert set(o.response_mask) <= {0, 1}
        assert all(lp <= 0.0 for lp in o.response_logprobs)
        if o.extra_fields["skyrl_masked"]:
            assert sum(o.response_mask) == 0  # a loss-masked trajectory: no token enters VeRL's loss
        else:
            # observation tokens (mask 0) carry logprob 0.0, generated ones the sampler's
            assert all(lp == 0.0 for lp, m in zip(o.response_logprobs, o.response_mask) if m == 0)
    assert last.extra_fields["skyrl_is_last_step"] is True
    assert last.reward_score == last.extra_fields["skyrl_reward"] in (0.0, 1.0)
    assert last.num_turns == server.requests or len(outputs) > 1
    assert last.extra_fields["skyrl_finish_reason"]
    if not last.extra_fields["skyrl_masked"]:
        assert sum(last.response_mask) > 0
    # VeRL's own conversion of the output accepts it: reward on the last response token
    d = last.as_dict()
    assert d["responses"].shape == d["response_mask"].shape == d["rollout_log_probs"].shape
    assert float(d["rm_scores"][-1]) == last.reward_score


async def test_run_returns_one_output_for_verl(verl_cfg, sessions):
    """``run`` (what VeRL 0.9.1's worker calls) gives the last datum; errors name the bad row."""
    from verl.experimental.agent_loop.agent_loop import DictConfigWrap
    from verl.utils.dataset.rl_dataset import RLHFDataset

    from skyrl_core.errors import ConfigError
    from skyrl_core.default_plugins.engines.hf import HFEngine
    from skyrl_verl.agent_loop import HFServerManager, SkyrlAgentLoop

    engine = HFEngine("smollm2-135m-instruct", max_batch=2, device="cpu", dtype="float32", timeout_s=STALL_S)
    try:
        loop = SkyrlAgentLoop(trainer_config=DictConfigWrap(verl_cfg), server_manager=HFServerManager(engine),
                              tokenizer=engine.tokenizer, processor=None, dataset_cls=RLHFDataset,
                              data_config=DictConfigWrap(verl_cfg.data))
        with pytest.raises(ConfigError, match="task_index/instance_id"):
            await loop.run({"temperature": 1.0}, extra_info={})
        with pytest.raises(ConfigError, match="no train instance 'nope'"):
            await loop.run({"temperature": 1.0}, extra_info={"task_index": 0, "instance_id": "nope"})
    finally:
        await engine.close()
    sessions.assert_all_closed()  # a row that fails still closes its session (it leaked one per row)


class SeedRecorder:
    """Wraps HFServerManager (itself an adapter standing in for VeRL's server client) and records the seed of
    every generate request."""

    def __init__(self, inner):
        self.inner = inner
        self.seeds = []

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs):
        self.seeds.append(sampling_params.get("seed"))
        return await self.inner.generate(request_id, prompt_ids=prompt_ids, sampling_params=sampling_params,
                                         **kwargs)


def _loop(verl_cfg, server, tokenizer):
    from verl.experimental.agent_loop.agent_loop import DictConfigWrap
    from verl.utils.dataset.rl_dataset import RLHFDataset

    from skyrl_verl.agent_loop import SkyrlAgentLoop

    return SkyrlAgentLoop(trainer_config=DictConfigWrap(verl_cfg), server_manager=server, tokenizer=tokenizer,
                          processor=None, dataset_cls=RLHFDataset, data_config=DictConfigWrap(verl_cfg.data))


async def test_a_response_cut_at_response_length_is_loss_masked_and_samples_get_their_own_seeds(verl_cfg):
    """VeRL calls the loop once per sample with identical rows: each call must sample with its own seed (it
    was sampling.seed for every sample of a group). A response longer than response_length is cut there and
    its row loss-masked, as a max-token cut-off is on the local path (it was trained with the full reward)."""
    import copy

    from skyrl_core.default_plugins.engines.hf import HFEngine
    from skyrl_core.plugins import get_registry
    from skyrl_verl import agent_loop as agent_loop_mod

    cfg = copy.deepcopy(verl_cfg)
    cfg.actor_rollout_ref.rollout.response_length = 6
    engine = HFEngine("smollm2-135m-instruct", max_batch=2, device="cpu", dtype="float32", timeout_s=STALL_S)
    try:
        server = SeedRecorder(agent_loop_mod.HFServerManager(engine))
        loop = _loop(cfg, server, engine.tokenizer)
        instance = get_registry().get("tasks", "gsm8k").select(loop.skyrl_config.tasks[0].data)[0]
        row = {"extra_info": {"task_index": 0, "instance_id": instance.id, "split": "train"}, "raw_prompt": []}
        agent_loop_mod._SAMPLES_SEEN.clear()
        firsts = []
        for _ in range(2):
            server.seeds.clear()
            outputs = await loop.run_outputs({"temperature": 1.0, "logprobs": True}, **row)
            firsts.append(server.seeds[0])
            for o in outputs:
                assert len(o.response_ids) <= 6
                if o.extra_fields["skyrl_truncated"]:
                    assert sum(o.response_mask) == 0 and o.extra_fields["skyrl_masked"]
            assert any(o.extra_fields["skyrl_truncated"] for o in outputs)  # 48 max tokens do not fit in 6
        assert firsts[0] != firsts[1] and None not in firsts
        agent_loop_mod._SAMPLES_SEEN.clear()  # a fresh worker: the same seeds again (reproducible)
        server.seeds.clear()
        await loop.run_outputs({"temperature": 1.0, "logprobs": True}, **row)
        assert server.seeds[0] == firsts[0]
    finally:
        await engine.close()
