"""Packing transitions into training data: hand-built cases and real multi-turn transitions of SmolLM2."""

from __future__ import annotations

import pytest

from skyrl_core.postprocess import build_training_batch, pack_transitions
from skyrl_core.transitions import Trajectory, Transition


def T(inp, out, lps=None, new_context=False):
    return Transition(input_ids=list(inp), output_ids=list(out),
                      output_logprobs=None if lps is None else list(lps), finish_reason="stop",
                      new_context=new_context)


def traj(group, idx, transitions, reward, masked=False, error=None):
    t = Trajectory(instance_id=group, sample_index=idx, task="t", group_id=group, transitions=transitions,
                   reward=reward, masked=masked, error=error)
    return t


def test_shared_prefix_packs_into_one_datum():
    calls = [T([1, 2, 3], [4, 5], [-0.1, -0.2]),
             T([1, 2, 3, 4, 5, 6, 7], [8], [-0.3]),        # observation 6, 7 then generated 8
             T([1, 2, 3, 4, 5, 6, 7, 8, 9], [10, 11], [-0.4, -0.5])]
    (seq,) = pack_transitions(calls)
    assert seq["prompt_ids"] == [1, 2, 3]
    assert seq["response_ids"] == [4, 5, 6, 7, 8, 9, 10, 11]
    assert seq["response_mask"] == [1, 1, 0, 0, 1, 0, 1, 1]
    assert seq["rollout_logprobs"] == [-0.1, -0.2, 0.0, 0.0, -0.3, 0.0, -0.4, -0.5]
    assert seq["num_calls"] == 3


def test_context_reset_and_divergent_prefix_start_new_data():
    calls = [T([1, 2], [3], [-1.0]),
             T([1, 2, 3, 4], [5], [-1.0]),                 # extends
             T([9, 9], [6], [-1.0], new_context=True),      # reset (summary)
             T([9, 9, 6, 7], [8], None),                    # extends the reset datum; no logprobs
             T([9, 1, 6, 7, 8], [2], [-1.0])]               # re-tokenised history: does not extend
    seqs = pack_transitions(calls)
    assert [s["prompt_ids"] for s in seqs] == [[1, 2], [9, 9], [9, 1, 6, 7, 8]]
    assert [s["response_ids"] for s in seqs] == [[3, 4, 5], [6, 7, 8], [2]]
    assert [s["response_mask"] for s in seqs] == [[1, 0, 1], [1, 0, 1], [1]]
    assert seqs[1]["rollout_logprobs"] is None  # one packed call without logprobs -> none for the datum
    assert [s["num_calls"] for s in seqs] == [2, 2, 1]
    # a new_context flag wins even when the token prefix matches
    again = pack_transitions([T([1], [2]), T([1, 2, 3], [4], new_context=True)])
    assert len(again) == 2


def test_batch_advantages_masks_and_packing_metrics():
    shared = [T([1, 2, 3], [4, 5], [-0.1, -0.2]), T([1, 2, 3, 4, 5, 6], [7], [-0.3])]
    trajs = [
        traj("a", 0, shared, 1.0),
        traj("a", 1, [T([1, 2, 3], [9], [-0.5])], 0.0),
        traj("a", 2, [T([1, 2, 3], [8], [-0.5])], 0.0, masked=True),   # external limit: loss-masked
        traj("b", 0, [T([5], [6], [-1.0])], 1.0),                      # zero-advantage group b
        traj("b", 1, [T([5], [7], [-1.0])], 1.0),
        traj("c", 0, [], 0.0, masked=True, error="runtime failed"),     # failed before any call
        traj("c", 1, [T([3], [3], [-1.0])], 1.0),
    ]
    batch = build_training_batch(trajs)
    by_id = {d.trajectory_id: d for d in batch.data}
    assert set(by_id) == {"t:a#0", "t:a#1", "t:a#2"}  # group b skipped; c#0 has no transitions, so c#1 is alone
    assert by_id["t:a#0"].advantage == pytest.approx(1.0)       # 1 - mean(0, 0)
    assert by_id["t:a#1"].advantage == pytest.approx(-0.5)      # 0 - mean(1, 0): masked reward counts
    assert by_id["t:a#2"].loss_mask == 0 and by_id["t:a#1"].loss_mask == 1
    assert by_id["t:a#0"].response_mask == [1, 1, 0, 1] and by_id["t:a#0"].is_last_step
    m = batch.metrics
    assert m["zero_advantage_groups"] == 2 and m["masked_trajectories"] == 2 and m["failed_trajectories"] == 1
    assert m["trajectories_without_data"] == 1
    # kept data: a#0 unpacked 5 + 7 = 12 tokens, packed 7; a#1, a#2: 4 each
    assert m["tokens_unpacked"] == 20 and m["tokens_packed"] == 15
    assert m["packing_saving"] == pytest.approx(1 - 15 / 20)
    assert m["reward_mean"] == pytest.approx(4 / 7)
    keep_all = build_training_batch(trajs, skip_zero_advantage=False)
    assert len(keep_all.data) == 6
    # the failed-before-any-call sample is out of the baseline: c#1 has no baseline, advantage 0 (it was 1.0
    # when c#0's reward 0 counted, which a bridge recomputing advantages from the data never sees)
    assert {d.trajectory_id: d.advantage for d in keep_all.data}["t:c#1"] == 0.0


def test_a_non_finite_reward_fails_its_trajectory_not_the_step():
    calls = [T([1, 2], [3], [-0.1])]
    trajs = [traj("a", 0, calls, float("nan")), traj("a", 1, calls, 1.0), traj("a", 2, calls, 0.0),
             traj("b", 0, calls, float("inf")), traj("b", 1, calls, 1.0)]
    batch = build_training_batch(trajs, skip_zero_advantage=False)
    assert trajs[0].finish_reason == "error_eval" and "nan" in trajs[0].error and trajs[0].masked
    assert trajs[3].finish_reason == "error_eval" and trajs[0].reward == 0.0
    by_id = {d.trajectory_id: d for d in batch.data}
    assert by_id["t:a#0"].loss_mask == 0 and by_id["t:b#0"].loss_mask == 0
    assert by_id["t:a#1"].advantage == pytest.approx(1.0)  # 1 - mean(0, 0): the failed NaN counts as 0
    assert batch.metrics["failed_trajectories"] == 2.0


def test_all_failed_batch_is_empty_not_an_error():
    trajs = [traj("a", i, [], 0.0, masked=True, error="sandbox died") for i in range(3)]
    batch = build_training_batch(trajs)
    assert batch.data == [] and batch.metrics["failed_trajectories"] == 3
    assert batch.metrics["packing_saving"] == 0.0


@pytest.mark.slow
def test_real_multiturn_transitions_pack_with_exact_tokens():
    """Two real SmolLM2 calls with an observation between them pack into one datum whose tokens are exactly
    what the model saw and generated, and whose mask-1 tokens are exactly the generated ones."""
    import torch

    from skyrl_core.default_plugins.engines.models import load_causal_lm, load_tokenizer

    tok = load_tokenizer("smollm2-135m-instruct")
    model = load_causal_lm("smollm2-135m-instruct")
    torch.manual_seed(0)

    def call(ids):
        out = model.generate(torch.tensor([ids]), max_new_tokens=12, do_sample=True, return_dict_in_generate=True,
                             output_scores=True, pad_token_id=tok.eos_token_id)
        gen = out.sequences[0, len(ids):].tolist()
        lps = model.compute_transition_scores(out.sequences, out.scores, normalize_logits=True)[0].tolist()
        return T(ids, gen, lps)

    prompt = tok.apply_chat_template([{"role": "user", "content": "What is 48 / 2? Use python."}],
                                     add_generation_prompt=True)
    prompt = list(prompt["input_ids"] if hasattr(prompt, "keys") else prompt)
    first = call(prompt)
    obs = tok("\n<|im_start|>user\n[python] 24<|im_end|>\n<|im_start|>assistant\n",
              add_special_tokens=False)["input_ids"]
    second = call(first.input_ids + first.output_ids + obs)
    (seq,) = pack_transitions([first, second])
    assert seq["prompt_ids"] + seq["response_ids"] == second.input_ids + second.output_ids
    generated = [t for t, m in zip(seq["response_ids"], seq["response_mask"]) if m]
    assert generated == first.output_ids + second.output_ids
    assert all(lp <= 0 for lp in seq["rollout_logprobs"])
    batch = build_training_batch([traj("q", 0, [first, second], 1.0), traj("q", 1, [first], 0.0)])
    saving = batch.metrics["packing_saving"]
    assert saving == pytest.approx(1 - (len(second.input_ids) + len(second.output_ids) + len(prompt)
                                        + len(first.output_ids))
                                   / (2 * (len(prompt) + len(first.output_ids)) + len(second.input_ids)
                                      + len(second.output_ids)))
    assert saving > 0.25
