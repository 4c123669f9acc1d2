"""skyrl's hf engine as a VeRL rollout server (rollout name ``skyrl``): the rollout VeRL's trainer uses where it
has no vLLM/SGLang it can drive (this CPU machine).

VeRL 0.9.1 keeps two registries for rollouts, its extension points for new inference servers:
``RolloutReplicaRegistry`` (``verl/workers/rollout/replica.py:312``; the replica launches the server actors that
VeRL's ``LLMServerManager`` routes token-in/token-out ``generate`` calls to) and ``_ROLLOUT_REGISTRY``
(``verl/workers/rollout/base.py:89``; the adapter that lives in each hybrid actor/rollout worker and receives the
trained weights from VeRL's FSDP engine at every ``update_weights``). Importing this module registers both under
``skyrl`` (the launcher puts it in ``VERL_USE_EXTERNAL_MODULES``, so every VeRL process imports it); the launcher
selects it with ``actor_rollout_ref.rollout.name=skyrl`` for ``engine.type: hf``.

- :class:`SkyrlEngineServer`: one Ray actor per replica holding :class:`skyrl_core.default_plugins.engines.hf.HFEngine`
  (continuous batching, logprobs of the sampled tokens). ``generate`` answers VeRL's ``TokenOutput``; the control
  calls VeRL's trainer makes on a server (sleep, wake_up, clear_kv_cache, abort, ...) have nothing to free on a
  transformers model and return at once.
- :class:`SkyrlServerAdapter`: VeRL's worker calls ``update_weights(generator of (name, tensor))`` after each
  optimiser step; every rank drains the generator (FSDP gathers are collective), rank 0 of the replica sends the
  full tensors to its server, which loads them into the engine (``HFEngine.update_weights``).
- :class:`SkyrlReplica`: launches the server actor (name ``skyrl_server_<replica>_0``, the name the adapter looks
  up) on the node of the replica's first worker.

Nothing of VeRL's trainer, actor or agent-loop workers is replaced: they call these classes through VeRL's own
registries exactly as they call vLLM's.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any, Optional

import ray
import torch
from verl.workers.rollout.base import _ROLLOUT_REGISTRY, BaseRollout
from verl.workers.rollout.replica import RolloutReplica, RolloutReplicaRegistry, TokenOutput

log = logging.getLogger(__name__)

ROLLOUT_NAME = "skyrl"
# the launcher sets it to the run directory: the server then appends one JSON line per weight sync to RECORD_FILE
# there (update count, VeRL's global step, tensors received, largest change from the initial weights, requests
# served so far)
RUN_DIR_ENV = "SKYRL_VERL_RUN_DIR"
RECORD_FILE = "rollout_weight_syncs.jsonl"


def server_name(replica_rank: int) -> str:
    """The Ray actor name of replica ``replica_rank``'s server (the adapter finds it by this name)."""
    return f"{ROLLOUT_NAME}_server_{replica_rank}_0"


class SkyrlEngineServer:
    """A VeRL rollout server backed by skyrl's hf engine (run as a Ray actor by :class:`SkyrlReplica`).

    Args:
        model_path: local Hugging Face directory of the policy (VeRL's ``actor_rollout_ref.model`` path).
        max_batch: requests decoded together (VeRL's ``rollout.max_num_seqs``, capped at 64).
        max_context: context window in tokens (VeRL's prompt_length + response_length).
    """

    def __init__(self, model_path: str, max_batch: int = 16, max_context: Optional[int] = None) -> None:
        from skyrl_core.default_plugins.engines.hf import HFEngine

        from .agent_loop import HFServerManager

        self.engine = HFEngine(model=model_path, max_batch=max_batch, device="auto", dtype="float32",
                               max_context=max_context)
        self.front = HFServerManager(self.engine)
        self.weight_updates = 0
        self.global_steps: Optional[int] = None
        # the weights as loaded from disk, to report how far each sync moved them
        self._initial = {k: v.detach().clone() for k, v in self.engine.model.state_dict().items()}
        run_dir = os.environ.get(RUN_DIR_ENV)
        self.record_path = Path(run_dir) / RECORD_FILE if run_dir else None

    async def generate(self, prompt_ids: list[int], sampling_params: dict[str, Any], request_id: str,
                       **_multimodal: Any) -> TokenOutput:
        """VeRL's token-in/token-out call (``LLMServerClient.generate``): response token ids, their logprobs,
        ``stop_reason`` completed/aborted; ``extra_fields['global_steps']`` is the last step whose weights
        were loaded (None before the first sync)."""
        out = await self.front.generate(request_id, prompt_ids=list(prompt_ids), sampling_params=dict(sampling_params))
        out.extra_fields["global_steps"] = self.global_steps
        return out

    async def update_weights(self, state_dict: dict[str, torch.Tensor], global_steps: Optional[int] = None) -> int:
        """Load ``state_dict`` (HF parameter names -> full tensors) into the engine; returns the update count.
        Raises SkyrlError naming unknown or mis-shaped parameters."""
        await self.engine.update_weights(state_dict)
        self.weight_updates += 1
        if global_steps is not None:
            self.global_steps = global_steps
        if self.record_path is not None:
            with torch.no_grad():
                own = self.engine.model.state_dict()
                change = max(float((own[k] - w0).abs().max()) for k, w0 in self._initial.items())
            row = {"update": self.weight_updates, "global_steps": global_steps, "tensors": len(state_dict),
                   "max_abs_change_from_initial": change, "requests_served": self.front.requests}
            with self.record_path.open("a") as f:
                f.write(json.dumps(row) + "\n")
        return self.weight_updates

    async def stats(self) -> dict[str, Any]:
        """Requests served and weight updates received (tests read these)."""
        return {"requests": self.front.requests, "weight_updates": self.weight_updates,
                "global_steps": self.global_steps}

    async def shutdown(self) -> None:
        await self.engine.close()

    # VeRL's control calls on a rollout server: a transformers model keeps no KV cache between steps and no
    # device memory to release, so each is a no-op
    async def wake_up(self, tags: Optional[list[str]] = None) -> None: ...
    async def sleep(self) -> None: ...
    async def clear_kv_cache(self) -> None: ...
    async def release_kv_cache(self) -> None: ...
    async def resume_kv_cache(self) -> None: ...
    async def resume_generation(self) -> None: ...
    async def start_profile(self, **kwargs: Any) -> None: ...
    async def stop_profile(self) -> None: ...

    async def set_global_steps(self, global_steps: int) -> None:
        self.global_steps = global_steps

    async def abort_all_requests(self, reset_prefix_cache: bool = True, reject_request: bool = False) -> dict:
        return {"aborted": 0}


class SkyrlServerAdapter(BaseRollout):
    """VeRL's in-worker rollout adapter for ``skyrl``: forwards the trained weights to the replica's server."""

    def __init__(self, config: Any, model_config: Any, device_mesh: Any, replica_rank: int = -1) -> None:
        super().__init__(config, model_config, device_mesh)
        rank = int(os.environ.get("RANK", "0"))
        world = int(self.config.tensor_model_parallel_size * self.config.data_parallel_size
                    * self.config.pipeline_model_parallel_size)
        self.replica_rank = rank // world if replica_rank == -1 else replica_rank
        self.sends = (rank % world) == 0
        self._server: Any = None

    def _handle(self) -> Any:
        if self._server is None:
            self._server = ray.get_actor(server_name(self.replica_rank))
        return self._server

    async def resume(self, tags: list[str]) -> None:
        return None

    async def release(self) -> None:
        return None

    @torch.no_grad()
    async def update_weights(self, weights: Any, global_steps: Optional[int] = None,
                             wire_format: str = "named_tensors", **kwargs: Any) -> None:
        """Drain VeRL's ``(name, tensor)`` generator (full tensors: DTensors are gathered) and, on the replica's
        rank 0, load them into the server's engine. Raises ValueError for a wire format other than
        ``named_tensors`` (delta flushes need CUDA IPC)."""
        from verl.workers.rollout.utils import ensure_async_iterator

        if wire_format != "named_tensors":
            raise ValueError(f"rollout 'skyrl' takes wire_format 'named_tensors', not {wire_format!r} "
                             f"(set actor_rollout_ref.rollout.checkpoint_engine.backend=naive)")
        state: dict[str, torch.Tensor] = {}
        async for name, tensor in ensure_async_iterator(weights):
            if hasattr(tensor, "full_tensor"):
                tensor = tensor.full_tensor()
            if self.sends:
                state[name] = tensor.detach().to("cpu", dtype=torch.float32, copy=True)
        if self.sends:
            await self._handle().update_weights.remote(state, global_steps)


class SkyrlReplica(RolloutReplica):
    """One ``skyrl`` rollout replica: a :class:`SkyrlEngineServer` actor beside the replica's hybrid workers."""

    async def launch_servers(self) -> None:
        node_id = await self.workers[0].__ray_call__.remote(lambda self: ray.get_runtime_context().get_node_id())
        model_path = self.model_config.get("local_path") or self.model_config.path  # a DictConfig here
        max_context = int(self.config.prompt_length + self.config.response_length)
        server = ray.remote(SkyrlEngineServer).options(
            name=server_name(self.replica_rank), num_cpus=0, max_concurrency=self.max_concurrency,
            scheduling_strategy=ray.util.scheduling_strategies.NodeAffinitySchedulingStrategy(node_id=node_id,
                                                                                              soft=False),
        ).remote(model_path, max_batch=min(int(self.config.max_num_seqs), 64), max_context=max_context)
        await server.stats.remote()  # raise here, not at the first request, when the model fails to load
        self.servers = [server]
        self._server_handle = server
        self._server_address = f"{ROLLOUT_NAME}://replica-{self.replica_rank}"


def register() -> None:
    """Register rollout ``skyrl`` in VeRL's two rollout registries (idempotent)."""
    _ROLLOUT_REGISTRY[(ROLLOUT_NAME, "async")] = f"{__name__}.SkyrlServerAdapter"
    RolloutReplicaRegistry.register(ROLLOUT_NAME, lambda: SkyrlReplica)


register()
