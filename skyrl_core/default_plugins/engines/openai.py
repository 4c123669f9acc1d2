"""Client engine for any OpenAI-compatible server (vLLM, SGLang, llama.cpp, ``skyrl serve``, hosted APIs).

Token-exact path: the prompt goes to ``/v1/completions`` as a list of token ids, with vLLM's extras
``return_token_ids`` (sampled ids come back as ``choices[i].token_ids``), ``return_tokens_as_token_ids`` (logprob
tokens spelled ``token_id:N``, a second source of ids), ``include_stop_str_in_output`` and ``logprobs``. The ids
returned are the ids sampled; nothing is decoded and re-encoded.

Text fallback: a server that rejects token-id prompts (a 400/415/422 answer to one) or returns no token ids is
treated as text-only: the prompt is decoded to text and the returned text is re-tokenised with ``config.model``'s
tokenizer. Such data is not token-exact (the re-encoding can differ from what the model sampled) and carries no logprobs;
one warning says so. On ``finish_reason == "stop"`` the matched stop string (vLLM's ``stop_reason``) is appended
to the text, or, when the server stopped on EOS, the tokenizer's EOS id is appended to the ids.

A call times out when the server sends nothing for ``timeout_s`` seconds (httpx's read timeout; a non-streamed
completion sends nothing until it is done, so against a remote server this bounds the server's queueing and
generation together — only the server can tell them apart). The wait for one of this client's
``max_concurrency`` slots is not counted there; ``call_timeout_s`` bounds the whole call, that wait included
(EngineStalled). Connection errors, timeouts, 429 and 5xx answers are retried ``retries`` times with exponential
backoff, then raise EngineError naming the URL and the cause.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import tempfile
from pathlib import Path
from typing import Any

from skyrl_core.errors import ConfigError, SkyrlError
from skyrl_core.inference.base import Engine, EngineError, GenerationOutput, SamplingParams

from .calls import CallClock, bounded_call, tracked

log = logging.getLogger(__name__)


class _Rejected(Exception):
    """The server answered 4xx (not 429): the request itself was refused."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"HTTP {status}: {message}")
        self.status = status


class _Retryable(Exception):
    """A connection error, timeout, 429 or 5xx: worth another attempt; the message is the cause."""


class OpenAIEngine(Engine):
    """Generate through an OpenAI-compatible HTTP server.

    Args:
        model: local model (bundled name or HF dir) whose tokenizer matches the served model.
        base_url: server root, with or without the trailing ``/v1`` (e.g. ``http://127.0.0.1:8000``).
        api_key: sent as ``Authorization: Bearer``; default ``$OPENAI_API_KEY`` (none when unset).
        served_model: the ``model`` field sent to the server (default: ``model``).
        timeout_s: per-call timeout in seconds.
        max_concurrency: most requests in flight at once (more wait; counted in ``stats.queued``).
        retries: extra attempts after a connection error, timeout, 429 or 5xx.
        max_context: context window in tokens (default: the local model config's ``max_position_embeddings``).
        token_prompts: ``auto`` (detect), ``true`` (never fall back: a refusal raises), ``false`` (always text).
        images: send a context holding image observations to ``/v1/chat/completions`` as OpenAI image parts
            (``generate_messages``); false: the server is text-only and gets the text stand-in
            (:mod:`skyrl_core.multimodal`).

    Raises ConfigError when base_url is missing or token_prompts is invalid.
    """

    name = "openai"

    def __init__(self, model: str = "smollm2-135m-instruct", base_url: str | None = None, api_key: str | None = None,
                 served_model: str | None = None, timeout_s: float = 300.0, max_concurrency: int = 16,
                 retries: int = 2, max_context: int | None = None, token_prompts: str | bool = "auto",
                 images: bool = True, call_timeout_s: float | None = None) -> None:
        super().__init__()
        from skyrl_core.default_plugins.engines.models import load_tokenizer, resolve_model

        if not base_url:
            raise ConfigError("engine.base_url is required for engine.type 'openai', e.g. http://127.0.0.1:8000/v1")
        if token_prompts not in ("auto", True, False, "true", "false"):
            raise ConfigError(f"engine.options.token_prompts must be auto, true or false, got {token_prompts!r}")
        root = base_url.rstrip("/")
        self.base_url = root if root.endswith("/v1") else root + "/v1"
        self.api_key = api_key or os.environ.get("OPENAI_API_KEY") or None
        self.model_name = model
        self.served_model = served_model or model
        self.timeout_s = float(timeout_s)
        self.call_timeout_s = call_timeout_s
        self.retries = int(retries)
        self.tokenizer = load_tokenizer(model)
        if max_context is None:
            cfg = json.loads((resolve_model(model) / "config.json").read_text())
            max_context = cfg.get("max_position_embeddings") or 2048
        self.max_context = int(max_context)
        self.stats.capacity = max_concurrency
        self._max_concurrency = max_concurrency
        # None: not yet known; True: token prompts accepted; False: the server is text-only
        self.token_prompts: bool | None = {"auto": None, "true": True, "false": False}.get(token_prompts, token_prompts)
        self._forced = token_prompts in (True, "true")
        if images not in (True, False):
            raise ConfigError(f"engine.options.images must be true or false, got {images!r}")
        self.accepts_images = images
        self._warned = False
        self._client = None
        self._client_loop = None
        self._sem: asyncio.Semaphore | None = None

    # -- HTTP ----------------------------------------------------------------------------------------------
    def _http(self):
        """An httpx client bound to the running event loop (a client cannot be shared across loops)."""
        import httpx

        loop = asyncio.get_running_loop()
        if self._client is None or self._client_loop is not loop:
            headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
            self._client = httpx.AsyncClient(headers=headers, timeout=httpx.Timeout(self.timeout_s,
                                                                                    connect=min(10.0, self.timeout_s)),
                                             limits=httpx.Limits(max_connections=self._max_concurrency * 2))
            self._client_loop = loop
            self._sem = asyncio.Semaphore(self._max_concurrency)
        return self._client

    async def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """POST JSON with retries (tenacity: ``retries`` more attempts after a connection error, timeout, 429 or
        5xx, waiting 0.5 s, 1 s, 2 s ... up to 8 s between them). Raises _Rejected for a 4xx refusal, EngineError
        once retries are spent."""
        import httpx
        import tenacity

        client = self._http()
        url = self.base_url + path

        async def once() -> httpx.Response:
            try:
                resp = await client.post(url, json=body)
            except httpx.TimeoutException:
                raise _Retryable(f"timed out after {self.timeout_s:g} s (engine.timeout_s)") from None
            except httpx.TransportError as exc:
                raise _Retryable(f"{type(exc).__name__}: {exc or 'connection failed'}") from None
            if resp.status_code == 429 or resp.status_code >= 500:
                raise _Retryable(f"HTTP {resp.status_code}: {_message(resp)}")
            return resp

        try:
            resp = await tenacity.AsyncRetrying(
                retry=tenacity.retry_if_exception_type(_Retryable), stop=tenacity.stop_after_attempt(self.retries + 1),
                wait=tenacity.wait_exponential(multiplier=0.5, max=8.0), reraise=True)(once)
        except _Retryable as exc:
            raise EngineError(f"openai engine: POST {url} failed after {self.retries + 1} attempt(s): {exc}") from None
        if resp.status_code >= 400:
            raise _Rejected(resp.status_code, _message(resp))
        try:
            return resp.json()
        except ValueError:
            raise EngineError(f"openai engine: {url} answered with non-JSON: {resp.text[:200]!r}") from None

    # -- generate ------------------------------------------------------------------------------------------
    async def generate(self, input_ids: list[int], sampling: SamplingParams) -> GenerationOutput:
        """Generate a continuation of ``input_ids`` [prompt_len] on the server. Returns exact ids and logprobs
        when the server gives token ids, else re-tokenised text (see the module doc). Raises EngineError when
        the server fails, times out or refuses the request."""
        if not input_ids:
            raise SkyrlError("openai engine: input_ids is empty; a prompt needs at least one token")
        max_new = min(sampling.max_tokens, self.max_context - len(input_ids))
        if max_new <= 0:
            return GenerationOutput([], [] if sampling.logprobs else None, "length", "")
        self._http()
        clock = CallClock()

        def produce():
            clock.admit()  # the server's own progress is not visible: httpx's read timeout bounds that
            return self._generate(list(input_ids), sampling, max_new)

        return await bounded_call(tracked(self.stats, self._sem, len(input_ids), produce), clock, None,
                                  self.call_timeout_s, self.name)

    async def _generate(self, ids: list[int], sp: SamplingParams, max_new: int) -> GenerationOutput:
        body: dict[str, Any] = {"model": self.served_model, "max_tokens": max_new, "temperature": sp.temperature,
                                "top_p": sp.top_p}
        if sp.stop:
            body["stop"] = list(sp.stop)
        if sp.seed is not None:
            body["seed"] = sp.seed
        if sp.logprobs:
            body["logprobs"] = 1
        extras: dict[str, Any] = {"return_token_ids": True, "return_tokens_as_token_ids": True,
                                  "include_stop_str_in_output": True, "skip_special_tokens": True}
        if sp.top_k > 0:
            extras["top_k"] = sp.top_k
        if self.token_prompts is not False:
            try:
                data = await self._post("/completions", {**body, **extras, "prompt": ids})
            except _Rejected as exc:
                if exc.status not in (400, 415, 422):  # auth, unknown model or route: not about the prompt's form
                    raise EngineError(f"openai engine: {self.base_url}/completions refused the request: {exc}") \
                        from None
                if self._forced:
                    raise EngineError(f"openai engine: {self.base_url} refused a token-id prompt ({exc}); "
                                      f"engine.options.token_prompts is true, so there is no text fallback") from None
                if self.token_prompts:  # it accepted token prompts before: this refusal is about this request
                    raise EngineError(f"openai engine: {self.base_url}/completions refused the request: {exc}") \
                        from None
                self.token_prompts = False
                self._warn(f"it refused a token-id prompt ({exc})")
            else:
                self.token_prompts = True
                out = self._parse_exact(data, sp)
                if out is not None:
                    return out
                self._warn("it returned no token ids")
                return self._parse_text(data, sp)
        text_prompt = self.tokenizer.decode(ids, skip_special_tokens=False)
        try:
            data = await self._post("/completions", {**body, "prompt": text_prompt})
        except _Rejected as exc:
            raise EngineError(f"openai engine: {self.base_url}/completions refused the request: {exc}") from None
        return self._parse_text(data, sp)

    async def generate_messages(self, messages: list[dict], sampling: SamplingParams) -> GenerationOutput:
        """Generate the assistant's next message for OpenAI chat ``messages`` (content parts, images as data URLs)
        on ``/v1/chat/completions``. Output ids and logprobs are exact when the server returns token ids (vLLM's
        ``return_token_ids``), else the text re-tokenised; the prompt is the server's rendering, not skyrl's ids.
        Raises EngineError when the server fails or refuses the request (a text-only server refuses images:
        set ``engine.options.images: false`` for it)."""
        body: dict[str, Any] = {"model": self.served_model, "messages": messages, "max_tokens": sampling.max_tokens,
                                "temperature": sampling.temperature, "top_p": sampling.top_p,
                                "logprobs": bool(sampling.logprobs), "return_token_ids": True,
                                "return_tokens_as_token_ids": True, "include_stop_str_in_output": True}
        if sampling.stop:
            body["stop"] = list(sampling.stop)
        if sampling.seed is not None:
            body["seed"] = sampling.seed
        self._http()
        return await tracked(self.stats, self._sem, 0, lambda: self._chat(body, sampling))

    async def _chat(self, body: dict[str, Any], sampling: SamplingParams) -> GenerationOutput:
        try:
            data = await self._post("/chat/completions", body)
        except _Rejected as exc:
            raise EngineError(f"openai engine: {self.base_url}/chat/completions refused a prompt with "
                              f"images ({exc}); serve a vision model, or set engine.options.images: false "
                              f"to send the text stand-in") from None
        choice = self._choice(data)
        content = (choice.get("message") or {}).get("content") or ""
        entries = (choice.get("logprobs") or {}).get("content") or []
        as_completion = {"text": content, "finish_reason": choice.get("finish_reason"),
                         "stop_reason": choice.get("stop_reason"), "token_ids": choice.get("token_ids"),
                         "logprobs": {"tokens": [e.get("token") for e in entries],
                                      "token_logprobs": [e.get("logprob") for e in entries]}}
        if as_completion["token_ids"] is None and not entries:
            as_completion.pop("logprobs")
        wrapped = {"choices": [as_completion]}
        return self._parse_exact(wrapped, sampling) or self._parse_text(wrapped, sampling)

    def _warn(self, why: str) -> None:
        if not self._warned:
            self._warned = True
            log.warning("openai engine: %s at %s, so prompts are sent as text and replies re-tokenised with %s's "
                        "tokenizer; this data is NOT token-exact and has no logprobs (use vLLM or skyrl serve for "
                        "training data)", why, self.base_url, self.model_name)

    @staticmethod
    def _choice(data: dict[str, Any]) -> dict[str, Any]:
        try:
            return data["choices"][0]
        except (KeyError, IndexError, TypeError):
            raise EngineError(f"openai engine: malformed completion response (no choices): {str(data)[:200]}") \
                from None

    def _parse_exact(self, data: dict[str, Any], sp: SamplingParams) -> GenerationOutput | None:
        choice = self._choice(data)
        lp = choice.get("logprobs") or {}
        ids = choice.get("token_ids")
        tokens = lp.get("tokens") if isinstance(lp, dict) else None
        if ids is None and tokens and all(isinstance(t, str) and t.startswith("token_id:") for t in tokens):
            ids = [int(t.split(":", 1)[1]) for t in tokens]
        if ids is None:
            return None
        ids = [int(t) for t in ids]
        logprobs = None
        if sp.logprobs and isinstance(lp, dict):
            values = lp.get("token_logprobs")
            if isinstance(values, list) and len(values) == len(ids) and all(v is not None for v in values):
                logprobs = [float(v) for v in values]
        return GenerationOutput(output_ids=ids, output_logprobs=logprobs, finish_reason=_reason(choice),
                                text=choice.get("text"))

    def _parse_text(self, data: dict[str, Any], sp: SamplingParams) -> GenerationOutput:
        choice = self._choice(data)
        text = choice.get("text") or ""
        reason = _reason(choice)
        stop_reason = choice.get("stop_reason") or choice.get("stopping_word")
        eos = False
        if reason == "stop":
            if isinstance(stop_reason, str) and stop_reason and not text.endswith(stop_reason):
                text += stop_reason
            elif not (isinstance(stop_reason, str) and stop_reason):
                eos = self.tokenizer.eos_token_id is not None
        ids = list(self.tokenizer(text, add_special_tokens=False)["input_ids"]) if text else []
        if eos:
            ids.append(int(self.tokenizer.eos_token_id))
        return GenerationOutput(output_ids=ids, output_logprobs=None, finish_reason=reason, text=text)

    # -- weights -------------------------------------------------------------------------------------------
    async def update_weights(self, state_dict: dict[str, Any] | None = None) -> None:
        """Push weights to a server on this machine that offers ``POST /v1/load_weights {"path"}`` (skyrl serve):
        the state dict is written as safetensors to a temp dir the server reads. Raises EngineError when the
        server has no such endpoint (e.g. vLLM: restart it from a checkpoint dir instead)."""
        if state_dict is None:
            raise SkyrlError("openai engine update_weights needs a state dict: the server holds its own model copy")
        with tempfile.TemporaryDirectory(prefix="skyrl-weights-") as tmp:
            await asyncio.to_thread(_save, state_dict, Path(tmp))
            await self.load_weights_from(tmp)

    async def load_weights_from(self, path: str | os.PathLike) -> dict[str, Any]:
        """Ask the server to load the ``*.safetensors`` in ``path`` (a directory it can read)."""
        try:
            return await self._post("/load_weights", {"path": str(path)})
        except _Rejected as exc:
            raise EngineError(f"openai engine: {self.base_url}/load_weights refused ({exc}); the server needs a "
                              f"weight-reload endpoint like skyrl serve's") from None

    async def close(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            try:
                await client.aclose()
            except RuntimeError:  # created on a loop that is gone
                pass


def _save(state_dict: dict[str, Any], folder: Path) -> None:
    from safetensors.torch import save_file

    # clone: tied weights (embeddings = lm_head) share storage, which safetensors refuses to save
    tensors = {k: v.detach().cpu().clone().contiguous() for k, v in state_dict.items()}
    save_file(tensors, str(folder / "model.safetensors"))


def _message(resp: Any) -> str:
    try:
        data = resp.json()
        err = data.get("error", data) if isinstance(data, dict) else data
        if isinstance(err, dict):
            return str(err.get("message") or err.get("detail") or err)[:500]
        return str(err)[:500]
    except ValueError:
        return resp.text[:500]


def _reason(choice: dict[str, Any]) -> str:
    reason = choice.get("finish_reason")
    if reason in ("length", "abort"):
        return reason
    return "stop" if reason is not None else "length"
