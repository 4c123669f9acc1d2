"""Built-in inference engines (``hf``, ``openai``, ``vllm``) and the ``skyrl serve`` command; ``models.py`` resolves a
config's model name to a local Hugging Face directory (converting the bundled GGUF once); ``gateway.py`` is the
recording gateway (``skyrl serve --record``) and ``harness.py`` the run stage of an external harness against it (the
harness runner ``default``); ``router.py`` builds the run's engine (the engine builder ``default``: one replica, or a
router over several).

Each factory takes the whole Config and imports its engine module only when called, so loading the default
plugins (and ``skyrl --help``) never imports torch, transformers, httpx or vllm.
"""

from __future__ import annotations

from typing import Any

from skyrl_core.hookspecs import hookimpl


def _options(config: Any, allowed: set[str], engine: str) -> dict[str, Any]:
    from skyrl_core.errors import ConfigError

    opts = dict(config.engine.options or {})
    unknown = sorted(set(opts) - allowed)
    if unknown:
        raise ConfigError(f"engine.options {unknown} are not understood by the '{engine}' engine; "
                          f"valid: {', '.join(sorted(allowed)) or '(none)'}")
    return opts


def hf_engine(config: Any):
    """``engine.type: hf``: in-process transformers with continuous batching (options: ``max_context``)."""
    from .hf import HFEngine

    opts = _options(config, {"max_context"}, "hf")
    return HFEngine(model=config.model, max_batch=config.engine.max_batch, device=config.engine.device,
                    dtype=config.engine.dtype, max_context=opts.get("max_context"), timeout_s=config.engine.timeout_s,
                    call_timeout_s=config.engine.call_timeout_s)


def openai_engine(config: Any):
    """``engine.type: openai``: any OpenAI-compatible server at ``engine.base_url`` (options: ``retries``,
    ``max_context``, ``token_prompts``: auto | true | false, ``images``: true | false)."""
    from .openai import OpenAIEngine

    opts = _options(config, {"retries", "max_context", "token_prompts", "images"}, "openai")
    return OpenAIEngine(model=config.model, base_url=config.engine.base_url, api_key=config.engine.api_key,
                        served_model=config.engine.served_model, timeout_s=config.engine.timeout_s,
                        call_timeout_s=config.engine.call_timeout_s, max_concurrency=config.engine.max_batch, **opts)


def vllm_engine(config: Any):
    """``engine.type: vllm``: vLLM in-process (options: ``gpu_memory_utilization``, ``max_model_len``,
    ``tensor_parallel_size``, ``enforce_eager``, ``kv_cache_gib``), or a vLLM server when ``engine.base_url`` is
    set (options: ``retries``, ``max_context``)."""
    from .vllm import from_config

    served = bool(config.engine.base_url)
    opts = _options(config, {"retries", "max_context"} if served else
                    {"gpu_memory_utilization", "max_model_len", "tensor_parallel_size", "enforce_eager",
                     "kv_cache_gib"}, "vllm")
    return from_config(config, opts)


@hookimpl(trylast=True)
def register_inference_engines(register):
    register(hf_engine, name="hf")
    register(openai_engine, name="openai")
    register(vllm_engine, name="vllm")


@hookimpl(trylast=True)
def register_engine_builders(register):
    from .router import build_engine

    register(build_engine, name="default")


@hookimpl(trylast=True)
def register_harness_runners(register):
    from .harness import HarnessRunner

    register(HarnessRunner, name="default")


@hookimpl(trylast=True)
def register_config_checks(register):
    from .scale_out import check_engine_replicas

    register(check_engine_replicas, name="engine_replicas")


@hookimpl(trylast=True)
def register_commands(register):
    import typer

    def serve(
        model: str = typer.Option("smollm2-135m-instruct", "--model", help="Bundled model name or local HF dir."),
        host: str = typer.Option("127.0.0.1", "--host", help="Address to bind."),
        port: int = typer.Option(8000, "--port", help="TCP port (0 picks a free one; the bound port is logged)."),
        max_batch: int = typer.Option(16, "--max-batch", help="Requests decoded together."),
        device: str = typer.Option("auto", "--device", help="auto | cpu | cuda | cuda:N"),
        dtype: str = typer.Option("auto", "--dtype", help="auto | float32 | bfloat16 | float16"),
        served_name: str = typer.Option(None, "--served-model-name",
                                        help="Model name clients send (default: --model)."),
        text_only: bool = typer.Option(False, "--text-only",
                                       help="Reject token-id prompts and omit token ids, like a text-only server "
                                            "(for testing clients' fallback)."),
        api_key: str = typer.Option(None, "--api-key", envvar="SKYRL_SERVE_API_KEY",
                                    help="Require 'Authorization: Bearer KEY' (default: no auth)."),
        threads: int = typer.Option(None, "--threads",
                                    help="torch CPU threads (default: torch's choice; 1 is faster on a busy host)."),
        record: bool = typer.Option(False, "--record",
                                    help="Serve the recording gateway instead (docs/gateway.md): every chat call "
                                         "recorded per session as token ids and logprobs."),
        token: str = typer.Option(None, "--token", envvar="SKYRL_GATEWAY_TOKEN",
                                  help="--record: bearer token required on every request (required on a "
                                       "non-loopback --host)."),
        parser: str = typer.Option("hermes", "--parser", help="--record: the registered tool-call parser."),
        require_open: bool = typer.Option(False, "--require-open",
                                          help="--record: sessions must be opened (POST /sessions) before use."),
        max_request_bytes: int = typer.Option(2 * 1024 * 1024, "--max-request-bytes",
                                              help="--record: request body bound in bytes (413 above it)."),
        config: str = typer.Option(None, "--config",
                                   help="--record: a run config; serve its engine (any registered engine.type) "
                                        "with its chat format and agent.parser."),
    ) -> None:
        """Serve the hf engine as an OpenAI-compatible HTTP server (/v1/models, /v1/completions,
        /v1/chat/completions, POST /v1/load_weights); with --record, the recording gateway."""
        if record:
            from .gateway_server import run_gateway

            run_gateway(model=model, host=host, port=port, max_batch=max_batch, device=device, dtype=dtype,
                        served_name=served_name, token=token, parser=parser, require_open=require_open,
                        max_request_bytes=max_request_bytes, threads=threads, config=config)
            return
        from .serve import run_server

        run_server(model=model, host=host, port=port, max_batch=max_batch, device=device, dtype=dtype,
                   served_name=served_name, text_only=text_only, api_key=api_key, threads=threads)

    app = typer.Typer(rich_markup_mode=None, add_completion=False)
    app.command("serve")(serve)
    register(app, name="serve")
