"""The config check (``register_config_checks``) of several engines behind the router (``engine.replicas``,
``engine.endpoints``): what holds whichever placement builds them. A placement's own keys (``engine.resources``,
``tasks.N.runtime.resources``, ``plugins.<name>``) are checked by that placement (:mod:`skyrl_core.placement`).

Every check raises ConfigError naming the key and what is valid.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlparse

from skyrl_core.errors import ConfigError


def validate_engine_replicas(engine: Any) -> None:
    """``engine.replicas`` at least 1; ``engine.endpoints`` http(s) URLs, each once, not mixed with
    ``engine.base_url``, and with ``replicas`` left at 1 or equal to their number."""
    if engine.replicas < 1:
        raise ConfigError(f"config key 'engine.replicas' must be at least 1; got {engine.replicas}")
    for i, url in enumerate(engine.endpoints):
        parsed = urlparse(str(url))
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise ConfigError(f"config key 'engine.endpoints.{i}' must be an http(s) URL of an OpenAI-compatible "
                              f"server, e.g. http://10.0.0.5:8000/v1; got {url!r}")
    if engine.endpoints:
        if engine.base_url:
            raise ConfigError("config keys 'engine.base_url' and 'engine.endpoints' are both set; give one server "
                              "in base_url, or every server in endpoints")
        if engine.replicas not in (1, len(engine.endpoints)):
            raise ConfigError(f"config key 'engine.replicas' is {engine.replicas} but engine.endpoints lists "
                              f"{len(engine.endpoints)} servers; leave replicas out (one replica per endpoint)")
        if len(set(engine.endpoints)) != len(engine.endpoints):
            raise ConfigError("config key 'engine.endpoints' lists a server twice; each URL is one replica")


def check_engine_replicas(config: Any) -> None:
    """The registered config check: :func:`validate_engine_replicas` of ``config.engine``."""
    validate_engine_replicas(config.engine)
