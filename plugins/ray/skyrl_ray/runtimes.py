"""Runtime placement on Ray: any registered runtime (sandbox, swe_sandbox, docker, browser, ...) lives in a Ray
actor placed by resource requests, and the trajectory's tool calls and its verifier run there as remote calls.

Selected per task by ``tasks.N.runtime.placement: ray`` (``resources: {num_cpus: 1, ...}``, ``max_actors``);
the cluster is ``plugins.ray.*`` in the config (docs/scale-out.md). Nothing else of the run changes: the dispatcher's
stages, the task, its tools and its verifier are the same objects as with local placement.

How one trajectory maps onto Ray:

- **init**: :class:`RayRuntime` (the host-side stand-in the rollout holds) leases an actor from the task's
  :class:`ActorPool` and the actor builds the real runtime (``runtime_cls(spec)``, ``start``, ``prepare``) on
  its node. An actor hosts one runtime at a time: one trajectory per actor, so a dead actor ends one
  trajectory.
- **run**: each tool call is a remote call: the arguments, the agent's state (messages, memory) and the instance
  go to the actor, which runs the tool against its local runtime with a per-trajectory ``ctx.store`` kept there
  (editor undo history, search index); the ToolResult and the memory come back. ``ctx.engine`` is None in the
  actor (engines stay with the driver); a tool that reads the tokenizer from it falls back as without an engine.
- **eval**: the verifier runs in the actor, against the live runtime (a verifier that starts a fresh runtime,
  such as the swe one, starts it on the same node), and returns its VerifierResult.
- **release**: the actor closes its runtime and goes back to the pool for the next trajectory; released exactly
  once per lease (a second release is counted in ``ActorPool.double_releases`` and ignored).

A dead actor (its process killed, its node gone) raises :class:`~skyrl_core.errors.RuntimeLost` from the next call,
which ends that trajectory only, with finish reason ``error_runtime``; the pool drops the actor and starts a
replacement for the next lease (``ActorPool.replaced``). An idle actor found dead at lease time is replaced before
any trajectory sees it.

Tools, verifiers and runtime classes travel to the actors by pickle (cloudpickle: by reference for importable
module functions), so every node needs the same packages installed (or a ``ray.runtime_env``).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import math
import os
import threading
from collections import deque
from typing import Any, Callable

import attrs

from skyrl_core.errors import ConfigError, MissingExtraError, RuntimeLost, SkyrlError
from skyrl_core.runtime import ExecResult, Runtime, RuntimeSpec
from skyrl_core.tools import Tool, ToolContext, ToolResult

log = logging.getLogger(__name__)

_INIT_LOCK = threading.Lock()
START_ATTEMPTS = 3  # an idle actor found dead at lease time is replaced this many times before init fails


def _ray():
    try:
        import ray
    except ImportError as exc:
        raise MissingExtraError(f"placement: ray needs the python package 'ray' (pip install 'ray>=2.40', which "
                                f"skyrl-ray depends on); import failed with: {exc}") from exc
    return ray


_LOCAL_START_ATTEMPTS = 3  # tries of a local cluster's start (Ray's own bound: 30 s each)


def ensure_ray(ray_config: Any = None) -> Any:
    """Connect to (or start) the Ray cluster once per process and return the ``ray`` module.

    Already initialised (a test or the user called ``ray.init``): used as is. Otherwise ``ray.init`` with
    ``ray_config`` (:class:`skyrl_ray.config.RayClusterConfig`): ``address`` None starts a local cluster of
    ``num_cpus`` CPUs without the dashboard. Raises MissingExtraError without ray installed, SkyrlError naming
    ``plugins.ray.address`` when the cluster cannot be reached."""
    ray = _ray()
    with _INIT_LOCK:
        if ray.is_initialized():
            return ray
        address = getattr(ray_config, "address", None)
        kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": True}
        if address in (None, "local"):
            kwargs["num_cpus"] = getattr(ray_config, "num_cpus", None)
        else:
            check_reachable(address)
            kwargs["address"] = address
        if getattr(ray_config, "namespace", None):
            kwargs["namespace"] = ray_config.namespace
        if getattr(ray_config, "runtime_env", None):
            kwargs["runtime_env"] = dict(ray_config.runtime_env)
        for attempt in range(1, _LOCAL_START_ATTEMPTS + 1):
            try:
                ray.init(**kwargs)
                break
            except (ConnectionError, RuntimeError, ValueError) as exc:
                raise SkyrlError(f"cannot connect to the Ray cluster at plugins.ray.address {address!r}: {exc}; "
                                 f"start one (ray start --head) or leave plugins.ray.address out for a local "
                                 f"cluster") from None
            except Exception as exc:  # noqa: BLE001 - Ray raises a bare Exception for a slow local start
                # Ray gives a new local node a fixed 30 s to register (ray/_private/node.py: raylet_start_wait_time_s,
                # not configurable); a busy host can take longer though nothing is wrong. Start again, a few times.
                if "timed out during startup" not in str(exc) or address not in (None, "local"):
                    raise
                ray.shutdown()
                if attempt == _LOCAL_START_ATTEMPTS:
                    raise SkyrlError(f"the local Ray cluster did not start in {attempt} tries of Ray's fixed 30 s "
                                     f"each ({exc}); the host is too busy, or set plugins.ray.address to a running "
                                     f"cluster") from None
                log.warning("ray: the local cluster did not register in Ray's 30 s (a busy host?): starting it "
                            "again (%d of %d)", attempt + 1, _LOCAL_START_ATTEMPTS)
        log.info("ray: connected to %s (%s)", address or "a new local cluster", ray.cluster_resources())
        return ray


def check_reachable(address: str | None, timeout_s: float = 5.0) -> None:
    """Raise SkyrlError naming ``plugins.ray.address`` when a ``HOST:PORT`` address does not accept a TCP connection
    within ``timeout_s`` seconds (``ray.init`` would otherwise retry for minutes). ``auto``, ``local``, None and
    ``ray://`` addresses are left to Ray, which fails fast on them."""
    import socket

    if address is None or address in ("auto", "local") or "://" in address:
        return
    host, _, port = address.rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except (OSError, ValueError) as exc:
        raise SkyrlError(f"cannot reach the Ray cluster at plugins.ray.address {address!r} ({type(exc).__name__}: "
                         f"{exc}); start it (ray start --head --port={port}) or fix the address; leave "
                         f"plugins.ray.address out for a local cluster") from None


def actor_options(resources: dict[str, Any]) -> dict[str, Any]:
    """``runtime.resources`` as ``ray.remote`` options: ``num_cpus`` (default 1, so that the cluster's CPUs
    bound how many runtimes run at once), ``num_gpus``, ``memory`` (bytes, from ``memory_mb``) and custom
    ``resources``."""
    opts: dict[str, Any] = {"num_cpus": resources.get("num_cpus", 1)}
    if "num_gpus" in resources:
        opts["num_gpus"] = resources["num_gpus"]
    if "memory_mb" in resources:
        opts["memory"] = int(resources["memory_mb"] * 1024 * 1024)
    if resources.get("resources"):
        opts["resources"] = dict(resources["resources"])
    return opts


def cluster_capacity(nodes: list[dict], options: dict[str, Any]) -> int:
    """How many actors with ``options`` (from :func:`actor_options`) fit on the alive ``nodes``
    (``ray.nodes()``): per node, the floor of its amount over the request for every requested resource."""
    request = {"CPU": options.get("num_cpus", 1), "GPU": options.get("num_gpus", 0),
               "memory": options.get("memory", 0), **options.get("resources", {})}
    request = {k: v for k, v in request.items() if v}
    total = 0
    for node in nodes:
        if not node.get("Alive", node.get("alive", True)):
            continue
        have = node.get("Resources", {})
        fits = min((math.floor(have.get(k, 0) / v + 1e-9) for k, v in request.items()), default=math.inf)
        if fits == math.inf:  # a request of nothing (num_cpus: 0): bounded by nothing but max_actors
            return 1_000_000
        total += int(fits)
    return total


class RuntimeActor:
    """The body of a runtime actor (wrapped with ``ray.remote`` by :class:`ActorPool`): one runtime at a time,
    the tools and the verifier of its task, and the tools' per-trajectory store. Every method is async: Ray
    runs them on the actor's event loop, as the runtime's own coroutines expect."""

    def __init__(self, runtime_cls: Callable[[RuntimeSpec], Runtime], tools: dict[str, Tool], verifier: Any,
                 verifier_name: str) -> None:
        self.runtime_cls = runtime_cls
        self.tools = tools
        self.verifier = verifier
        self.verifier_name = verifier_name
        self.runtime: Runtime | None = None
        self.store: dict[str, Any] = {}
        self.leases = 0

    def info(self) -> dict[str, Any]:
        """Where the actor runs and what its runtime reports: ``pid``, ``node`` (Ray node id), ``workspace``
        (a path on that node), ``isolation``, ``limit_hits``, ``leases`` (trajectories it has hosted)."""
        import ray

        rt = self.runtime
        return {"pid": os.getpid(), "node": ray.get_runtime_context().get_node_id(), "leases": self.leases,
                "workspace": str(rt.workspace) if rt is not None and rt.workspace is not None else None,
                "isolation": getattr(rt, "isolation", None), "limit_hits": dict(getattr(rt, "limit_hits", {}) or {})}

    async def start(self, spec: RuntimeSpec) -> dict[str, Any]:
        if self.runtime is not None:  # a lease that was never released: close what it left
            await self.close()
        self.leases += 1
        self.store = {}
        self.runtime = self.runtime_cls(attrs.evolve(spec, placement="local", resources={}, max_actors=None))
        await self.runtime.start()
        return self.info()

    async def prepare(self, instance: Any) -> dict[str, Any]:
        prepare = getattr(self._rt(), "prepare", None)
        if prepare is not None:
            await prepare(instance)
        return self.info()

    async def exec(self, command: Any, timeout_s: float, stdin: str | None, env: dict[str, str] | None):
        return await self._rt().exec(command, timeout_s=timeout_s, stdin=stdin, env=env), self.info()

    async def read_file(self, relpath: str) -> str:
        return await self._rt().read_file(relpath)

    async def write_file(self, relpath: str, content: str) -> None:
        await self._rt().write_file(relpath, content)

    async def call_tool(self, name: str, args: dict, messages: list[dict], memory: dict[str, Any],
                        instance: Any) -> tuple[ToolResult, dict[str, Any], dict[str, Any]]:
        """Run tool ``name`` against the local runtime. Returns (result, the agent memory after the call, info).
        Raises what the tool raises (the driver's agent loop turns it into a corrective observation)."""
        from skyrl_core.tools import AgentState

        tool = self.tools.get(name)
        if tool is None:
            raise SkyrlError(f"tool '{name}' is not one of this task's tools ({', '.join(sorted(self.tools))})")
        ctx = ToolContext(runtime=self._rt(), state=AgentState(messages=messages, memory=memory), engine=None,
                          instance=instance, store=self.store)
        result = await tool.call(args, ctx)
        return result, ctx.state.memory, self.info()

    async def verify(self, trajectory: Any, instance: Any) -> tuple[Any, dict[str, Any]]:
        """Run the task's verifier on the live runtime; returns (VerifierResult, info)."""
        from skyrl_core.rollout import call_verifier

        return await call_verifier(self.verifier, trajectory, self.runtime, instance), self.info()

    async def close(self) -> dict[str, Any]:
        rt, self.runtime = self.runtime, None
        self.store = {}
        if rt is not None:
            await rt.close()
        return {"pid": os.getpid(), "leases": self.leases}

    def ping(self) -> int:
        return os.getpid()

    def _rt(self) -> Runtime:
        if self.runtime is None:
            raise SkyrlError("the runtime actor holds no runtime (not started, or already closed)")
        return self.runtime


@attrs.define(eq=False)
class Lease:
    """One trajectory's hold on one actor: ``id`` (unique in its pool), ``actor`` (a Ray actor handle),
    ``dead`` once a call found the actor gone, ``released`` once given back."""

    id: int
    actor: Any
    dead: bool = False
    released: bool = False
    info: dict[str, Any] = attrs.Factory(dict)


class ActorPool:
    """The runtime actors of one task: leased one trajectory at a time, reused after release, replaced when dead.

    At most ``max_actors`` actors exist at once (default: as many as the cluster's alive nodes fit with the
    requested resources, read when the first actor is needed); a lease beyond that waits for a release. Counters:
    ``created``, ``replaced`` (dead actors dropped), ``leases``, ``releases``, ``double_releases``, ``peak``."""

    def __init__(self, runtime_cls: Callable, tools: dict[str, Tool], verifier: Any, verifier_name: str,
                 resources: dict[str, Any], max_actors: int | None, ray_config: Any = None) -> None:
        self._args = (runtime_cls, tools, verifier, verifier_name)
        self.options = actor_options(resources)
        self.max_actors = max_actors
        self.ray_config = ray_config
        self._remote: Any = None
        self._ids = itertools.count(1)
        self.idle: deque[Any] = deque()
        self.busy: dict[int, Lease] = {}
        self.alive = 0
        self._waiters: deque[asyncio.Future] = deque()
        self._setup_lock = asyncio.Lock()
        self.created = self.replaced = self.leases = self.releases = self.double_releases = self.peak = 0

    async def _setup(self) -> None:
        if self._remote is not None:
            return
        async with self._setup_lock:  # the first leases of a batch arrive together: connect and size once
            if self._remote is None:
                await self._connect()

    async def _connect(self) -> None:
        if threading.current_thread() is threading.main_thread():
            # on the main thread, so that a local cluster gets Ray's SIGTERM handler (it blocks the loop once, for
            # the seconds ray.init takes, while every trajectory waits for this pool anyway)
            ray = ensure_ray(self.ray_config)
        else:
            ray = await asyncio.to_thread(ensure_ray, self.ray_config)
        if self.max_actors is None:
            nodes = await asyncio.to_thread(ray.nodes)
            fits = cluster_capacity(nodes, self.options)
            if fits < 1:
                have = await asyncio.to_thread(ray.cluster_resources)
                raise ConfigError(f"runtime.resources {self.options} do not fit on any node of the Ray cluster "
                                  f"(it has {have}); ask for less, or add nodes with those resources")
            self.max_actors = fits
        self._remote = ray.remote(RuntimeActor).options(max_restarts=0, max_task_retries=0, **self.options)

    async def acquire(self) -> Lease:
        """A lease on an idle actor, a new actor, or (at ``max_actors``) the next one released."""
        await self._setup()
        while True:
            if self.idle:
                actor = self.idle.popleft()
                break
            if self.alive < self.max_actors:
                actor = self._remote.remote(*self._args)
                self.alive += 1
                self.created += 1
                break
            fut = asyncio.get_running_loop().create_future()
            self._waiters.append(fut)
            try:
                await fut
            except asyncio.CancelledError:
                if fut in self._waiters:
                    self._waiters.remove(fut)
                elif fut.done() and not fut.cancelled():
                    self._wake()  # the slot we were handed goes to the next waiter
                raise
        lease = Lease(id=next(self._ids), actor=actor)
        self.busy[lease.id] = lease
        self.leases += 1
        self.peak = max(self.peak, len(self.busy))
        return lease

    def release(self, lease: Lease) -> None:
        """Give ``lease`` back exactly once: its actor returns to the idle set, or, dead, is killed and its slot
        freed for a replacement. A second release of the same lease is counted and ignored."""
        if lease.released or lease.id not in self.busy:
            self.double_releases += 1
            log.error("ray runtime: lease %d released twice (ignored)", lease.id)
            return
        lease.released = True
        del self.busy[lease.id]
        self.releases += 1
        if lease.dead:
            self._drop(lease.actor)
        else:
            self.idle.append(lease.actor)
        self._wake()

    def _drop(self, actor: Any) -> None:
        import ray

        self.alive -= 1
        self.replaced += 1
        try:
            ray.kill(actor, no_restart=True)
        except Exception:  # already gone
            pass

    def _wake(self) -> None:
        while self._waiters:
            fut = self._waiters.popleft()
            if not fut.done():
                fut.set_result(None)
                return

    def stats(self) -> dict[str, int]:
        return {"actors_alive": self.alive, "actors_idle": len(self.idle), "actors_busy": len(self.busy),
                "actors_created": self.created, "actors_replaced": self.replaced, "leases": self.leases,
                "releases": self.releases, "double_releases": self.double_releases, "peak_leases": self.peak}

    async def shutdown(self) -> None:
        """Kill every idle actor (busy ones are released first by their trajectories)."""
        import ray

        if self.busy:
            log.warning("ray runtime: shutting down with %d leases still held", len(self.busy))
        actors = list(self.idle) + [lease.actor for lease in self.busy.values()]
        self.idle.clear()
        self.busy.clear()
        for actor in actors:
            try:
                ray.kill(actor, no_restart=True)
            except Exception:
                pass
        self.alive = 0


def _lost(exc: BaseException) -> bool:
    """Whether a Ray error means the actor (its process or node) is gone, rather than a failing call."""
    import ray.exceptions as rex

    return isinstance(exc, (rex.RayActorError, rex.WorkerCrashedError, rex.NodeDiedError,
                            getattr(rex, "ActorUnavailableError", rex.RayActorError)))


class RayRuntime(Runtime):
    """The driver-side stand-in of a runtime that lives in a Ray actor (see the module doc).

    ``start`` leases an actor and starts the real runtime there; ``exec``, ``read_file``, ``write_file``,
    ``prepare``, tool calls (:meth:`call_tool`) and the verifier (:meth:`verify`) are remote calls; ``close``
    closes it and releases the lease once. ``workspace`` stays None here (the files are on the actor's node);
    ``remote`` holds what the actor last reported (``pid``, ``node``, ``workspace``, ``limit_hits``). Raises
    RuntimeLost when the actor dies."""

    name = "ray"

    def __init__(self, spec: RuntimeSpec, placement: "RayTaskPlacement") -> None:
        super().__init__(spec)
        self.placement = placement
        self.lease: Lease | None = None
        self.remote: dict[str, Any] = {}
        self.isolation = "unknown"

    async def _call(self, method: str, *args: Any) -> Any:
        import ray.exceptions as rex

        lease = self.lease
        if lease is None or lease.released:
            raise SkyrlError(f"the {self.spec.type} runtime on Ray is not started (or already closed)")
        if lease.dead:
            raise RuntimeLost(self._lost_message("earlier"))
        ref = getattr(lease.actor, method).remote(*args)
        try:
            return await ref
        except asyncio.CancelledError:
            import ray

            ray.cancel(ref)  # stop the remote coroutine too (a tool past its timeout)
            raise
        except rex.RayTaskError as exc:  # the call itself raised: re-raise the original error
            cause = getattr(exc, "cause", None)
            if isinstance(cause, BaseException) and not _lost(cause):
                raise cause from None
            lease.dead = True
            raise RuntimeLost(self._lost_message(exc)) from None
        except Exception as exc:
            if not _lost(exc):
                raise
            lease.dead = True
            raise RuntimeLost(self._lost_message(exc)) from None

    def _lost_message(self, exc: Any) -> str:
        where = f"pid {self.remote.get('pid')} on node {str(self.remote.get('node'))[:12]}" if self.remote else \
            "not yet started"
        cause = "it died in an earlier call" if exc == "earlier" else f"{type(exc).__name__}: {str(exc)[:300]}"
        return f"the {self.spec.type} runtime's Ray actor ({where}) is gone: {cause}"

    def _update(self, info: dict[str, Any]) -> None:
        self.remote = info
        self.isolation = info.get("isolation") or self.isolation
        self.limit_hits.clear()
        self.limit_hits.update(info.get("limit_hits") or {})

    async def start(self) -> None:
        pool = self.placement.pool
        for attempt in range(START_ATTEMPTS):
            self.lease = await pool.acquire()
            try:
                self._update(await self._call("start", self.spec))
                return
            except RuntimeLost as exc:
                # an actor that died while idle: replace it before any trajectory depends on it
                pool.release(self.lease)
                self.lease = None
                if attempt == START_ATTEMPTS - 1:
                    raise RuntimeLost(f"{exc} ({START_ATTEMPTS} actors in a row were lost at start)") from None
            # any other failure (the runtime could not start) is the init stage's: its release closes us

    async def prepare(self, instance: Any) -> None:
        self._update(await self._call("prepare", instance))

    async def exec(self, command: str | list[str], timeout_s: float = 30.0, stdin: str | None = None,
                   env: dict[str, str] | None = None) -> ExecResult:
        result, info = await self._call("exec", command, timeout_s, stdin, env)
        self._update(info)
        return result

    async def read_file(self, relpath: str) -> str:
        return await self._call("read_file", relpath)

    async def write_file(self, relpath: str, content: str) -> None:
        await self._call("write_file", relpath, content)

    async def call_tool(self, name: str, args: dict, ctx: ToolContext) -> ToolResult:
        """Run tool ``name`` in the actor with this trajectory's agent state; the memory it leaves comes back
        into ``ctx.state.memory``."""
        result, memory, info = await self._call("call_tool", name, args, list(ctx.state.messages),
                                                dict(ctx.state.memory), ctx.instance)
        ctx.state.memory = memory
        self._update(info)
        return result

    async def verify(self, trajectory: Any, instance: Any) -> Any:
        result, info = await self._call("verify", trajectory, instance)
        self._update(info)
        return result

    async def close(self) -> None:
        """Close the remote runtime and release the lease exactly once (safe to call twice; never raises for
        a dead actor)."""
        if self.closed:
            return
        self.closed = True
        lease = self.lease
        if lease is None:
            return
        try:
            if not lease.dead:
                await self._call("close")
        except RuntimeLost:
            pass
        finally:
            self.lease = None
            self.placement.pool.release(lease)


def remote_tool(tool: Tool) -> Tool:
    """A tool with ``tool``'s name, description, schema and timeout whose calls run in the trajectory's runtime
    actor (``ctx.runtime`` is a RayRuntime). Arguments are checked against the schema here first, as locally."""

    async def handler(args: dict, ctx: ToolContext) -> ToolResult:
        runtime = ctx.runtime
        if not isinstance(runtime, RayRuntime):
            raise SkyrlError(f"tool '{tool.name}' is placed on Ray but this trajectory's runtime is "
                             f"{type(runtime).__name__}, not a RayRuntime")
        return await runtime.call_tool(tool.name, args, ctx)

    return Tool(name=tool.name, description=tool.description, parameters=tool.parameters, handler=handler,
                timeout_s=tool.timeout_s)


def remote_verifier(verifier_name: str) -> Callable:
    """An async verifier ``(trajectory, runtime, instance)`` that runs the task's verifier in the runtime's actor."""

    async def verify(trajectory: Any, runtime: Any, instance: Any) -> Any:
        if not isinstance(runtime, RayRuntime):
            raise SkyrlError(f"verifier '{verifier_name}' is placed on Ray but the runtime is "
                             f"{type(runtime).__name__}")
        return await runtime.verify(trajectory, instance)

    verify.__name__ = f"remote_{verifier_name}"
    return verify


class RayTaskPlacement:
    """A task's runtimes on Ray: called like a runtime class (``placement(spec) -> RayRuntime``), it owns the
    task's :class:`ActorPool`. Built by :meth:`skyrl_ray.placement.RayPlacement.place_task`; ``shutdown()``
    kills its actors."""

    def __init__(self, runtime_cls: Callable, tools: dict[str, Tool], verifier: Any, verifier_name: str,
                 spec: RuntimeSpec, ray_config: Any = None) -> None:
        self.runtime_cls = runtime_cls
        self.pool = ActorPool(runtime_cls, tools, verifier, verifier_name, spec.resources, spec.max_actors,
                              ray_config)

    def __call__(self, spec: RuntimeSpec | None = None, **kwargs: Any) -> RayRuntime:
        return RayRuntime(spec or RuntimeSpec(type=getattr(self.runtime_cls, "name", "sandbox")), self)

    async def shutdown(self) -> None:
        await self.pool.shutdown()
