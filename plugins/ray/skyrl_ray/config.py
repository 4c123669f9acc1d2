"""The config keys the Ray placement reads, checked when a run names ``placement: ray``:
``tasks.N.runtime.resources`` / ``.max_actors``, ``engine.resources``, and the cluster under ``plugins.ray``
(``address``, ``num_cpus``, ``namespace``, ``runtime_env``). Imports nothing heavy (Ray is imported when the
first actor starts).

Every check raises ConfigError naming the key and what is valid.
"""

from __future__ import annotations

import math
import numbers
from typing import Any
from urllib.parse import urlparse

import attrs

from skyrl_core.errors import ConfigError

SECTION = "plugins.ray"
# runtime.resources keys -> what each means (units); memory is in MiB, as runtime.memory_mb is
RESOURCE_KEYS = {"num_cpus": "CPUs per actor", "num_gpus": "GPUs per actor",
                 "memory_mb": "memory per actor in MiB", "resources": "custom Ray resources, name -> amount"}
ADDRESS_SCHEMES = ("ray", "http", "https")


@attrs.define
class RayClusterConfig:
    """The Ray cluster (``plugins.ray`` in the config). ``address``: None starts a local cluster in this process
    (``num_cpus`` CPUs, default all); ``auto`` joins the cluster running on this machine (``ray start --head``);
    ``HOST:6379`` a cluster's head; ``ray://HOST:10001`` through Ray Client. ``namespace`` and ``runtime_env``
    (a Ray runtime environment: ``pip``, ``env_vars``, ``working_dir``) go to ``ray.init``."""

    address: str | None = None
    num_cpus: int | None = None
    namespace: str | None = None
    runtime_env: dict[str, Any] = attrs.Factory(dict)


def cluster_config(config: Any) -> RayClusterConfig:
    """``config.plugins["ray"]`` as a checked RayClusterConfig (defaults when absent). Raises ConfigError naming
    ``plugins.ray.<key>`` for an unknown key or a bad value."""
    data = (getattr(config, "plugins", None) or {}).get("ray") or {}
    if not isinstance(data, dict):
        raise ConfigError(f"config key '{SECTION}' must be a mapping such as {{address: auto}}; got {data!r}")
    fields = [f.name for f in attrs.fields(RayClusterConfig)]
    for key in data:
        if key not in fields:
            raise ConfigError(f"unknown config key '{SECTION}.{key}'; valid keys: {', '.join(fields)}")
    for key in ("address", "namespace"):
        if data.get(key) is not None and not isinstance(data[key], str):
            raise ConfigError(f"config key '{SECTION}.{key}' must be a string; got {data[key]!r}")
    num_cpus = data.get("num_cpus")
    if num_cpus is not None and (isinstance(num_cpus, bool) or not isinstance(num_cpus, int) or num_cpus < 1):
        raise ConfigError(f"config key '{SECTION}.num_cpus' must be at least 1; got {num_cpus!r}")
    if not isinstance(data.get("runtime_env", {}), dict):
        raise ConfigError(f"config key '{SECTION}.runtime_env' must be a mapping (pip, env_vars, working_dir, ...)")
    cluster = RayClusterConfig(**data)
    validate_ray_address(cluster.address)
    if cluster.num_cpus is not None and cluster.address not in (None, "local"):
        raise ConfigError(f"config key '{SECTION}.num_cpus' sizes a local cluster; it cannot be set with "
                          f"{SECTION}.address {cluster.address!r} (an existing cluster has its own resources)")
    return cluster


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


def validate_ray_address(address: str | None) -> None:
    """None, ``auto``, ``local``, ``HOST:PORT`` or ``ray://HOST:PORT`` (also ``http(s)://`` for a job server)."""
    if address is None or address in ("auto", "local"):
        return
    bad = ConfigError(f"config key '{SECTION}.address' {address!r} is not a Ray address; use auto, HOST:6379 "
                      f"(a cluster's head) or ray://HOST:10001 (Ray Client)")
    if "://" in address:
        parsed = urlparse(address)
        if parsed.scheme not in ADDRESS_SCHEMES or not parsed.hostname:
            raise bad
        return
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise bad


def check_config(config: Any) -> None:
    """Every key the Ray placement reads in a run's Config: the cluster, and the resources of each runtime and of
    the engine placed on Ray."""
    cluster_config(config)
    for i, tc in enumerate(config.tasks):
        rt = tc.runtime
        if rt is None or rt.placement != "ray":
            continue
        validate_resources(rt.resources, f"tasks.{i}.runtime.resources")
        if rt.max_actors is not None and rt.max_actors < 1:
            raise ConfigError(f"config key 'tasks.{i}.runtime.max_actors' must be at least 1 (or left out: as many "
                              f"as the Ray cluster's resources fit); got {rt.max_actors}")
    engine = config.engine
    if engine.placement == "ray":
        validate_resources(engine.resources, "engine.resources")
        if engine.endpoints:
            raise ConfigError("config keys 'engine.placement: ray' and 'engine.endpoints' are both set; endpoints "
                              "are servers already running, placement: ray starts engines in Ray actors: choose one")
