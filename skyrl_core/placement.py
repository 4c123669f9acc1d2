"""Placements: where a task's runtimes (with its tools and verifier) and the engine's replicas live.

``tasks.N.runtime.placement: NAME`` and ``engine.placement: NAME`` name a placement registered through the
``register_placements`` hook; ``local`` (this process, the objects unchanged; the runtimes built-in's
``LocalPlacement``) is the default. A
placement plugin (``plugins/ray``: Ray actors) returns *placed* versions of what it is given, and the rollout
uses them exactly as it would the local ones. Settings of its own go under ``plugins.<name>`` in the config
(a mapping the core leaves to the plugin) and in the generic keys ``tasks.N.runtime.resources``,
``.max_actors`` and ``engine.resources``, which the placement itself checks (:meth:`Placement.check`).
"""

from __future__ import annotations

from typing import Any, Awaitable, Callable, Protocol, runtime_checkable

import attrs


async def _nothing() -> None:
    return None


@attrs.define
class PlacedTask:
    """What a placement returns for one task: the ``tools`` (name -> Tool) the agent calls, the ``verifier``
    ``(trajectory, runtime, instance)``, the ``runtime_cls`` called as ``runtime_cls(spec) -> Runtime``, a
    ``stats()`` of counters merged into each rollout's metrics, and ``close()`` awaited when the session ends."""

    tools: dict[str, Any]
    verifier: Callable
    runtime_cls: Callable
    stats: Callable[[], dict[str, float]] = dict
    close: Callable[[], Awaitable[None]] = _nothing


@runtime_checkable
class Placement(Protocol):
    """The contract of a registered placement (``register(obj, name=...)`` in ``register_placements``).

    ``check(config)`` raises ConfigError naming any key of ``config`` the placement reads that is wrong (called
    once per run, before the engine is built, for every placement the config names). ``place_task(spec,
    runtime_cls, tools, verifier, verifier_name, config) -> PlacedTask`` places one task's runtimes.
    ``async place_engine(factory, configs) -> list[Engine]`` builds one replica per config with ``factory``
    (``(Config) -> Engine``), closing those built when one fails."""

    def check(self, config: Any) -> None: ...

    def place_task(self, spec: Any, runtime_cls: Callable, tools: dict[str, Any], verifier: Callable,
                   verifier_name: str, config: Any) -> PlacedTask: ...

    async def place_engine(self, factory: Callable, configs: list[Any]) -> list[Any]: ...


def named_placements(config: Any, registry: Any) -> list[str]:
    """Every placement name ``config`` uses (the engine's, the tasks' in order, then any registered placement
    with a ``plugins.<name>`` section), once each."""
    names = [config.engine.placement] + [tc.runtime.placement for tc in config.tasks if tc.runtime is not None]
    names += [name for name in config.plugins if name in registry.names("placements")]
    return list(dict.fromkeys(names))


def check_placements(config: Any, registry: Any) -> None:
    """Look up every placement the config names (UnknownComponentError listing the registered ones) and let each
    check its keys (ConfigError naming the key)."""
    for name in named_placements(config, registry):
        registry.get("placements", name).check(config)
