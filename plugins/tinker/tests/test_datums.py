"""TrainingBatch -> tinker.Datum against the real SDK types: the shift, the masks, dtypes and shapes."""

from __future__ import annotations

import numpy as np
import pytest
import tinker

from skyrl_core.errors import SkyrlError
from skyrl_core.transitions import Datum, TrainingBatch
from skyrl_tinker.datums import convert_batch, shifted_arrays, split, to_datum


def two_turn_datum(**kw) -> Datum:
    # prompt [10, 11, 12]; response: model [20, 21], observation [30, 31], model [22]
    values = dict(prompt_ids=[10, 11, 12], response_ids=[20, 21, 30, 31, 22], response_mask=[1, 1, 0, 0, 1],
                  rollout_logprobs=[-0.5, -1.5, 0.0, 0.0, -2.5], reward=1.0, advantage=0.75,
                  trajectory_id="t#0", group_id="g", is_last_step=True)
    values.update(kw)
    return Datum(**values)


def test_targets_are_the_next_tokens_and_weights_mark_model_tokens():
    a = shifted_arrays(two_turn_datum())
    assert a["input_ids"].tolist() == [10, 11, 12, 20, 21, 30, 31]
    assert a["target_tokens"].tolist() == [11, 12, 20, 21, 30, 31, 22]
    assert a["weights"].tolist() == [0, 0, 1, 1, 0, 0, 1]
    assert a["logprobs"].tolist() == [0, 0, -0.5, -1.5, 0, 0, -2.5]
    assert a["advantages"].tolist() == [0, 0, 0.75, 0.75, 0, 0, 0.75]
    # every weighted target is a generated token, with its own sampler logprob
    for j in np.flatnonzero(a["weights"]):
        k = j - 2  # target j is response token j - (P - 1)
        assert a["target_tokens"][j] == [20, 21, 30, 31, 22][k]


def test_real_sdk_datum_dtypes_and_shapes():
    d = to_datum(two_turn_datum())
    assert isinstance(d, tinker.Datum)
    assert d.model_input.to_ints() == [10, 11, 12, 20, 21, 30, 31]
    inputs = d.loss_fn_inputs
    assert set(inputs) == {"target_tokens", "weights", "logprobs", "advantages"}
    assert inputs["target_tokens"].dtype == "int64"
    for key in ("weights", "logprobs", "advantages"):
        assert inputs[key].dtype == "float32"
    for key, value in inputs.items():
        assert value.to_numpy().shape == (7,), key
    assert inputs["target_tokens"].to_numpy().dtype == np.int64
    assert inputs["logprobs"].to_numpy()[3] == pytest.approx(-1.5)


def test_masked_and_empty_data_are_left_out():
    batch = TrainingBatch(data=[two_turn_datum(), two_turn_datum(loss_mask=0, trajectory_id="t#1"),
                                two_turn_datum(response_mask=[0, 0, 0, 0, 0], trajectory_id="t#2"),
                                two_turn_datum(advantage=-0.25, trajectory_id="t#3")])
    out = convert_batch(batch)
    assert out.sources == [0, 3]
    assert out.skipped == 2
    assert out.tokens == 6
    assert out.datums[1].loss_fn_inputs["advantages"].to_numpy().tolist() == [0, 0, -0.25, -0.25, 0, 0, -0.25]


@pytest.mark.parametrize("change, culprit", [
    (dict(prompt_ids=[]), "no prompt token"),
    (dict(rollout_logprobs=None), "no sampler logprobs"),
    (dict(rollout_logprobs=[-1.0]), "1 logprobs for 5 response tokens"),
    (dict(response_mask=[1, 1]), "response_mask has 2 entries"),
])
def test_bad_datum_names_the_trajectory_and_the_problem(change, culprit):
    with pytest.raises(SkyrlError, match=culprit) as info:
        shifted_arrays(two_turn_datum(**change))
    assert "t#0" in str(info.value)


def test_split_keeps_order_and_sizes():
    assert split(list(range(5)), 2) == [[0, 1, 2], [3, 4]]
    assert split(list(range(2)), 4) == [[0], [1]]
    assert split([], 3) == [[]]
