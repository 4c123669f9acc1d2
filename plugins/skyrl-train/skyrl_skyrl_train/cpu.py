"""SkyRL-train's own trainer on a machine without CUDA (``backend.options.device: cpu``; automatic without CUDA).

Everything that trains is SkyRL-train's: ``RayPPOTrainer.train`` (its loop, ``postprocess_generator_output``,
``convert_to_training_input``, ``fwd_logprobs_values_reward``, ``compute_advantages_and_returns``,
``train_critic_and_policy``), its ``WorkerDispatch`` and its FSDP2 policy (and reference) workers as Ray actors,
on the gloo backend. Three things bridge it to a CPU, each from outside SkyRL-train's source:

1. :func:`install_cuda_to_cpu_shim` (run in every Ray worker process through Ray's ``worker_process_setup_hook``,
   before SkyRL-train's worker modules are imported). The upstream lines that force it (``skyrl`` 0.4.0):

   - ``backends/skyrl_train/workers/worker.py:124-126``: ``init_process_group(backend="cpu:gloo,cuda:nccl")``;
     a CPU torch raises ``Distributed package doesn't have NCCL built in`` -> the ``cuda:nccl`` half is dropped
     when NCCL is not built in (gloo remains: the CPU half SkyRL-train asks for itself).
   - ``worker.py:134`` and ``distributed/fsdp_utils.py:256,259``: ``init_device_mesh("cuda", ...)`` -> ``"cpu"``.
   - ``distributed/fsdp_strategy.py:109``: ``torch.cuda.set_device(local_rank)`` (a CPU torch has no
     ``_cuda_setDevice``) -> no-op.
   - ``distributed/fsdp_utils.py:52,83``, ``fsdp_strategy.py:144``, ``worker.py:1090,1384,1473``:
     ``torch.cuda.current_device()`` (``AssertionError: Torch not compiled with CUDA enabled``) -> ``cpu``.
   - ``fsdp_strategy.py:132,146,452``: ``torch.cuda.synchronize()`` (same assertion) -> no-op.
   - ``worker.py:427``: ``rank % torch.cuda.device_count()`` (0 on a CPU: ZeroDivisionError) -> 1.
   - ``distributed/fsdp_utils.py:125``: ``buf.detach().cuda()`` (same assertion) -> the tensor itself.

   - ``workers/model_wrapper.py:13``: ``from flash_attn.bert_padding import pad_input, unpad_input`` (a CUDA
     build) -> a stand-in module whose two functions raise; they serve only the removal of microbatch padding,
     which is off here.

   ``torch.cuda.is_available()`` stays False, so every upstream branch that asks it keeps its CPU answer;
   ``torch.autocast(device_type="cuda")`` disables itself on a CPU torch (fp32: ``trainer.bf16=false``).

2. Ray is started with declared (logical) GPU resources, ``num_gpus`` = 3 x the policy's ranks (policy,
   reference, critic) (:func:`init_ray`): SkyRL-train places each worker actor with ``num_gpus``
   (``workers/worker.py:842-843``).
   The actors run on the CPU; no device is touched.

3. Weight sync. SkyRL-train pushes weights to its vLLM servers (``weight_sync/weight_senders.py:196`` imports
   ``vllm``; the client it talks to is an HTTP server group). Here rollouts come from skyrl's in-process hf engine
   (:class:`~skyrl_skyrl_train.engine.EngineInferenceClient`), so :class:`CpuWeightSyncDispatch` (a
   ``WorkerDispatch`` subclass) makes ``save_weights_for_sampler`` export the policy with SkyRL-train's own
   ``save_hf_model`` (the FSDP worker's HF export) and load that state dict into the hf engine, and makes
   ``init_weight_sync_state`` a no-op. The rollout logprobs are the hf engine's own (the sampler's).
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

SHIM_HOOK = "skyrl_skyrl_train.cpu.install_cuda_to_cpu_shim"
_PATCHED = "_skyrl_cuda_to_cpu"


def install_cuda_to_cpu_shim() -> bool:
    """Make SkyRL-train's FSDP workers' CUDA calls CPU calls in this process (see the module docstring for the
    upstream lines). Only on a torch without CUDA; returns True when it patched, False when CUDA is present or
    the shim is already installed. Idempotent."""
    import torch
    import torch.distributed as dist
    import torch.distributed.device_mesh as dm

    if torch.cuda.is_available() or getattr(torch.cuda, _PATCHED, False):
        return False
    init_pg = dist.init_process_group
    init_mesh = dm.init_device_mesh

    def init_process_group(*args: Any, backend: Any = None, **kwargs: Any) -> Any:
        if isinstance(backend, str) and "nccl" in backend and not dist.is_nccl_available():
            backend = ",".join(p for p in backend.split(",") if "nccl" not in p) or "gloo"
            if ":" in backend and "," not in backend:
                backend = backend.split(":", 1)[1]
        return init_pg(*args, backend=backend, **kwargs)

    def init_device_mesh(device_type: str, *args: Any, **kwargs: Any) -> Any:
        return init_mesh("cpu" if device_type == "cuda" else device_type, *args, **kwargs)

    _stub_flash_attn_padding()
    dist.init_process_group = init_process_group
    dm.init_device_mesh = init_device_mesh
    torch.cuda.current_device = lambda: torch.device("cpu")
    torch.cuda.set_device = lambda device: None
    torch.cuda.synchronize = lambda device=None: None
    torch.cuda.device_count = lambda: 1
    torch.Tensor.cuda = lambda self, *args, **kwargs: self
    setattr(torch.cuda, _PATCHED, True)
    return True


def _stub_flash_attn_padding() -> None:
    """``workers/model_wrapper.py:13`` imports ``flash_attn.bert_padding`` (``pad_input``, ``unpad_input``) at
    module level; flash-attn is a CUDA-only build. They serve only the removal of microbatch padding, which the
    CPU route turns off (``trainer.remove_microbatch_padding=false``). So, when flash-attn is absent,
    ``model_wrapper`` is imported once with a module named ``flash_attn.bert_padding`` whose two functions raise
    (naming that key), and the stand-in is removed from ``sys.modules`` right after: nothing else ever sees a
    ``flash_attn`` (transformers' ``is_flash_attn_*_available`` checks are evaluated, and cached, before the
    import)."""
    import importlib
    import importlib.util
    import sys
    import types
    import warnings

    if importlib.util.find_spec("flash_attn") is not None:
        return
    from . import compat

    compat._patch_typeddict()  # skyrl 0.4.0's TypedDicts on Python < 3.12, as compat.load does
    from transformers.utils import import_utils

    with warnings.catch_warnings():  # evaluate (and cache) every flash-attn check without the stand-in
        warnings.simplefilter("ignore")
        for name in dir(import_utils):
            if name.startswith("is_flash_attn") and callable(getattr(import_utils, name)):
                try:
                    getattr(import_utils, name)()
                except TypeError:  # the ones that take a version
                    pass

    def unavailable(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("flash-attn is not installed (SkyRL-train's CPU route): removing microbatch padding "
                           "needs it; keep trainer.remove_microbatch_padding=false")

    pkg = types.ModuleType("flash_attn")
    pkg.__path__ = []
    padding = types.ModuleType("flash_attn.bert_padding")
    padding.pad_input = padding.unpad_input = unavailable
    pkg.bert_padding = padding
    sys.modules.update({"flash_attn": pkg, "flash_attn.bert_padding": padding})
    try:
        importlib.import_module("skyrl.backends.skyrl_train.workers.model_wrapper")
    finally:
        del sys.modules["flash_attn"], sys.modules["flash_attn.bert_padding"]


FP32_PRECISION = {"param_dtype": "fp32", "reduce_dtype": "fp32", "buffer_dtype": "fp32"}


def cpu_overrides(n_ranks: int = 1) -> dict[str, Any]:
    """SkyRL-train keys the CPU route sets: no flash-attn, fp32, no microbatch padding removal (flash-attn's unpadding),
    the prompt loader in the trainer's process (no 8 worker processes on a small machine), no colocation (there
    is no GPU memory to share), ``n_ranks`` policy (and reference) ranks on one node."""
    return {
        "trainer.flash_attn": False,
        "trainer.bf16": False,
        # fp32 FSDP params too: with no mixed_precision section SkyRL-train's FSDP2 strategy casts the policy's
        # and reference's parameters to bf16 for every forward (skyrl/backends/skyrl_train/distributed/
        # fsdp_strategy.py:204-213) whatever trainer.bf16 says, so its recomputed logprobs differed from the fp32
        # hf engine's by 0.04-0.05 per token (its rollout_train_logprobs_abs_diff_mean)
        "trainer.policy.fsdp_config.mixed_precision": FP32_PRECISION,
        "trainer.ref.fsdp_config.mixed_precision": FP32_PRECISION,
        "trainer.remove_microbatch_padding": False,
        "data.dataloader.num_workers": 0,
        "generator.inference_engine.enable_ray_prometheus_stats": False,  # scrapes vLLM servers' /metrics
        "trainer.placement.colocate_all": False,
        "trainer.placement.colocate_policy_ref": False,
        "trainer.placement.policy_num_gpus_per_node": n_ranks,
        "trainer.placement.ref_num_gpus_per_node": n_ranks,
        "trainer.placement.policy_num_nodes": 1,
        "trainer.placement.ref_num_nodes": 1,
        "generator.inference_engine.num_engines": n_ranks,
        "generator.inference_engine.tensor_parallel_size": 1,
    }


def init_ray(cfg: Any, *, n_ranks: int = 1, num_cpus: int | None = None) -> None:
    """Start a local Ray for the CPU route as SkyRL-train's ``initialize_ray`` does (its runtime environment and
    its registries), plus ``n_ranks`` declared GPU resources and the shim as every worker's setup hook."""
    import ray

    from skyrl.backends.skyrl_train.utils.ppo_utils import sync_registries
    from skyrl.train.utils.utils import prepare_runtime_environment

    env_vars = dict(prepare_runtime_environment(cfg))
    for key in ("PYTHONPATH", "SKYRL_LOAD_PLUGINS", "OMP_NUM_THREADS", "HF_HUB_OFFLINE", "SKYRL_REQUIRE_SANDBOX",
                "SKYRL_CACHE"):
        if os.environ.get(key):
            env_vars[key] = os.environ[key]
    env_vars.setdefault("OMP_NUM_THREADS", "1")
    env_vars["SKYRL_DUMP_INFRA_LOG_TO_STDOUT"] = "1"
    # without colocation each policy, reference and critic rank is placed with a whole (declared) GPU
    ray.init(num_cpus=num_cpus or 3 * n_ranks + 2, num_gpus=3 * n_ranks, include_dashboard=False,
             runtime_env={"env_vars": env_vars, "worker_process_setup_hook": SHIM_HOOK}, log_to_driver=True)
    sync_registries()


def _load_safetensors_dir(path: Path) -> dict[str, Any]:
    from safetensors.torch import load_file

    state: dict[str, Any] = {}
    for f in sorted(path.glob("*.safetensors")):
        state.update(load_file(str(f)))
    if not state:
        raise FileNotFoundError(f"SkyRL-train's save_hf_model wrote no safetensors under {path}")
    return state


def dispatch_class() -> type:
    """:class:`CpuWeightSyncDispatch`, built lazily (importing this module does not import SkyRL-train)."""
    from skyrl.backends.skyrl_train.workers.worker_dispatch import WorkerDispatch

    class CpuWeightSyncDispatch(WorkerDispatch):
        """SkyRL-train's ``WorkerDispatch`` whose weight sync exports the policy with its own ``save_hf_model``
        and loads it into the in-process hf engine behind the client (``client.engine.update_weights``)."""

        def init_weight_sync_state(self, inference_engine_client: Any) -> None:
            self._inference_engine_client = inference_engine_client

        async def save_weights_for_sampler(self, model_id: str | None = None) -> None:
            import time

            start = time.perf_counter()
            tmp = Path(tempfile.mkdtemp(prefix="skyrl-weight-sync-"))
            try:
                self.save_hf_model("policy", str(tmp), self._sync_tokenizer)
                state = _load_safetensors_dir(tmp)
                await self._inference_engine_client.engine.update_weights(state)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
            self.weight_syncs = getattr(self, "weight_syncs", 0) + 1
            self.last_weight_sync_seconds = time.perf_counter() - start

    return CpuWeightSyncDispatch


def trainer_class() -> type:
    """SkyRL-train's ``RayPPOTrainer`` whose ``build_models`` (its own) is followed by making its dispatch a
    :class:`CpuWeightSyncDispatch` (same object, same state; only the weight-sync methods differ)."""
    from skyrl.train.trainer import RayPPOTrainer

    dispatch_cls = dispatch_class()

    class CpuRayPPOTrainer(RayPPOTrainer):
        def build_models(self, PolicyWorker, CriticWorker, RefWorker):  # noqa: N803 - upstream's names
            super().build_models(PolicyWorker, CriticWorker, RefWorker)
            self.dispatch.__class__ = dispatch_cls
            self.dispatch._sync_tokenizer = self.tokenizer

    return CpuRayPPOTrainer
