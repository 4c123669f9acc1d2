"""Serving the recording gateway (:mod:`.gateway`): a gateway in front of a run config's engine, and ``skyrl
serve --record``."""

# No ``from __future__ import annotations``, as in .gateway (FastAPI reads annotations at runtime).
import asyncio
from typing import Any

from skyrl_core.default_plugins.chat.template import ChatFormat

from .gateway import MAX_REQUEST_BYTES, Gateway, bind


async def gateway_from_config(config: Any, registry: Any = None, **kwargs: Any) -> Gateway:
    """A Gateway in front of the run's engine as ``skyrl eval``/``train`` would build it (``engine.type``, any
    registered engine, replicas behind a router), with the agent loop's chat format (``agent.keep_thinking``,
    ``agent.chat_template_kwargs``) and parser (``agent.parser``; ``auto`` picks one for the model). ``kwargs`` go
    to :class:`Gateway`. The caller closes ``gateway.engine``. Raises UnknownComponentError / ConfigError as
    the engine and parser registries do."""
    from skyrl_core.plugins import get_registry

    from .router import build_engine

    registry = registry or get_registry()
    engine = await build_engine(config, registry)
    try:
        chat = ChatFormat(engine.tokenizer, keep_thinking=config.agent.keep_thinking,
                          template_kwargs=config.agent.chat_template_kwargs)
        name = config.agent.parser
        if name == "auto":
            from skyrl_core.default_plugins.parsers.detect import parser_for_model

            name, _ = parser_for_model(engine.tokenizer)
        parser = registry.get("parsers", name)
        parser = parser() if isinstance(parser, type) else parser
        return Gateway(engine, chat, parser, **{"served_name": config.model, **kwargs})
    except BaseException:
        await engine.close()
        raise


def run_gateway(model: str = "smollm2-135m-instruct", host: str = "127.0.0.1", port: int = 8000,
                max_batch: int = 16, device: str = "auto", dtype: str = "auto", served_name: str | None = None,
                token: str | None = None, parser: str = "hermes", require_open: bool = False,
                max_request_bytes: int = MAX_REQUEST_BYTES, threads: int | None = None,
                config: str | None = None) -> None:
    """``skyrl serve --record``: the recording gateway until interrupted, in front of the hf engine on ``model``
    or, with ``config`` (a run config's path), in front of that config's engine with its chat format and parser
    (``model``, ``max_batch``, ``device``, ``dtype`` and ``parser`` are then the config's). Prints ``listening on
    http://HOST:PORT`` to stderr once bound. Raises ValueError for a non-loopback host without a token,
    UnknownComponentError for an unregistered parser or engine, MissingExtraError without fastapi/uvicorn."""
    import sys

    from skyrl_core.errors import require
    from skyrl_core.plugins import get_registry

    require("fastapi", "serve", "skyrl serve --record")
    uvicorn = require("uvicorn", "serve", "skyrl serve --record")
    options = {"require_open": require_open, "max_request_bytes": max_request_bytes, "token": token}
    cfg = None
    if config is not None:
        from skyrl_core.config import load_config

        cfg = load_config(config)
    else:
        tool_parser = get_registry().get("parsers", parser)
    sock = bind(host, port, token)  # refuse an unsafe bind before loading the model
    if threads:
        import torch

        torch.set_num_threads(threads)

    async def serve() -> None:
        if cfg is not None:
            gateway = await gateway_from_config(cfg, served_name=served_name or cfg.model, **options)
        else:
            from .hf import HFEngine

            engine = HFEngine(model=model, max_batch=max_batch, device=device, dtype=dtype)
            gateway = Gateway(engine, parser=tool_parser, served_name=served_name or model, **options)
        print(f"skyrl serve --record: model {gateway.served_name} listening on "
              f"http://{host}:{sock.getsockname()[1]}", file=sys.stderr, flush=True)
        server = uvicorn.Server(uvicorn.Config(gateway.app, log_level="warning", access_log=False))
        try:
            await server.serve(sockets=[sock])
        finally:
            await gateway.engine.close()

    try:
        asyncio.run(serve())
    finally:
        sock.close()
