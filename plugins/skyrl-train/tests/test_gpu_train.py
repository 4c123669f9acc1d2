"""One SkyRL-train training step through ``skyrl train CONFIG backend=skyrl-train``: SkyRL-train's Ray trainer,
FSDP workers and vLLM servers with skyrl's agent as the generator. Needs a CUDA GPU, vllm and flash-attn; skips
with the reason elsewhere."""

from __future__ import annotations

import importlib.util

import pytest


def _why_not() -> str | None:
    import torch

    if not torch.cuda.is_available():
        return "no CUDA GPU: SkyRL-train's FSDP workers and vLLM inference servers need one"
    for module, role in (("vllm", "SkyRL-train's inference engine"), ("flash_attn", "SkyRL-train's model wrapper")):
        if importlib.util.find_spec(module) is None:
            return f"{module} ({role}) is not installed in this environment"
    return None


@pytest.mark.slow
@pytest.mark.gpu
def test_one_skyrl_train_step_on_gpu(tmp_path):
    reason = _why_not()
    if reason:
        pytest.skip(reason)
    from skyrl_core.config import config_from_dict
    from skyrl_skyrl_train.launcher import launch

    config = config_from_dict({
        "model": "smollm2-135m-instruct", "engine": {"type": "vllm"},
        "tasks": [{"name": "gsm8k", "data": {"split": "test", "limit": 2}, "eval_data": {"split": "test", "limit": 2}}],
        "agent": {"max_turns": 2, "max_context_tokens": 1024},
        "sampling": {"temperature": 1.0, "max_tokens": 64, "n_samples": 2},
        "backend": {"type": "skyrl-train", "advantage": "grpo", "tis_cap": 2.0,
                    "options": {"skyrl_train_overrides": {
                        "generator.inference_engine.gpu_memory_utilization": 0.4,
                        "trainer.placement.colocate_all": True}}},
        "train": {"steps": 1, "batch_size": 2, "eval_every": 0, "eval_at_start": False, "checkpoint_every": 1},
    })
    launch(config, output=tmp_path, n_gpus_per_node=1)
    steps = sorted((tmp_path / "checkpoints").glob("global_step_*"))
    assert steps and steps[-1].name == "global_step_1", list((tmp_path / "checkpoints").iterdir())
