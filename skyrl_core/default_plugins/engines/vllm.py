"""In-process vLLM engine (``vllm.v1.engine.async_llm.AsyncLLM``), for GPUs.

Prompts go in as token ids (``TokensPrompt``), so nothing is re-tokenised; output ids and the sampled tokens'
logprobs (``SamplingParams(logprobs=0)``: only the sampled token) come back exactly. Where vLLM offers
``logprobs_mode``, the engine asks for ``processed_logprobs`` (after temperature / top-k / top-p), matching the
hf engine's convention; at temperature 1 without truncation both equal ``log_softmax`` of the raw logits.

Weight updates: ``update_weights(state_dict)`` ships the tensors to every worker through
``AsyncLLM.collective_rpc`` and calls the model's own ``load_weights`` there, then resets the prefix cache so no
KV block computed with old weights is reused. vLLM pickles that function with cloudpickle, which needs
``VLLM_ALLOW_INSECURE_SERIALIZATION=1`` (set by this engine unless already set).

Not exercised in this repository's CI (no GPU): its tests skip when vllm is not importable.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import uuid
from typing import Any

from skyrl_core.errors import MissingExtraError, SkyrlError
from skyrl_core.inference.base import Engine, EngineError, GenerationOutput, SamplingParams

log = logging.getLogger(__name__)


def _load_into_worker(worker: Any, items: list[tuple[str, Any]]) -> int:
    """Runs inside each vLLM worker process: load (name, tensor) pairs with the model's own loader."""
    model = worker.model_runner.model
    model.load_weights(weights=iter(items))
    return len(items)


class VLLMEngine(Engine):
    """vLLM's AsyncLLM in this process (its engine core runs in a child process).

    Args:
        model: bundled model name or local HF directory (resolved through ``skyrl_core.models``).
        max_batch: ``max_num_seqs``, the most sequences vLLM schedules at once.
        dtype: ``auto`` | ``float32`` | ``bfloat16`` | ``float16``.
        gpu_memory_utilization: fraction of GPU memory vLLM may take (0-1].
        max_model_len: context window in tokens (default: the model's).
        tensor_parallel_size: GPUs per engine.
        enforce_eager: skip CUDA graph capture (faster start, slower decode).

    Raises MissingExtraError when vllm is not installed.
    """

    name = "vllm"

    def __init__(self, model: str = "smollm2-135m-instruct", max_batch: int = 64, dtype: str = "auto",
                 gpu_memory_utilization: float = 0.5, max_model_len: int | None = None,
                 tensor_parallel_size: int = 1, enforce_eager: bool = False) -> None:
        super().__init__()
        try:
            from vllm.engine.arg_utils import AsyncEngineArgs
            from vllm.v1.engine.async_llm import AsyncLLM
        except ImportError as exc:
            raise MissingExtraError(f"the vllm engine needs vLLM: install vllm (pip install vllm; it needs a CUDA "
                                    f"GPU) or use engine.type hf / openai; import failed with: {exc}") from exc
        from skyrl_core.models import load_tokenizer, resolve_model

        os.environ.setdefault("VLLM_ALLOW_INSECURE_SERIALIZATION", "1")
        path = str(resolve_model(model))
        kwargs: dict[str, Any] = dict(model=path, dtype=dtype, max_num_seqs=max_batch,
                                      gpu_memory_utilization=gpu_memory_utilization,
                                      tensor_parallel_size=tensor_parallel_size, enforce_eager=enforce_eager)
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
        self._closed = False

    async def generate(self, input_ids: list[int], sampling: SamplingParams) -> GenerationOutput:
        """Generate from token ids [prompt_len]; returns exact output ids, their logprobs and the finish reason
        (``stop``, ``length`` or ``abort``). Raises EngineError when vLLM fails or the engine is closed."""
        from vllm import SamplingParams as VSamplingParams
        from vllm.inputs import TokensPrompt

        if self._closed:
            raise EngineError("vllm engine is closed; create a new one")
        if not input_ids:
            raise SkyrlError("vllm engine: input_ids is empty; a prompt needs at least one token")
        max_new = min(sampling.max_tokens, self.max_context - len(input_ids))
        if max_new <= 0:
            return GenerationOutput([], [] if sampling.logprobs else None, "length", "")
        params = VSamplingParams(temperature=sampling.temperature, top_p=sampling.top_p, top_k=sampling.top_k,
                                 max_tokens=max_new, stop=list(sampling.stop) or None, seed=sampling.seed,
                                 include_stop_str_in_output=True, logprobs=0 if sampling.logprobs else None)
        self.stats.started(len(input_ids))
        final = None
        try:
            async for out in self.llm.generate(TokensPrompt(prompt_token_ids=list(input_ids)), params,
                                               request_id=uuid.uuid4().hex):
                final = out
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self.stats.errors += 1
            raise EngineError(f"vllm engine generate failed: {type(exc).__name__}: {exc}") from exc
        finally:
            n = len(final.outputs[0].token_ids) if final is not None and final.outputs else 0
            self.stats.finished(n)
        if final is None or not final.outputs:
            raise EngineError("vllm engine returned no output for the request")
        choice = final.outputs[0]
        ids = list(choice.token_ids)
        logprobs = None
        if sampling.logprobs and choice.logprobs is not None:
            logprobs = [float(step[tok].logprob) for tok, step in zip(ids, choice.logprobs)]
        reason = choice.finish_reason or "length"
        return GenerationOutput(output_ids=ids, output_logprobs=logprobs,
                                finish_reason=reason if reason in ("stop", "length", "abort") else "stop",
                                text=choice.text)

    async def update_weights(self, state_dict: dict[str, Any] | None = None) -> None:
        """Load ``state_dict`` (HF parameter names -> tensors) into every vLLM worker and drop the prefix cache.
        Raises SkyrlError when called without a state dict (vLLM does not share the trainer's module)."""
        if state_dict is None:
            raise SkyrlError("vllm engine update_weights needs a state dict: vLLM runs its own copy of the model")
        items = [(k, v.detach().cpu()) for k, v in state_dict.items()]
        await self.llm.collective_rpc(_load_into_worker, args=(items,))
        await self.llm.reset_prefix_cache()

    async def close(self) -> None:
        if not self._closed:
            self._closed = True
            self.llm.shutdown()
