"""The ``tinker`` inference engine: a Tinker sampling client behind skyrl's ``generate(token ids)`` interface.

Token ids go in as a ``ModelInput``; the sampled tokens, their logprobs and the service's own stop reason come
back (``stop``: EOS or a stop string; ``length``: ``max_tokens``). Tinker's sampler stops only on what the
request names, so every request names the model's EOS token ids (generation_config.json and the tokenizer's). Nothing is re-tokenised and no finish reason
is guessed: a stop reason the service does not document is an EngineError naming it. The tokenizer (for the
chat template) is loaded locally from ``config.model``; nothing is fetched from a hub (the SDK's
``get_tokenizer`` would, so it is never called).

The engine samples from the base model until the ``tinker`` backend hands it new weights
(:meth:`TinkerEngine.use_weights`, after every train step); any other backend cannot update it.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

from skyrl_core.errors import ConfigError
from skyrl_core.inference.base import Engine, EngineError, GenerationOutput, SamplingParams

from .client import call, make_service_client, service_settings

log = logging.getLogger(__name__)

ENGINE_OPTIONS = {"base_url", "base_model", "max_context"}
# Tinker's documented stop reasons -> skyrl finish reasons (they happen to share the words)
STOP_REASONS = {"stop": "stop", "length": "length"}


def check_options(options: dict[str, Any], allowed: set[str], where: str) -> None:
    """Raise ConfigError naming the first option ``where`` (``engine.options``) does not understand."""
    unknown = sorted(set(options or {}) - allowed)
    if unknown:
        raise ConfigError(f"{where}.{unknown[0]} is not understood by tinker; valid: {', '.join(sorted(allowed))}")


def _model_json(model: str, name: str) -> dict[str, Any]:
    from skyrl_core.default_plugins.engines.models import resolve_model

    try:
        return json.loads((resolve_model(model) / name).read_text())
    except (OSError, ValueError):
        return {}


def model_context(model: str) -> int:
    """The context window of ``model`` in tokens (``max_position_embeddings`` of its config.json), else 2048."""
    return int(_model_json(model, "config.json").get("max_position_embeddings") or 2048)


def stop_token_ids(model: str, tokenizer: Any) -> list[int]:
    """The token ids that end a reply: ``eos_token_id`` of the model's generation_config.json (one or a list)
    and the tokenizer's EOS, as the hf engine stops. Tinker's sampler stops only where it is told to."""
    eos = _model_json(model, "generation_config.json").get("eos_token_id")
    ids = set(eos if isinstance(eos, list) else [eos] if eos is not None else [])
    if tokenizer.eos_token_id is not None:
        ids.add(tokenizer.eos_token_id)
    return sorted(int(i) for i in ids)


class TinkerEngine(Engine):
    """Engine ``tinker``: samples through a Tinker ``SamplingClient``. Built ``TinkerEngine(config)``.

    ``engine.max_batch`` bounds requests in flight; ``engine.options``: ``base_url``, ``base_model``,
    ``max_context`` (tokens). ``service`` and ``settings`` are shared with the ``tinker`` backend. Raises
    ConfigError for unknown options, TinkerServiceError (kind ``auth``) without a ``tml-`` API key.
    """

    name = "tinker"

    def __init__(self, config: Any) -> None:
        super().__init__()
        from skyrl_core.default_plugins.engines.models import load_tokenizer

        check_options(config.engine.options, ENGINE_OPTIONS, "engine.options")
        self.settings = service_settings(config)
        self.tokenizer = load_tokenizer(config.model)
        self.max_context = int(config.engine.options.get("max_context") or model_context(config.model))
        self.stop_ids = stop_token_ids(config.model, self.tokenizer)
        self.max_batch = config.engine.max_batch
        self.stats.capacity = self.max_batch
        self.timeout_s = config.engine.timeout_s
        self.service = make_service_client(self.settings)
        self.sampling_client: Any = None
        self.model_path: str | None = None  # tinker:// path of the weights sampled from; None = base model
        self._slots: asyncio.Semaphore | None = None
        self._client_lock: asyncio.Lock | None = None

    @property
    def base_url(self) -> str | None:
        return self.settings["base_url"]

    async def _client(self) -> Any:
        if self._client_lock is None:
            self._client_lock = asyncio.Lock()
        async with self._client_lock:
            if self.sampling_client is None:
                self.sampling_client = await call(self.service.create_sampling_client,
                                                  base_model=self.settings["base_model"],
                                                  operation="create_sampling_client", base_url=self.base_url)
            return self.sampling_client

    async def use_weights(self, model_path: str) -> None:
        """Sample from the weights saved at ``model_path`` (``save_weights_for_sampler``'s tinker:// path) from
        the next request on; requests in flight finish on the old client."""
        client = await call(self.service.create_sampling_client, model_path=model_path,
                            operation="create_sampling_client", base_url=self.base_url)
        self.sampling_client, self.model_path = client, model_path

    def stop_for(self, sampling: SamplingParams) -> list[int] | list[str]:
        """What ends a reply, in Tinker's terms: the EOS token ids, or (Tinker takes ids or strings, not both)
        the stop strings plus the EOS tokens' text when ``sampling.stop`` has strings."""
        if not sampling.stop:
            return list(self.stop_ids)
        return [*sampling.stop, *(self.tokenizer.convert_ids_to_tokens(i) for i in self.stop_ids)]

    async def generate(self, input_ids: list[int], sampling: SamplingParams) -> GenerationOutput:
        """Sample one continuation of ``input_ids`` [prompt_len]: ``output_ids`` [gen_len], their logprobs
        [gen_len] and the service's stop reason. Raises TinkerServiceError (an EngineError) naming the failure,
        EngineError for an undocumented stop reason or a timeout of ``engine.timeout_s``."""
        import tinker

        if self._slots is None:
            self._slots = asyncio.Semaphore(self.max_batch)
        params = tinker.SamplingParams(max_tokens=sampling.max_tokens, temperature=sampling.temperature,
                                       top_p=sampling.top_p, top_k=sampling.top_k, seed=sampling.seed,
                                       stop=self.stop_for(sampling))
        prompt = tinker.ModelInput.from_ints([int(t) for t in input_ids])
        async with self._slots:
            client = await self._client()
            self.stats.started(len(input_ids))
            n_out = 0
            try:
                response = await asyncio.wait_for(
                    call(client.sample, prompt, 1, params, operation="sample", base_url=self.base_url),
                    self.timeout_s)
                seq = response.sequences[0]
                n_out = len(seq.tokens)
            except asyncio.TimeoutError:
                self.stats.errors += 1
                raise EngineError(f"tinker engine: no sample from {self.base_url or 'the hosted service'} within "
                                  f"engine.timeout_s={self.timeout_s} s") from None
            except Exception:
                self.stats.errors += 1
                raise
            finally:
                self.stats.finished(n_out)
        reason = STOP_REASONS.get(str(seq.stop_reason))
        if reason is None:
            raise EngineError(f"tinker engine: the service gave stop reason {seq.stop_reason!r}, not one of "
                              f"{', '.join(STOP_REASONS)}")
        logprobs = seq.logprobs
        if logprobs is not None and len(logprobs) != len(seq.tokens):
            raise EngineError(f"tinker engine: {len(logprobs)} logprobs for {len(seq.tokens)} sampled tokens")
        return GenerationOutput(output_ids=[int(t) for t in seq.tokens],
                                output_logprobs=None if logprobs is None else [float(x) for x in logprobs],
                                finish_reason=reason)

    async def close(self) -> None:
        self.sampling_client = None


def tinker_engine(config):
    """Engine factory ``tinker``: a Tinker sampling client (:class:`TinkerEngine`)."""
    return TinkerEngine(config)
