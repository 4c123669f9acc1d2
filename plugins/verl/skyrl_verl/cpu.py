"""VeRL's trainer on a CPU: a ``cpu`` platform for VeRL's own platform registry (the launcher's CPU shim).

VeRL 0.9.1 routes every device call through ``verl.utils.device.get_platform()``
(``verl/plugin/platform/platform_manager.py``); its registry holds ``nvidia``, ``huawei`` and ``amd`` only and
falls back to ``nvidia`` (``torch.cuda``, NCCL) where none is present. That registry is VeRL's extension point for
new hardware (``PlatformRegistry.register``, loaded in every process through ``VERL_USE_EXTERNAL_MODULES`` and
chosen with ``VERL_PLATFORM``), so the CPU bridge is this class plus two shims
(:func:`_one_backend_per_device` and :func:`_unpinned_offload_policy`, each naming the upstream lines that force
it): device ``cpu``, collectives on
gloo, seeds and synchronisation from ``torch``, no allocator, no IPC, no profiler ranges. Ray schedules VeRL's
workers on its ``GPU`` resource; the launcher starts a local Ray with logical ``num_gpus`` slots (one per FSDP
rank), which Ray grants as bookkeeping only (no device is touched).

Environment: :data:`CPU_ENV` (set by :func:`skyrl_verl.launcher.launch` before Ray starts, so every worker inherits
it). Importing this module registers the platform and installs the shim (once per process).
"""

from __future__ import annotations

import contextlib
import types
from typing import Any, Optional

import torch
import torch.distributed
from verl.plugin.platform.platform_base import PlatformBase
from verl.plugin.platform.platform_manager import PlatformRegistry

PLATFORM = "cpu"
# what every VeRL process needs to pick this platform: the module to import and the platform to use
# VeRL's FSDP engine registers itself for devices cuda/npu only (verl/workers/engine/fsdp/transformer_impl.py:1143,
# :1594); VeRL's own override (verl/workers/engine/base.py:404-407) selects it by name, and the engine itself asks
# the platform for its device, so it runs on the CPU unchanged
CPU_ENV = {"VERL_USE_EXTERNAL_MODULES": __name__, "VERL_PLATFORM": PLATFORM,
           "VERL_ENGINE_DEVICE": "cuda", "VERL_ENGINE_VENDOR": "nvidia"}


def _cpu_device_module() -> types.SimpleNamespace:
    """The subset of a ``torch.cuda``-like module VeRL calls through ``get_torch_device()``, for the CPU: memory
    figures are 0 (no device memory), seeding and synchronisation are torch's own."""
    zero = lambda *a, **k: 0  # noqa: E731
    nothing = lambda *a, **k: None  # noqa: E731
    return types.SimpleNamespace(
        is_available=lambda: True, device_count=lambda: 1, current_device=lambda: torch.device("cpu"),
        set_device=nothing,
        synchronize=nothing, empty_cache=nothing, manual_seed=torch.manual_seed, manual_seed_all=torch.manual_seed,
        memory_allocated=zero, memory_reserved=zero, max_memory_allocated=zero, max_memory_reserved=zero,
        reset_peak_memory_stats=nothing, mem_get_info=lambda *a, **k: (0, 0),
        set_per_process_memory_fraction=nothing, ipc_collect=nothing,
        # VeRL's MFU estimate looks the name up in its table, whose "CPU" row is what it uses for torch.cpu
        # (verl/utils/flops_counter.py:76-80)
        get_device_name=lambda *a, **k: "CPU",
        get_rng_state=torch.get_rng_state, set_rng_state=torch.set_rng_state,
        Stream=torch.cpu.Stream, stream=torch.cpu.stream, current_stream=torch.cpu.current_stream,
        Event=torch.cpu.Event if hasattr(torch.cpu, "Event") else None,
    )


def _one_backend_per_device(init_process_group):
    """Shim 1 of 2 (forced by VeRL 0.9.1 ``verl/utils/distributed.py:63`` and ``:89``, which always build the
    process-group backend as ``f"cpu:gloo,{device}:{backend}"``: on the CPU that reads ``cpu:gloo,cpu:gloo``, and
    torch rejects a device named twice). Wraps ``torch.distributed.init_process_group`` so a backend string that
    repeats the same ``device:backend`` pair passes it once; every other call is unchanged."""
    import functools

    @functools.wraps(init_process_group)
    def init(*args: Any, **kwargs: Any) -> Any:
        backend = kwargs.get("backend")
        if isinstance(backend, str) and "," in backend:
            kwargs["backend"] = ",".join(dict.fromkeys(part.strip() for part in backend.split(",")))
        return init_process_group(*args, **kwargs)

    init.skyrl_cpu_shim = True
    return init


if not getattr(torch.distributed.init_process_group, "skyrl_cpu_shim", False):
    torch.distributed.init_process_group = _one_backend_per_device(torch.distributed.init_process_group)


def _unpinned_offload_policy(policy_cls: type) -> type:
    """Shim 2 of 2 (forced by VeRL 0.9.1 ``verl/workers/engine/fsdp/transformer_impl.py:459-462``, which gives
    every forward-only FSDP2 module — the reference policy — ``CPUOffloadPolicy(pin_memory=True)``; pinning asks
    torch for an accelerator (``torch/distributed/fsdp/_fully_shard/_fsdp_param.py:315``) and fails on a CPU
    machine). Returns a subclass of FSDP2's ``CPUOffloadPolicy`` that never pins; the launcher's CPU processes
    see it as ``torch.distributed.fsdp.CPUOffloadPolicy``, which ``verl/utils/fsdp_utils.py:43`` imports (this
    module is imported first: VeRL imports ``VERL_USE_EXTERNAL_MODULES`` in ``verl/__init__.py``)."""

    class UnpinnedCPUOffloadPolicy(policy_cls):
        def __init__(self, pin_memory: bool = True) -> None:
            super().__init__(pin_memory=False)

    UnpinnedCPUOffloadPolicy.skyrl_cpu_shim = True
    return UnpinnedCPUOffloadPolicy


def _install_unpinned_offload_policy() -> None:
    import torch.distributed.fsdp as fsdp

    if not getattr(fsdp.CPUOffloadPolicy, "skyrl_cpu_shim", False):
        fsdp.CPUOffloadPolicy = _unpinned_offload_policy(fsdp.CPUOffloadPolicy)


_install_unpinned_offload_policy()


@PlatformRegistry.register(platform=PLATFORM)
class PlatformCPU(PlatformBase):
    """VeRL platform ``cpu``: torch on the CPU, gloo collectives, Ray's (logical) ``GPU`` slots for placement."""

    def __init__(self) -> None:
        super().__init__()
        self._module = _cpu_device_module()

    @property
    def device_name(self) -> str:
        return "cpu"

    @property
    def vendor_name(self) -> str:
        return "cpu"

    @property
    def device_module(self) -> Any:
        return self._module

    def is_available(self) -> bool:
        return True

    def is_platform_available(self, use_smi_check: bool = False) -> bool:
        return False  # chosen only by name (VERL_PLATFORM=cpu), never by auto-detection

    def current_device(self) -> Any:
        # VeRL passes this straight to ``.to(...)`` / ``device=`` (e.g. verl/utils/fsdp_utils.py:507,
        # verl/protocol.py:1336): the CPU device, where CUDA's is an index
        return torch.device("cpu")

    def device_count(self) -> int:
        return 1

    def set_device(self, device_index: int) -> None:
        return None

    def synchronize(self, device_index: Optional[int] = None) -> None:
        return None

    def manual_seed(self, seed: int) -> None:
        torch.manual_seed(seed)

    def manual_seed_all(self, seed: int) -> None:
        torch.manual_seed(seed)

    def set_allocator_settings(self, settings: str) -> None:
        return None

    def empty_cache(self) -> None:
        return None

    def get_device_capability(self, device_index: int = 0) -> tuple[Optional[int], Optional[int]]:
        return None, None

    def communication_backend_name(self) -> str:
        return "gloo"

    def visible_devices_envvar(self) -> str:
        return "CUDA_VISIBLE_DEVICES"  # Ray sets it for its (logical) GPU slots; nothing reads it on a CPU

    def nvtx_range(self, msg: str):
        return contextlib.nullcontext()

    def profiler_start(self) -> None:
        return None

    def profiler_stop(self) -> None:
        return None

    def ray_resource_name(self) -> str:
        return "GPU"

    def ray_resource_options(self, num_gpus: float) -> dict[str, Any]:
        return {"num_gpus": num_gpus}

    def ray_noset_envvars(self) -> list[str]:
        return ["RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES"]

    def is_ipc_supported(self) -> bool:
        return False

    def cudart(self) -> Any:
        return None
