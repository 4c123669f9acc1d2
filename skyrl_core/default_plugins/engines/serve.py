"""``skyrl serve``: the hf engine behind an OpenAI-compatible HTTP API (FastAPI + uvicorn).

Endpoints (request and response fields follow vLLM's OpenAI server, so one client reads both):

- ``GET /v1/models``
- ``POST /v1/completions``: ``prompt`` as text or a list of token ids (or a list of either); ``max_tokens``,
  ``temperature``, ``top_p``, ``top_k``, ``stop``, ``seed``, ``n``, ``logprobs`` (int: the sampled token's
  logprob; alternatives are not computed, so ``top_logprobs`` entries hold only the sampled token),
  ``return_token_ids`` (adds ``prompt_token_ids`` and ``token_ids`` to each choice), ``return_tokens_as_token_ids``
  (logprob tokens spelled ``token_id:N``), ``include_stop_str_in_output`` (default false: the text is cut before
  the stop string, as in OpenAI's API; ``token_ids`` always hold every sampled token, EOS included).
- ``POST /v1/chat/completions``: ``messages`` through the model's chat template; ``logprobs: true``;
  ``return_token_ids`` (``prompt_token_ids`` on the response, ``token_ids`` on the choice).
- ``POST /v1/load_weights`` ``{"path": DIR}``: load every ``*.safetensors`` in DIR (parameter names as the model's
  state dict, e.g. a ``save_pretrained`` directory) into the running model; answers ``{"loaded": n_tensors,
  "weights_version": v}``. A trainer pushes new weights this way.
- ``GET /health``.

``--text-only`` makes the server behave like a text-only server (llama.cpp-style): token-id prompts are rejected
with 400 and no token ids are returned. It exists so clients' fallback path can be tested against a real server.
"""

# No ``from __future__ import annotations``: FastAPI reads the endpoints' ``Request`` annotations at runtime.
import asyncio
import logging
import socket
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from skyrl_core.inference.base import EngineError, SamplingParams

log = logging.getLogger(__name__)


class BadRequest(Exception):
    """A request field is invalid; answered with HTTP 400 and an OpenAI-style error body."""


def _sampling(body: dict[str, Any], default_max: int) -> SamplingParams:
    stop = body.get("stop") or ()
    if isinstance(stop, str):
        stop = (stop,)
    try:
        temperature = body.get("temperature")
        return SamplingParams(
            temperature=1.0 if temperature is None else float(temperature),
            top_p=float(body.get("top_p") if body.get("top_p") is not None else 1.0),
            top_k=int(body.get("top_k") if body.get("top_k") is not None else -1),
            max_tokens=int(body.get("max_tokens") or body.get("max_completion_tokens") or default_max),
            stop=tuple(str(s) for s in stop),
            seed=None if body.get("seed") is None else int(body["seed"]),
        )
    except (TypeError, ValueError) as exc:
        raise BadRequest(f"invalid sampling field: {exc}") from None


def _cut_stop(text: str, stop: tuple[str, ...]) -> str:
    cuts = [text.find(s) for s in stop if s and s in text]
    return text[:min(cuts)] if cuts else text


def _stop_reason(out: Any, stop: tuple[str, ...]) -> str | None:
    """vLLM's ``stop_reason``: the stop string that ended generation, None for EOS or length."""
    if out.finish_reason != "stop" or not stop:
        return None
    found = [(out.text.find(s), s) for s in stop if s and s in out.text]
    return min(found)[1] if found else None


def create_app(engine: Any, served_name: str, text_only: bool = False, api_key: str | None = None):
    """Build the FastAPI app around ``engine`` (an HFEngine or any Engine with a tokenizer)."""
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse

    app = FastAPI(title="skyrl serve", docs_url=None, redoc_url=None)
    tok = engine.tokenizer

    def error(status: int, message: str, kind: str = "invalid_request_error") -> JSONResponse:
        return JSONResponse(status_code=status, content={"error": {"message": message, "type": kind,
                                                                   "code": status}})

    @app.middleware("http")
    async def guard(request: Request, call_next):
        if api_key and request.url.path.startswith("/v1/"):
            if request.headers.get("authorization") != f"Bearer {api_key}":
                return error(401, "missing or wrong 'Authorization: Bearer <key>' header", "authentication_error")
        return await call_next(request)

    @app.exception_handler(BadRequest)
    async def bad_request(request: Request, exc: BadRequest):
        return error(400, str(exc))

    @app.exception_handler(EngineError)
    async def engine_failed(request: Request, exc: EngineError):
        return error(500, str(exc), "server_error")

    async def body_of(request: Request) -> dict[str, Any]:
        try:
            body = await request.json()
        except Exception:
            raise BadRequest("request body is not valid JSON") from None
        if not isinstance(body, dict):
            raise BadRequest("request body must be a JSON object")
        model = body.get("model")
        if model is not None and model != served_name:
            raise BadRequest(f"model '{model}' is not served here; this server serves '{served_name}'")
        return body

    def prompts_of(prompt: Any) -> list[tuple[list[int], bool]]:
        """-> [(token ids, given_as_ids)] for each prompt in the request."""
        if isinstance(prompt, str):
            return [(tok(prompt)["input_ids"], False)]
        if isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
            return [(list(prompt), True)]
        if isinstance(prompt, list) and prompt and all(isinstance(p, (str, list)) for p in prompt):
            return [x for p in prompt for x in prompts_of(p)]
        raise BadRequest("'prompt' must be a string, a list of token ids, or a list of those")

    async def run(ids: list[int], sp: SamplingParams):
        try:
            return await engine.generate(ids, sp)
        except EngineError:
            raise
        except Exception as exc:  # e.g. token ids outside the vocabulary
            raise BadRequest(str(exc)) from None

    def logprob_block(ids: list[int], lps: list[float], as_ids: bool) -> dict[str, Any]:
        tokens = [f"token_id:{t}" if as_ids else tok.decode([t]) for t in ids]
        offsets, pos = [], 0
        for t in tokens:
            offsets.append(pos)
            pos += len(t)
        return {"tokens": tokens, "token_logprobs": lps, "top_logprobs": [{t: lp} for t, lp in zip(tokens, lps)],
                "text_offset": offsets}

    @app.get("/health")
    async def health():
        return {"status": "ok", "stats": engine.stats.snapshot()}

    @app.get("/v1/models")
    async def models():
        return {"object": "list", "data": [{"id": served_name, "object": "model", "created": int(time.time()),
                                            "owned_by": "skyrl", "max_model_len": engine.max_context}]}

    @app.post("/v1/completions")
    async def completions(request: Request):
        body = await body_of(request)
        prompts = prompts_of(body.get("prompt"))
        if text_only and any(as_ids for _, as_ids in prompts):
            raise BadRequest("this server runs with --text-only: 'prompt' must be text, not token ids")
        if body.get("stream"):
            raise BadRequest("stream is not supported by skyrl serve")
        sp = _sampling(body, 16)
        n = int(body.get("n") or 1)
        want_ids = bool(body.get("return_token_ids")) and not text_only
        as_ids = bool(body.get("return_tokens_as_token_ids")) and not text_only
        keep_stop = bool(body.get("include_stop_str_in_output"))
        jobs = [(ids, sp) for ids, _ in prompts for _ in range(n)]
        outs = await asyncio.gather(*[run(ids, s) for ids, s in jobs])
        choices = []
        for i, ((ids, _), out) in enumerate(zip(jobs, outs)):
            text = out.text if keep_stop else _cut_stop(out.text, sp.stop)
            choice: dict[str, Any] = {"index": i, "text": text, "finish_reason": out.finish_reason,
                                      "stop_reason": _stop_reason(out, sp.stop), "logprobs": None}
            if body.get("logprobs") is not None and out.output_logprobs is not None:
                choice["logprobs"] = logprob_block(out.output_ids, out.output_logprobs, as_ids)
            if want_ids:
                choice["prompt_token_ids"] = ids
                choice["token_ids"] = out.output_ids
            choices.append(choice)
        n_prompt = sum(len(ids) for ids, _ in jobs)
        n_out = sum(len(o.output_ids) for o in outs)
        return {"id": f"cmpl-{uuid.uuid4().hex}", "object": "text_completion", "created": int(time.time()),
                "model": served_name, "choices": choices,
                "usage": {"prompt_tokens": n_prompt, "completion_tokens": n_out, "total_tokens": n_prompt + n_out}}

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request):
        body = await body_of(request)
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise BadRequest("'messages' must be a non-empty list of {role, content} objects")
        if body.get("stream"):
            raise BadRequest("stream is not supported by skyrl serve")
        try:
            rendered = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True,
                                               tools=body.get("tools"))
        except Exception as exc:
            raise BadRequest(f"could not apply the chat template to 'messages': {exc}") from None
        ids = list(rendered["input_ids"] if hasattr(rendered, "keys") else rendered)
        sp = _sampling(body, 512)
        n = int(body.get("n") or 1)
        outs = await asyncio.gather(*[run(ids, sp) for _ in range(n)])
        want_ids = bool(body.get("return_token_ids")) and not text_only
        choices = []
        for i, out in enumerate(outs):
            choice: dict[str, Any] = {"index": i, "finish_reason": out.finish_reason, "logprobs": None,
                                      "message": {"role": "assistant", "content": _cut_stop(out.text, sp.stop)}}
            if body.get("logprobs") and out.output_logprobs is not None:
                choice["logprobs"] = {"content": [
                    {"token": tok.decode([t]), "logprob": lp, "bytes": list(tok.decode([t]).encode()),
                     "top_logprobs": []} for t, lp in zip(out.output_ids, out.output_logprobs)]}
            if want_ids:
                choice["token_ids"] = out.output_ids
            choices.append(choice)
        n_out = sum(len(o.output_ids) for o in outs)
        response: dict[str, Any] = {
            "id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion", "created": int(time.time()),
            "model": served_name, "choices": choices,
            "usage": {"prompt_tokens": len(ids), "completion_tokens": n_out, "total_tokens": len(ids) + n_out}}
        if want_ids:
            response["prompt_token_ids"] = ids
        return response

    @app.post("/v1/load_weights")
    async def load_weights(request: Request):
        body = await request.json()
        path = Path(str(body.get("path") or "")).expanduser()
        files = sorted(path.glob("*.safetensors")) if path.is_dir() else []
        if not files:
            raise BadRequest(f"'path' {str(path)!r} must be a directory holding *.safetensors files")

        def read() -> dict[str, Any]:
            from safetensors.torch import load_file

            state: dict[str, Any] = {}
            for f in files:
                state.update(load_file(str(f)))
            return state

        state = await asyncio.to_thread(read)
        try:
            await engine.update_weights(state)
        except EngineError:
            raise
        except Exception as exc:
            raise BadRequest(f"could not load weights from {path}: {exc}") from None
        return {"loaded": len(state), "weights_version": getattr(engine, "_weights_version", None)}

    return app


def run_server(model: str = "smollm2-135m-instruct", host: str = "127.0.0.1", port: int = 8000, max_batch: int = 16,
               device: str = "auto", dtype: str = "auto", served_name: str | None = None, text_only: bool = False,
               api_key: str | None = None, threads: int | None = None) -> None:
    """Load the hf engine and serve it until interrupted. Prints ``listening on http://HOST:PORT`` to stderr
    once the socket is bound (port 0 picks a free port). Raises MissingExtraError without fastapi/uvicorn."""
    from skyrl_core.errors import require

    require("fastapi", "serve", "skyrl serve")
    uvicorn = require("uvicorn", "serve", "skyrl serve")
    from .hf import HFEngine

    if threads:
        import torch

        torch.set_num_threads(threads)
    engine = HFEngine(model=model, max_batch=max_batch, device=device, dtype=dtype)
    app = create_app(engine, served_name or model, text_only=text_only, api_key=api_key)
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    bound = sock.getsockname()[1]
    print(f"skyrl serve: model {served_name or model} listening on http://{host}:{bound}", file=sys.stderr,
          flush=True)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False))
    try:
        server.run(sockets=[sock])
    finally:
        asyncio.run(engine.close())
        sock.close()
