"""SkyRL-train's inference engine client as a skyrl :class:`~skyrl_core.inference.base.Engine`, and the reverse.

:class:`SkyrlTrainClientEngine` lets skyrl's agent loop generate through SkyRL-train's
``InferenceEngineInterface`` (its vLLM servers behind a router on GPUs) with token ids in and out. Every request
asks for the sampled tokens' logprobs (``logprobs: 0``, which SkyRL-train's vLLM path answers with the chosen
token's logprob), so the rollout logprobs the trainer's off-policy correction reads are the sampler's own.

:class:`EngineInferenceClient` is an adapter (a stand-in for SkyRL-train's HTTP inference client, which needs
vLLM and GPUs): it serves ``generate(InferenceEngineInput)`` from a skyrl engine in this process (the hf
engine), so the generator runs and is tested on a CPU machine through the same client interface.
"""

from __future__ import annotations

from typing import Any

from skyrl_core.inference.base import Engine, EngineError, GenerationOutput, SamplingParams


class SkyrlTrainClientEngine(Engine):
    """SkyRL-train's inference engine client seen as a skyrl Engine.

    ``client`` has SkyRL-train's ``async generate(InferenceEngineInput, model=None) -> InferenceEngineOutput``;
    ``tokenizer`` is the policy's; ``max_context`` (tokens) caps prompt + generation; ``model`` is the policy
    model name sent with each request; ``extra_sampling`` (e.g. vLLM's ``min_p``, ``repetition_penalty`` from
    SkyRL-train's ``generator.sampling_params``) is merged into every request.

    ``finish_reason``: ``length`` when the engine says so or ``max_tokens`` tokens came back, ``abort`` for an
    aborted request, else ``stop``. Raises :class:`EngineError` when the client raises, returns no row, or
    returns no logprobs (skyrl never trains on made-up logprobs).
    """

    name = "skyrl-train"

    def __init__(self, client: Any, tokenizer: Any, max_context: int, model: str | None = None,
                 extra_sampling: dict[str, Any] | None = None) -> None:
        super().__init__()
        self.client = client
        self.tokenizer = tokenizer
        self.max_context = int(max_context)
        self.model = model
        self.extra_sampling = dict(extra_sampling or {})

    def request_params(self, sampling: SamplingParams, max_tokens: int) -> dict[str, Any]:
        """The vLLM-style sampling dict of one request (SkyRL-train's ``get_sampling_params_for_backend`` keys)."""
        params: dict[str, Any] = {**self.extra_sampling, "temperature": sampling.temperature,
                                  "top_p": sampling.top_p, "top_k": sampling.top_k, "max_tokens": max_tokens,
                                  "logprobs": 0, "include_stop_str_in_output": True, "skip_special_tokens": False}
        if sampling.stop:
            params["stop"] = list(sampling.stop)
        if sampling.seed is not None:
            params["seed"] = sampling.seed
        return params

    async def generate(self, input_ids: list[int], sampling: SamplingParams) -> GenerationOutput:
        max_tokens = min(sampling.max_tokens, max(self.max_context - len(input_ids), 0))
        if max_tokens <= 0:
            return GenerationOutput(output_ids=[], output_logprobs=[], finish_reason="length")
        request = {"prompt_token_ids": [list(input_ids)], "prompts": None,
                   "sampling_params": self.request_params(sampling, max_tokens), "session_ids": None}
        self.stats.started(len(input_ids))
        n_out = 0
        try:
            out = await self.client.generate(request, model=self.model)
            ids = list(out["response_ids"][0])
            n_out = len(ids)
            logprobs = out.get("response_logprobs")
            logprobs = None if logprobs is None else logprobs[0]
            reason = str((out.get("stop_reasons") or ["stop"])[0])
        except Exception as exc:
            self.stats.errors += 1
            raise EngineError(f"engine 'skyrl-train' failed: {type(exc).__name__}: {exc}") from exc
        finally:
            self.stats.finished(n_out)
        if logprobs is None or len(logprobs) != len(ids):
            self.stats.errors += 1
            raise EngineError(f"engine 'skyrl-train' returned {'no' if logprobs is None else len(logprobs)} "
                              f"logprobs for {len(ids)} tokens; the request asked for them (logprobs=0)")
        if reason in ("abort", "aborted"):
            finish = "abort"
        elif reason == "length" or len(ids) >= max_tokens:
            finish = "length"
        else:
            finish = "stop"
        return GenerationOutput(output_ids=ids, output_logprobs=[float(x) for x in logprobs], finish_reason=finish)


class EngineInferenceClient:
    """Adapter (a stand-in for SkyRL-train's inference client): answers ``generate(InferenceEngineInput)`` from
    a skyrl engine in this process, one concurrent engine call per prompt. Only ``prompt_token_ids`` inputs
    (token in, token out); ``stop_reasons`` use vLLM's words (``stop``, ``length``, ``abort``). Counts
    ``requests`` (prompts served)."""

    def __init__(self, engine: Engine, model_name: str = "skyrl-hf") -> None:
        self.engine = engine
        self.model_name = model_name
        self.requests = 0

    async def generate(self, input_batch: dict[str, Any], model: str | None = None) -> dict[str, Any]:
        import asyncio

        prompts = input_batch.get("prompt_token_ids")
        if not prompts:
            raise ValueError("EngineInferenceClient serves prompt_token_ids only (token in, token out)")
        sp = input_batch.get("sampling_params") or {}
        params = SamplingParams(temperature=float(sp.get("temperature", 1.0)), top_p=float(sp.get("top_p", 1.0)),
                                top_k=int(sp.get("top_k", -1)), max_tokens=int(sp.get("max_tokens", 512)),
                                stop=tuple(sp.get("stop") or ()), seed=sp.get("seed"),
                                logprobs=sp.get("logprobs") is not None)
        self.requests += len(prompts)
        outs = await asyncio.gather(*(self.engine.generate(list(p), params) for p in prompts))
        return {"responses": [self.engine.tokenizer.decode(o.output_ids) for o in outs],
                "response_ids": [list(o.output_ids) for o in outs],
                "stop_reasons": [o.finish_reason for o in outs],
                "response_logprobs": (None if any(o.output_logprobs is None for o in outs)
                                      else [list(o.output_logprobs) for o in outs]),
                "prompt_logprobs": None, "rollout_expert_indices": None, "rollout_sample_support": None}
