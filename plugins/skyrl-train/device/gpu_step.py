"""One SkyRL-train training step through ``skyrl train CONFIG backend=skyrl-train``: SkyRL-train's Ray trainer,
FSDP workers and vLLM servers with skyrl's agent as the generator. Needs a CUDA GPU, vllm and flash-attn; exits 2
with the reason elsewhere.

A device check, not a test: CI has no GPU, so a pytest test of it could only ever skip (#31 item 7). Run it on
a CUDA machine whose venv has this plugin's pinned upstreams and the GPU packages named below:
``python plugins/skyrl-train/device/gpu_step.py [OUTPUT_DIR]``. Exit 0: one step trained and checkpointed; exit 2:
this machine cannot run it (the reason is printed); anything else: the step failed. It has never run (no
machine with those packages was available: plugins/skyrl-train/README.md, "What never ran here")."""

from __future__ import annotations

import importlib.util
import sys
import tempfile
from pathlib import Path


def _why_not() -> str | None:
    import torch

    if not torch.cuda.is_available():
        return "no CUDA GPU: SkyRL-train's FSDP workers and vLLM inference servers need one"
    for module, role in (("vllm", "SkyRL-train's inference engine"), ("flash_attn", "SkyRL-train's model wrapper")):
        if importlib.util.find_spec(module) is None:
            return f"{module} ({role}) is not installed in this environment"
    return None


def one_step(tmp_path: Path) -> None:
    """Train one step into ``tmp_path``; AssertionError when no step-1 checkpoint is written."""
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


if __name__ == "__main__":
    reason = _why_not()
    if reason:
        print(f"cannot run here: {reason}", file=sys.stderr)
        sys.exit(2)
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp(prefix="gpu-step-"))
    one_step(out)
    print(f"one step trained and checkpointed: {out}")
