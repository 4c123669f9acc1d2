"""TrainingBatch <-> VeRL DataProto, checked against the real ``verl.DataProto`` and VeRL's own helpers."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from skyrl_core.postprocess import build_training_batch
from skyrl_core.transitions import Datum, Trajectory, TrainingBatch, Transition
from skyrl_verl.convert import ConversionError, from_dataproto, to_dataproto


def _chat(tokenizer, question: str) -> list[int]:
    return list(tokenizer.apply_chat_template([{"role": "user", "content": question}], add_generation_prompt=True,
                                              tokenize=True, return_dict=False))


def _ids(tokenizer, text: str) -> list[int]:
    return tokenizer.encode(text, add_special_tokens=False)


def _trajectories(tokenizer) -> list[Trajectory]:
    """Two groups: a two-turn trajectory (packed into one datum), a one-turn one, and one with a context reset
    (two datums); logprobs are the engine's kind of numbers (negative floats)."""
    rng = np.random.default_rng(0)

    def lp(n):
        return [float(x) for x in -rng.exponential(0.5, n)]

    p1 = _chat(tokenizer, "What is 2 + 3?")
    o1 = _ids(tokenizer, '<tool_call>{"name": "python", "arguments": {"code": "print(2+3)"}}</tool_call><|im_end|>')
    obs = _ids(tokenizer, "\n<|im_start|>user\n<tool_response>5</tool_response><|im_end|>\n<|im_start|>assistant\n")
    o2 = _ids(tokenizer, "The answer is 5.<|im_end|>")
    t_a = Trajectory(instance_id="q1", sample_index=0, task="gsm8k", group_id="g1", reward=1.0, transitions=[
        Transition(p1, o1, lp(len(o1)), "stop"), Transition(p1 + o1 + obs, o2, lp(len(o2)), "stop")])
    o3 = _ids(tokenizer, "It is 6.<|im_end|>")
    t_b = Trajectory(instance_id="q1", sample_index=1, task="gsm8k", group_id="g1", reward=0.0,
                     transitions=[Transition(p1, o3, lp(len(o3)), "stop")])
    p2 = _chat(tokenizer, "Summarise the first chunk.")
    o4 = _ids(tokenizer, "Chunk one is about cats.<|im_end|>")
    p3 = _chat(tokenizer, "Memory: cats. Next chunk: dogs. Answer: what animals?")
    o5 = _ids(tokenizer, "Cats and dogs.<|im_end|>")
    t_c = Trajectory(instance_id="q2", sample_index=0, task="memagent", group_id="g2", reward=0.5, transitions=[
        Transition(p2, o4, lp(len(o4)), "stop"), Transition(p3, o5, lp(len(o5)), "stop", new_context=True)])
    t_d = Trajectory(instance_id="q2", sample_index=1, task="memagent", group_id="g2", reward=0.0, masked=True,
                     finish_reason="max_turns", transitions=[Transition(p2, o3, lp(len(o3)), "length")])
    return [t_a, t_b, t_c, t_d]


@pytest.fixture
def batch(tokenizer) -> TrainingBatch:
    return build_training_batch(_trajectories(tokenizer), advantage="rloo")


def test_layout_matches_verl_rollout_layout(batch, tokenizer):
    from verl import DataProto
    from verl.utils.model import compute_position_id_with_mask

    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    dp = to_dataproto(batch, pad_token_id=pad)
    assert isinstance(dp, DataProto)
    dp.check_consistency()
    assert len(dp) == len(batch.data) == 5  # the context reset made an extra row
    P = max(len(d.prompt_ids) for d in batch.data)
    R = max(len(d.response_ids) for d in batch.data)
    assert dp.batch["prompts"].shape == (5, P) and dp.batch["responses"].shape == (5, R)
    assert dp.batch["input_ids"].shape == (5, P + R)
    for i, d in enumerate(batch.data):
        p, n = len(d.prompt_ids), len(d.response_ids)
        # prompt left-padded, response right-padded
        assert dp.batch["prompts"][i, P - p:].tolist() == d.prompt_ids
        assert (dp.batch["prompts"][i, : P - p] == pad).all()
        assert dp.batch["responses"][i, :n].tolist() == d.response_ids
        assert (dp.batch["responses"][i, n:] == pad).all()
        assert dp.batch["attention_mask"][i].tolist() == [0] * (P - p) + [1] * (p + n) + [0] * (R - n)
        # reward on the last response token only
        scores = dp.batch["token_level_scores"][i]
        assert scores[n - 1].item() == pytest.approx(d.reward) and float(scores.abs().sum()) == pytest.approx(
            abs(d.reward))
        assert dp.batch["rollout_log_probs"][i, :n].tolist() == pytest.approx(d.rollout_logprobs, abs=1e-6)
        expect_mask = [m * d.loss_mask for m in d.response_mask] + [0] * (R - n)
        assert dp.batch["response_mask"][i].tolist() == expect_mask
        assert dp.non_tensor_batch["uid"][i] == d.group_id
        assert dp.non_tensor_batch["trajectory_id"][i] == d.trajectory_id
    # VeRL's own position-id helper agrees; positions restart at 0 on the first real token
    assert torch.equal(dp.batch["position_ids"], compute_position_id_with_mask(dp.batch["attention_mask"]))
    first = P - len(batch.data[0].prompt_ids)
    assert dp.batch["position_ids"][0, first].item() == 0
    # the packed two-turn datum keeps the observation out of the loss
    packed = batch.data[0]
    assert 0 in packed.response_mask and packed.num_calls == 2
    assert dp.batch["response_mask"][0].sum().item() == sum(packed.response_mask)


def test_context_reset_rows_share_ids(batch):
    dp = to_dataproto(batch)
    traj = dp.non_tensor_batch["trajectory_id"]
    reset = "memagent:q2#0"
    rows = [i for i in range(len(dp)) if traj[i] == reset]
    assert len(rows) == 2
    assert set(dp.non_tensor_batch["uid"][rows]) == {"g2"}
    assert dp.non_tensor_batch["is_last_step"][rows].tolist() == [False, True]
    assert dp.non_tensor_batch["reward"][rows].tolist() == [0.5, 0.5]
    # the loss-masked trajectory keeps its tokens but none enter VeRL's loss
    masked = [i for i in range(len(dp)) if traj[i] == "memagent:q2#1"][0]
    assert dp.non_tensor_batch["loss_mask"][masked] == 0
    assert dp.batch["response_mask"][masked].sum() == 0 and dp.batch["skyrl_generated_mask"][masked].sum() > 0


def test_round_trip_is_exact(batch):
    back = from_dataproto(to_dataproto(batch))
    assert len(back) == len(batch)
    for a, b in zip(batch.data, back.data):
        assert (a.prompt_ids, a.response_ids, a.response_mask) == (b.prompt_ids, b.response_ids, b.response_mask)
        assert b.rollout_logprobs == pytest.approx(a.rollout_logprobs, abs=1e-6)
        assert (a.reward, a.advantage, a.trajectory_id, a.group_id, a.is_last_step, a.loss_mask, a.num_calls) == (
            b.reward, b.advantage, b.trajectory_id, b.group_id, b.is_last_step, b.loss_mask, b.num_calls)
    assert back.metrics == batch.metrics


def test_survives_verl_chunk_and_concat(batch):
    from verl import DataProto

    dp = to_dataproto(batch, prompt_length=256, response_length=128)
    assert dp.batch["prompts"].shape[1] == 256 and dp.batch["responses"].shape[1] == 128
    parts = dp.chunk(5)
    joined = DataProto.concat(parts)
    back = from_dataproto(joined)
    assert [d.response_ids for d in back.data] == [d.response_ids for d in batch.data]
    assert [d.prompt_ids for d in back.data] == [d.prompt_ids for d in batch.data]


def test_without_logprobs_and_verl_native_rows(tokenizer):
    d = Datum(prompt_ids=[1, 2, 3], response_ids=[4, 5], response_mask=[1, 1], rollout_logprobs=None, reward=2.0,
              advantage=0.0, trajectory_id="t", group_id="g", is_last_step=True)
    dp = to_dataproto(TrainingBatch(data=[d]))
    assert "rollout_log_probs" not in dp.batch.keys()
    # a VeRL-produced row carries only VeRL's keys: reward from rm_scores, uid as group, generated mask
    native = dp.select(batch_keys=["prompts", "responses", "attention_mask", "response_mask"],
                       non_tensor_batch_keys=["uid"])
    native.batch["rm_scores"] = dp.batch["token_level_scores"]
    back = from_dataproto(native).data[0]
    assert (back.prompt_ids, back.response_ids, back.reward, back.group_id) == ([1, 2, 3], [4, 5], 2.0, "g")
    assert back.trajectory_id == "g/0" and back.rollout_logprobs is None


def test_errors_name_the_culprit():
    with pytest.raises(ConversionError, match="empty TrainingBatch"):
        to_dataproto(TrainingBatch())
    bad = Datum(prompt_ids=[1], response_ids=[2, 3], response_mask=[1], rollout_logprobs=None, reward=0.0,
                advantage=0.0, trajectory_id="t9", group_id="g", is_last_step=True)
    with pytest.raises(ConversionError, match="datum 0 .*t9.*response_mask"):
        to_dataproto(TrainingBatch(data=[bad]))
    ok = Datum(prompt_ids=[1, 2, 3], response_ids=[2], response_mask=[1], rollout_logprobs=None, reward=0.0,
               advantage=0.0, trajectory_id="t", group_id="g", is_last_step=True)
    with pytest.raises(ConversionError, match="prompt_length=2"):
        to_dataproto(TrainingBatch(data=[ok]), prompt_length=2)
