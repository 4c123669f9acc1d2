"""The connection to a Tinker service: settings from config and environment, the SDK's futures across SDK
versions, and the service's errors named in one message.

Settings (``engine.options`` or ``backend.options``, first found wins, then the environment):

- ``base_url``: the service URL; else ``$TINKER_BASE_URL``; else the SDK's default (the hosted service).
- ``api_key``: read from ``$TINKER_API_KEY`` (or ``engine.api_key: ${TINKER_API_KEY}``); never an option
  written in a config. Hosted keys start with ``tml-``.
  The local server (:mod:`skyrl_tinker.local_server`) accepts any ``tml-`` key.
- ``base_model``: the model name the service knows (``meta-llama/Llama-3.2-1B`` on the hosted service). By
  default the Hugging Face name of a bundled model (``HuggingFaceTB/SmolLM2-135M-Instruct``) or the local
  model directory, which is what ``skyrl tinker serve-local`` registers the same model under.

SDK versions differ in what a call returns: 0.25 returns clients from ``create_*`` calls (blocking) and
``concurrent.futures.Future`` from ``sample``; 0.26+ return awaitable futures of clients. :func:`call` runs a
call off the event loop and settles whichever it got.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import os
from typing import Any, Callable

from skyrl_core.errors import ConfigError, SkyrlError

HF_NAMES = {"smollm2-135m-instruct": "HuggingFaceTB/SmolLM2-135M-Instruct",
            "smollm2": "HuggingFaceTB/SmolLM2-135M-Instruct"}
OPTION_KEYS = ("base_url", "base_model")


class TinkerServiceError(SkyrlError):
    """A Tinker call failed. The message names the operation, the service URL, the kind of failure (auth,
    quota, server error, connection, bad request) and what to do; ``kind`` holds that kind, ``status`` the HTTP
    status when there was one."""

    def __init__(self, message: str, kind: str, status: int | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.status = status


def service_settings(config: Any) -> dict[str, str | None]:
    """``base_url``, ``api_key`` and ``base_model`` for this run (see the module docstring). Raises ConfigError
    when an API key is written into the config's options."""
    opts: dict[str, Any] = {}
    for section in (config.backend, config.engine):
        for key, value in (section.options or {}).items():
            if key == "api_key":
                raise ConfigError(f"{'backend' if section is config.backend else 'engine'}.options.api_key: "
                                  f"the Tinker API key is read from $TINKER_API_KEY only (keep keys out of configs)")
            opts.setdefault(key, value)
    base_url = opts.get("base_url") or config.engine.base_url or os.environ.get("TINKER_BASE_URL") or None
    api_key = config.engine.api_key or os.environ.get("TINKER_API_KEY") or None  # engine.api_key: ${TINKER_API_KEY}
    return {"base_url": base_url, "api_key": api_key,
            "base_model": str(opts.get("base_model") or default_base_model(config.model))}


def default_base_model(model: str) -> str:
    """The name a Tinker service knows ``model`` by: a bundled model's Hugging Face name, else the local
    model directory as given."""
    if model in HF_NAMES:
        return HF_NAMES[model]
    return str(model)


def make_service_client(settings: dict[str, str | None]) -> Any:
    """A ``tinker.ServiceClient`` for ``settings``. Raises TinkerServiceError (kind ``auth``) when no API key
    is set or it lacks the ``tml-`` prefix, before anything is sent."""
    import tinker

    key = settings.get("api_key")
    where = settings.get("base_url") or "the hosted Tinker service"
    if not key:
        raise TinkerServiceError(f"no Tinker API key: set TINKER_API_KEY (keys start with 'tml-'; a local server "
                                 f"accepts any, e.g. tml-local) to reach {where}", kind="auth")
    if not key.startswith("tml-"):
        raise TinkerServiceError(f"TINKER_API_KEY does not start with 'tml-' (Tinker keys do); {where} would "
                                 f"refuse it", kind="auth")
    kwargs: dict[str, Any] = {"api_key": key}
    if settings.get("base_url"):
        kwargs["base_url"] = settings["base_url"]
    return tinker.ServiceClient(**kwargs)


def describe_error(exc: BaseException, operation: str, base_url: str | None) -> TinkerServiceError:
    """One message for a failed Tinker call: which operation, where, what kind of failure and what to do."""
    import tinker

    where = base_url or "the hosted Tinker service"
    status = getattr(exc, "status_code", None)
    detail = f"{type(exc).__name__}: {exc}"
    if isinstance(exc, (tinker.AuthenticationError, tinker.PermissionDeniedError)) or status in (401, 403):
        kind, advice = "auth", "check TINKER_API_KEY (and that the key may use this model)"
    elif isinstance(exc, tinker.RateLimitError) or status == 429 or type(exc).__name__ == "BillingError" \
            or status == 402:
        kind, advice = "quota", "the account's rate limit or quota is spent: wait, lower the batch, or raise the quota"
    elif isinstance(exc, tinker.InternalServerError) or (status is not None and status >= 500):
        kind, advice = "server", "the service failed (5xx); retry later, and report it if it persists"
    elif isinstance(exc, tinker.APIConnectionError):
        kind, advice = "connection", "is the service running at that address (skyrl tinker serve-local)?"
    elif isinstance(exc, (tinker.BadRequestError, tinker.UnprocessableEntityError, tinker.NotFoundError)) \
            or status in (400, 404, 409, 422):
        kind, advice = "request", "the service rejected the request (check base_model, the loss and the data)"
    else:
        kind, advice = "other", "see the cause above"
    code = f" HTTP {status}" if status else ""
    return TinkerServiceError(f"Tinker {operation} at {where} failed ({kind}{code}): {detail}; {advice}",
                              kind=kind, status=status)


async def settle(value: Any) -> Any:
    """The result behind ``value``: awaits SDK futures (APIFuture, 0.26+ client futures) and
    ``concurrent.futures.Future``; returns anything else as it is."""
    if isinstance(value, concurrent.futures.Future):
        return await asyncio.wrap_future(value)
    if inspect.isawaitable(value):
        return await value
    return value


BLOCKING_TIMEOUT_S = 600.0


def settle_blocking(value: Any, timeout_s: float = BLOCKING_TIMEOUT_S) -> Any:
    """:func:`settle` for synchronous callers (checkpoint save): blocks on ``.result(timeout)``, so a service
    that never answers is a TimeoutError (named by :func:`call_blocking`), not a hung run."""
    result = getattr(value, "result", None)
    return result(timeout_s) if callable(result) else value


async def wait(value: Any, *, operation: str, base_url: str | None) -> Any:
    """:func:`settle` ``value``; any failure becomes one TinkerServiceError naming ``operation``."""
    try:
        return await settle(value)
    except TinkerServiceError:
        raise
    except Exception as exc:  # the SDK raises its own hierarchy plus httpx/asyncio errors
        raise describe_error(exc, operation, base_url) from exc


async def call(fn: Callable[..., Any], *args: Any, operation: str, base_url: str | None,
               **kwargs: Any) -> Any:
    """Run the SDK call ``fn(*args, **kwargs)`` in a worker thread (0.25's ``create_*`` block) and settle its
    future; any failure becomes one TinkerServiceError naming ``operation``."""
    try:
        value = await asyncio.to_thread(fn, *args, **kwargs)
    except Exception as exc:
        raise describe_error(exc, operation, base_url) from exc
    return await wait(value, operation=operation, base_url=base_url)


def call_blocking(fn: Callable[..., Any], *args: Any, operation: str, base_url: str | None, **kwargs: Any) -> Any:
    """:func:`call` for synchronous callers."""
    try:
        return settle_blocking(fn(*args, **kwargs))
    except Exception as exc:
        raise describe_error(exc, operation, base_url) from exc
