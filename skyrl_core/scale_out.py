"""Config checks for running beyond one process: runtime placement on Ray (``tasks.N.runtime.placement``,
``.resources``, ``.max_actors``), the Ray cluster (``ray.*``) and engine replicas behind the router
(``engine.replicas``, ``engine.endpoints``, ``engine.sticky``). Imports nothing heavy: Ray is imported only when
a ``placement: ray`` runtime starts (:mod:`skyrl_core.ray_runtime`).

Every check raises ConfigError naming the key and what is valid.
"""

from __future__ import annotations

import math
import numbers
from typing import Any
from urllib.parse import urlparse

from .errors import ConfigError

PLACEMENTS = ("local", "ray")
# runtime.resources keys -> what each means (units); memory is in MiB, as runtime.memory_mb is
RESOURCE_KEYS = {"num_cpus": "CPUs per actor", "num_gpus": "GPUs per actor",
                 "memory_mb": "memory per actor in MiB", "resources": "custom Ray resources, name -> amount"}
ADDRESS_SCHEMES = ("ray", "http", "https")


def _amount(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value) and value >= 0


def validate_resources(resources: Any, where: str) -> dict[str, Any]:
    """``resources`` checked and returned as given. Raises ConfigError naming ``where.<key>`` for an unknown
    key, a negative or non-numeric amount, or custom resources that are not a mapping of names to amounts."""
    if not isinstance(resources, dict):
        raise ConfigError(f"config key '{where}' must be a mapping such as {{num_cpus: 1}}; valid keys: "
                          f"{', '.join(RESOURCE_KEYS)}")
    for key, value in resources.items():
        if key not in RESOURCE_KEYS:
            raise ConfigError(f"unknown config key '{where}.{key}'; valid keys: "
                              + ", ".join(f"{k} ({v})" for k, v in RESOURCE_KEYS.items()))
        if key == "resources":
            if not isinstance(value, dict) or not all(isinstance(k, str) and _amount(v) for k, v in value.items()):
                raise ConfigError(f"config key '{where}.resources' must map resource names to amounts of 0 or "
                                  f"more, e.g. {{sandbox_host: 1}}; got {value!r}")
        elif not _amount(value):
            raise ConfigError(f"config key '{where}.{key}' must be a number of 0 or more ({RESOURCE_KEYS[key]}); "
                              f"got {value!r}")
    if "memory_mb" in resources and resources["memory_mb"] <= 0:
        raise ConfigError(f"config key '{where}.memory_mb' must be positive (MiB); got {resources['memory_mb']!r}")
    return resources


def validate_runtime_placement(spec: Any, where: str) -> None:
    """Check one RuntimeSpec's placement keys (``where`` is its config path, e.g. ``tasks.0.runtime``)."""
    if spec.placement not in PLACEMENTS:
        raise ConfigError(f"config key '{where}.placement' must be one of {', '.join(PLACEMENTS)}; "
                          f"got {spec.placement!r}")
    validate_resources(spec.resources, f"{where}.resources")
    if spec.max_actors is not None and spec.max_actors < 1:
        raise ConfigError(f"config key '{where}.max_actors' must be at least 1 (or left out: as many as the Ray "
                          f"cluster's resources fit); got {spec.max_actors}")
    if spec.placement == "local" and (spec.resources or spec.max_actors is not None):
        key = "resources" if spec.resources else "max_actors"
        raise ConfigError(f"config key '{where}.{key}' only applies with {where}.placement: ray (the runtime "
                          f"is placed locally now)")


def validate_ray_address(address: str | None) -> None:
    """None, ``auto``, ``local``, ``HOST:PORT`` or ``ray://HOST:PORT`` (also ``http(s)://`` for a job server)."""
    if address is None or address in ("auto", "local"):
        return
    if "://" in address:
        parsed = urlparse(address)
        if parsed.scheme not in ADDRESS_SCHEMES or not parsed.hostname:
            raise ConfigError(f"config key 'ray.address' {address!r} is not a Ray address; use auto, HOST:6379 "
                              f"(a cluster's head) or ray://HOST:10001 (Ray Client)")
        return
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise ConfigError(f"config key 'ray.address' {address!r} is not a Ray address; use auto, HOST:6379 "
                          f"(a cluster's head) or ray://HOST:10001 (Ray Client)")


def validate_engine_replicas(engine: Any) -> None:
    """``engine.placement`` local or ray (with ``engine.resources``); ``engine.replicas`` at least 1;
    ``engine.endpoints`` http(s) URLs, not mixed with ``engine.base_url``,
    and with ``replicas`` left at 1 or equal to their number."""
    if engine.placement not in PLACEMENTS:
        raise ConfigError(f"config key 'engine.placement' must be one of {', '.join(PLACEMENTS)}; "
                          f"got {engine.placement!r}")
    validate_resources(engine.resources, "engine.resources")
    if engine.placement == "local" and engine.resources:
        raise ConfigError("config key 'engine.resources' only applies with engine.placement: ray")
    if engine.placement == "ray" and engine.endpoints:
        raise ConfigError("config keys 'engine.placement: ray' and 'engine.endpoints' are both set; endpoints are "
                          "servers already running, placement: ray starts engines in Ray actors: choose one")
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


def validate_scale_out(config: Any) -> None:
    """Every scale-out key of a Config (called by :func:`skyrl_core.config.validate_values`)."""
    for i, tc in enumerate(config.tasks):
        if tc.runtime is not None:
            validate_runtime_placement(tc.runtime, f"tasks.{i}.runtime")
    validate_ray_address(config.ray.address)
    if config.ray.num_cpus is not None:
        if config.ray.num_cpus < 1:
            raise ConfigError(f"config key 'ray.num_cpus' must be at least 1; got {config.ray.num_cpus}")
        if config.ray.address not in (None, "local"):
            raise ConfigError("config key 'ray.num_cpus' sizes a local cluster; it cannot be set with "
                              f"ray.address {config.ray.address!r} (an existing cluster has its own resources)")
    validate_engine_replicas(config.engine)
