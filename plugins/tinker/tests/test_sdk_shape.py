"""The installed tinker SDK accepts every call the bridge makes, argument for argument (run with 0.25.0 in CI
and checked by hand with 0.38.0, the hosted service's current SDK), and its types take the bridge's values."""

from __future__ import annotations

import inspect

import pytest
import tinker

CALLS = [
    (tinker.ServiceClient, "__init__", (), {"base_url": "http://127.0.0.1:1", "api_key": "tml-x"}),
    (tinker.ServiceClient, "create_sampling_client", (), {"base_model": "m"}),
    (tinker.ServiceClient, "create_sampling_client", (), {"model_path": "tinker://m/s"}),
    (tinker.ServiceClient, "create_lora_training_client", (),
     {"base_model": "m", "rank": 8, "seed": 0, "train_mlp": True, "train_attn": True, "train_unembed": True}),
    (tinker.ServiceClient, "create_training_client_from_state_with_optimizer", ("tinker://m/weights/s",), {}),
    (tinker.SamplingClient, "sample", ("prompt", 1, "params"), {}),
    (tinker.SamplingClient, "compute_logprobs", ("prompt",), {}),
    (tinker.TrainingClient, "forward_backward", ([], "ppo", {"clip_low_threshold": 0.8}), {}),
    (tinker.TrainingClient, "optim_step", (), {"adam_params": "adam"}),
    (tinker.TrainingClient, "save_weights_for_sampler", ("name",), {"ttl_seconds": None}),
    (tinker.TrainingClient, "save_state", ("name",), {"ttl_seconds": None}),
]


@pytest.mark.parametrize("cls, method, args, kwargs", CALLS, ids=[f"{c.__name__}.{m}" for c, m, _, _ in CALLS])
def test_the_sdk_takes_the_bridges_arguments(cls, method, args, kwargs):
    inspect.signature(getattr(cls, method)).bind("self", *args, **kwargs)


def test_the_sdk_types_take_the_bridges_values():
    params = tinker.SamplingParams(max_tokens=6, temperature=1.0, top_p=1.0, top_k=-1, seed=None, stop=[2])
    assert params.stop == [2]
    assert tinker.SamplingParams(max_tokens=6, stop=["</x>", "<|im_end|>"]).stop == ["</x>", "<|im_end|>"]
    adam = tinker.AdamParams(learning_rate=1e-4, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.0,
                             grad_clip_norm=1.0)
    assert adam.grad_clip_norm == 1.0
    assert set(tinker.types.StopReason.__args__) == {"stop", "length"}  # what skyrl_tinker.engine maps
    assert {"importance_sampling", "ppo"} <= set(tinker.types.LossFnType.__args__)
