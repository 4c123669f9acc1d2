"""The launcher's CPU bridge (skyrl_verl.cpu): VeRL's own platform registry picks the ``cpu`` platform in a fresh
process, VeRL's FSDP engine is selected for it, the one shim makes VeRL's process-group backend string valid on a
real gloo group, and the launcher adds the CPU overrides VeRL's config accepts."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest

PROBE = r"""
import json, os
from skyrl_verl.cpu import CPU_ENV
os.environ.update(CPU_ENV)
import torch, torch.distributed as dist
from verl.utils.device import get_device_name, get_nccl_backend, get_device_id, get_resource_name
from verl.workers.engine.base import EngineRegistry
from verl.workers.engine.fsdp.transformer_impl import FSDPEngineWithLMHead
from verl.utils.distributed import initialize_global_process_group_ray
os.environ.update({"RANK": "0", "WORLD_SIZE": "1", "DIST_INIT_METHOD": "tcp://127.0.0.1:%d"})
initialize_global_process_group_ray()  # VeRL's own call: builds "cpu:gloo,cpu:gloo" (verl/utils/distributed.py:89)
t = torch.ones(3)
dist.all_reduce(t)
out = {"device": get_device_name(), "backend": get_nccl_backend(), "device_id": str(get_device_id()),
       "resource": get_resource_name(), "group_backend": str(dist.get_backend()), "sum": t.tolist(),
       "engine": EngineRegistry.get_engine_cls("language_model", "fsdp2") is FSDPEngineWithLMHead}
dist.destroy_process_group()
print("RESULT " + json.dumps(out))
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_verl_runs_its_own_gloo_group_and_fsdp_engine_on_the_cpu_platform():
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VERL_", "RANK", "WORLD_SIZE"))}
    proc = subprocess.run([sys.executable, "-c", PROBE % _free_port()], env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")][-1]
    out = json.loads(line[len("RESULT "):])
    assert out == {"device": "cpu", "backend": "gloo", "device_id": "cpu", "resource": "GPU",
                   "group_backend": "cpu:gloo", "sum": [1.0, 1.0, 1.0], "engine": True}


def test_shim_passes_each_device_backend_once_and_leaves_other_backends_alone():
    from skyrl_verl import cpu

    seen = []

    def record(*args, **kwargs):
        seen.append(kwargs.get("backend"))

    init = cpu._one_backend_per_device(record)
    init(backend="cpu:gloo,cpu:gloo")
    init(backend="cpu:gloo,cuda:nccl")
    init(backend="gloo")
    init()
    assert seen == ["cpu:gloo", "cpu:gloo,cuda:nccl", "gloo", None]
    assert cpu.PlatformCPU().is_platform_available() is False  # never auto-detected: only VERL_PLATFORM=cpu


def test_cpu_launch_config_composes_with_verl():
    from skyrl_core.config import load_config
    from skyrl_verl.launcher import build_verl_config

    config = load_config("verl:gsm8k", ["engine=vllm", "backend.options.verl_overrides=[trainer.device=cpu]"])
    cfg = build_verl_config(config, on_cpu=True, n_gpus_per_node=2)
    assert cfg.actor_rollout_ref.actor.strategy == cfg.actor_rollout_ref.ref.strategy == "fsdp2"
    assert cfg.actor_rollout_ref.model.override_config.attn_implementation == "eager"
    assert cfg.actor_rollout_ref.rollout.tensor_model_parallel_size == 1
    assert cfg.actor_rollout_ref.rollout.enable_sleep_mode is False  # vLLM's CPU platform refuses it
    assert cfg.trainer.use_v1 is False and cfg.trainer.device == "cpu"
    assert cfg.ray_kwargs.ray_init.num_gpus == 2 and cfg.data.dataloader_num_workers == 0
    plain = build_verl_config(config)
    assert plain.trainer.use_v1 is True and plain.actor_rollout_ref.actor.strategy == "fsdp"


def test_cpu_launch_without_a_rollout_engine_names_the_package(tmp_path, monkeypatch):
    import importlib.util

    from skyrl_core.config import load_config
    from skyrl_core.errors import SkyrlError
    from skyrl_verl.launcher import launch

    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vllm is installed in this environment")
    with pytest.raises(SkyrlError, match="needs the python package 'vllm'.*verl/workers/rollout/base.py"):
        launch(load_config("verl:gsm8k", ["engine=vllm"]), output_dir=str(tmp_path))
