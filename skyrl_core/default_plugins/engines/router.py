"""The engine router: several inference engines behind one ``Engine``.

``engine.replicas: N`` builds N copies of the configured engine (placed by the placement ``engine.placement``
names: ``local``, this process, by default; ``ray`` with the skyrl-ray plugin); ``engine.endpoints: [URL, ...]`` builds one engine per OpenAI-compatible server (vLLM,
SGLang, ``skyrl serve``) with ``engine.base_url`` set to that URL. Each request goes to the replica with the
fewest **outstanding tokens**: the sum, over the requests it is serving now, of their prompt length plus their
``max_tokens`` budget (ties: fewer requests in flight, then fewer requests so far). With ``engine.sticky`` a
trajectory stays on the replica that served its first call, so an engine with prefix caching reuses the
trajectory's KV cache (SGLang and vLLM do; the key is the trajectory id, set by the rollout in
:data:`skyrl_core.inference.base.routing_key`); a sticky replica that is down is left for the least-loaded one.

A replica whose call raises is marked down for ``cooldown_s`` seconds and the request is retried once on the
least-loaded other replica, so one dead server costs no trajectory while another is up; when every replica
fails the last error is raised as EngineError (the agent loop ends that trajectory ``error_run``).

The router's ``stats`` is what the dispatchers read: ``capacity`` the sum of the replicas' capacities,
``in_flight``/``busy_s``/``occupancy_integral`` counted over routed requests, ``queued`` the replicas' queues
summed at each snapshot, plus ``outstanding_tokens``; :meth:`EngineRouter.load` gives the per-replica figures.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from typing import Any

import attrs

from skyrl_core.contracts import member
from skyrl_core.errors import ConfigError
from skyrl_core.inference.base import Engine, EngineError, EngineStats, GenerationOutput, SamplingParams, routing_key

log = logging.getLogger(__name__)

STICKY_KEYS = 100_000  # trajectories remembered for sticky routing (least recently used forgotten first)


@attrs.define
class RouterStats(EngineStats):
    """EngineStats of the router itself, with ``queued`` refreshed from the replicas at every snapshot and
    ``outstanding_tokens`` added (see the module doc)."""

    router: Any = attrs.field(default=None, repr=False)

    def snapshot(self) -> dict[str, float]:
        if self.router is not None:
            self.queued = sum(int(getattr(r.stats, "queued", 0)) for r in self.router.replicas)
        snap = super().snapshot()
        if self.router is not None:
            snap["outstanding_tokens"] = sum(self.router.outstanding)
        return snap


class EngineRouter(Engine):
    """Route ``generate`` calls over ``replicas`` (Engines sharing one tokenizer). ``names`` label them in
    :meth:`load` (default ``replica-<i>``); ``sticky`` keeps a trajectory on one replica; ``cooldown_s`` is how
    long a failing replica is passed over. Raises ConfigError for no replicas."""

    name = "router"

    def __init__(self, replicas: list[Engine], names: list[str] | None = None, sticky: bool = False,
                 cooldown_s: float = 5.0) -> None:
        if not replicas:
            raise ConfigError("the engine router needs at least one replica (engine.replicas / engine.endpoints)")
        self.replicas = list(replicas)
        self.names = list(names) if names else [f"replica-{i}" for i in range(len(replicas))]
        self.sticky = bool(sticky)
        self.cooldown_s = float(cooldown_s)
        self.tokenizer = replicas[0].tokenizer
        self.max_context = min(int(member(r, "inference_engines", "max_context") or 2048) for r in replicas)
        n = len(replicas)
        self.outstanding = [0] * n  # tokens (prompt + max_tokens) of the requests each replica serves now
        self.in_flight = [0] * n
        self.routed = [0] * n
        self.errors = [0] * n
        self.down_until = [0.0] * n
        self.sticky_hits = 0
        self._keys: OrderedDict[str, int] = OrderedDict()
        self.stats = RouterStats(capacity=sum(max(int(getattr(r.stats, "capacity", 1)), 1) for r in replicas),
                                 router=self)

    # -- choosing ----------------------------------------------------------------------------------------------
    def _up(self, i: int) -> bool:
        return time.monotonic() >= self.down_until[i]

    def _least_loaded(self, exclude: set[int] = frozenset()) -> int | None:
        choices = [i for i in range(len(self.replicas)) if i not in exclude]
        up = [i for i in choices if self._up(i)] or choices  # all down: try anyway rather than fail unasked
        if not up:
            return None
        return min(up, key=lambda i: (self.outstanding[i], self.in_flight[i], self.routed[i], i))

    def pick(self, key: str | None = None, exclude: set[int] = frozenset()) -> int | None:
        """The replica index for the next request of trajectory ``key`` (None: not sticky), or None when every
        replica is excluded."""
        if self.sticky and key is not None and key in self._keys:
            i = self._keys[key]
            if i not in exclude and self._up(i):
                self._keys.move_to_end(key)
                self.sticky_hits += 1
                return i
        i = self._least_loaded(exclude)
        if self.sticky and key is not None and i is not None:
            self._keys[key] = i
            self._keys.move_to_end(key)
            while len(self._keys) > STICKY_KEYS:
                self._keys.popitem(last=False)
        return i

    # -- generating --------------------------------------------------------------------------------------------
    async def generate(self, input_ids: list[int], sampling: SamplingParams) -> GenerationOutput:
        """Generate on the least-loaded (or the trajectory's sticky) replica; on failure once more elsewhere.
        Raises EngineError naming every replica tried when all fail."""
        cost = len(input_ids) + int(sampling.max_tokens)
        key = routing_key.get()
        tried: set[int] = set()
        causes: list[str] = []
        self.stats.started(len(input_ids))
        out: GenerationOutput | None = None
        try:
            for _ in range(min(2, len(self.replicas))):
                i = self.pick(key, tried)
                if i is None:
                    break
                tried.add(i)
                self.outstanding[i] += cost
                self.in_flight[i] += 1
                self.routed[i] += 1
                try:
                    out = await self.replicas[i].generate(input_ids, sampling)
                    return out
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    self.errors[i] += 1
                    self.stats.errors += 1
                    self.down_until[i] = time.monotonic() + self.cooldown_s
                    causes.append(f"{self.names[i]}: {type(exc).__name__}: {exc}")
                    log.warning("engine router: %s failed (%s: %s); passed over for %g s", self.names[i],
                                type(exc).__name__, exc, self.cooldown_s)
                finally:
                    self.outstanding[i] -= cost
                    self.in_flight[i] -= 1
            raise EngineError("engine router: every replica tried failed: " + "; ".join(causes))
        finally:
            self.stats.finished(len(out.output_ids) if out is not None else 0)

    def load(self) -> list[dict[str, Any]]:
        """Per replica: ``name``, ``outstanding_tokens``, ``in_flight``, ``routed`` (requests so far),
        ``errors``, ``up``."""
        return [{"name": self.names[i], "outstanding_tokens": self.outstanding[i], "in_flight": self.in_flight[i],
                 "routed": self.routed[i], "errors": self.errors[i], "up": self._up(i)}
                for i in range(len(self.replicas))]

    # -- weights and lifetime ----------------------------------------------------------------------------------
    async def update_weights(self, state_dict: dict[str, Any] | None) -> None:
        """Push new weights to every replica (each raises as it would alone)."""
        await asyncio.gather(*(r.update_weights(state_dict) for r in self.replicas))

    async def load_weights_from(self, path: Any) -> list[Any]:
        """Ask every replica that can to load weights from ``path`` (see OpenAIEngine.load_weights_from)."""
        return list(await asyncio.gather(*(r.load_weights_from(path) for r in self.replicas
                                           if hasattr(r, "load_weights_from"))))

    async def close(self) -> None:
        await asyncio.gather(*(r.close() for r in self.replicas), return_exceptions=True)


async def build_engine(config: Any, registry: Any) -> Engine:
    """The run's engine: ``registry.get("inference_engines", config.engine.type)``, built by the placement
    ``engine.placement`` names (``registry.get("placements", ...)``) once per replica: ``engine.replicas`` copies,
    or one per URL of ``engine.endpoints`` (``engine.base_url`` set to each). One replica is returned as is;
    several sit behind an :class:`EngineRouter`. A replica that fails to build closes those already built and
    raises."""
    ec = config.engine
    factory = registry.get("inference_engines", ec.type)
    placement = registry.get("placements", ec.placement)
    if ec.endpoints:
        configs = [attrs.evolve(config, engine=attrs.evolve(ec, base_url=url)) for url in ec.endpoints]
    else:
        configs = [config] * ec.replicas
    replicas = await placement.place_engine(factory, configs)
    if len(replicas) == 1 and not ec.endpoints:
        return replicas[0]
    names = list(ec.endpoints) or [f"{member(r, 'inference_engines', 'name') or ec.type}-{i}"
                                   for i, r in enumerate(replicas)]
    log.info("engine router over %d replicas: %s (sticky: %s)", len(replicas), ", ".join(names), ec.sticky)
    return EngineRouter(replicas, names=names, sticky=ec.sticky)
