"""One VeRL training step through ``skyrl verl launch``: VeRL's Ray trainer, FSDP actor and vLLM servers with
skyrl's agent loop inside. Needs a CUDA GPU and vllm; exits 2 with the reason elsewhere.

A device check, not a test: CI has no GPU, so a pytest test of it could only ever skip (#31 item 7). Run it on
a CUDA machine whose venv has this plugin's pinned upstreams and the GPU packages named below:
``python plugins/verl/device/gpu_step.py [OUTPUT_DIR]``. Exit 0: one step trained and checkpointed; exit 2:
this machine cannot run it (the reason is printed); anything else: the step failed. It has never run (no
machine with those packages was available: plugins/verl/README.md, "What never ran here")."""

from __future__ import annotations

import importlib.util
import json
import sys
import tempfile
from pathlib import Path


def _why_not() -> str | None:
    import torch

    if not torch.cuda.is_available():
        return "no CUDA GPU: VeRL's FSDP actor and vLLM rollout servers need one"
    if importlib.util.find_spec("vllm") is None:
        return "vllm (VeRL's inference engine) is not installed in this environment"
    return None


def one_step(tmp_path: Path) -> None:
    """Train one step into ``tmp_path``; AssertionError when no step-1 checkpoint is written."""
    from skyrl_core.config import load_config
    from skyrl_verl.launcher import REPO_EXAMPLE, launch

    config = load_config(REPO_EXAMPLE, ["engine=vllm", "train.steps=1", "train.batch_size=2", "data.limit=2",
                                        "eval_data.limit=2", "train.eval_every=0", "train.eval_at_start=false",
                                        "train.checkpoint_every=1", "sampling.n_samples=2",
                                        "agent.max_context_tokens=1024", "sampling.max_tokens=64",
                                        "backend.options.verl_overrides=[actor_rollout_ref.rollout."
                                        "gpu_memory_utilization=0.4,actor_rollout_ref.rollout.agent.num_workers=1]"])
    launch(config, output_dir=str(tmp_path), n_gpus_per_node=1)
    steps = sorted((tmp_path / "checkpoints").glob("global_step_*"))
    assert steps and steps[-1].name == "global_step_1", list((tmp_path / "checkpoints").iterdir())
    tracker = tmp_path / "checkpoints" / "latest_checkpointed_iteration.txt"
    assert json.loads(tracker.read_text()) == 1


if __name__ == "__main__":
    reason = _why_not()
    if reason:
        print(f"cannot run here: {reason}", file=sys.stderr)
        sys.exit(2)
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp(prefix="gpu-step-"))
    one_step(out)
    print(f"one step trained and checkpointed: {out}")
