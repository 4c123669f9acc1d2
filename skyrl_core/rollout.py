"""Rollouts: tasks x samples -> trajectories, scheduled by the configured dispatcher.

A :class:`RolloutSession` builds everything a batch needs once from the registry and the config — the engine
(unless one is passed in), the chat format, the tool-call parser — and runs batches of trajectories through the
dispatcher's four stages (SkyRL-Agent, arXiv 2511.16108, Sec. 3.2):

- init: start the task's runtime (``registry.get("runtimes", spec.type)(spec)``, ``await rt.start()``, then
  ``await rt.prepare(instance)``) and build the initial messages with the task's instruction builder;
- run: the agent loop (:func:`skyrl_core.agent.run_agent`);
- eval: the task's verifier -> ``trajectory.reward`` and ``trajectory.metrics``;
- release: close the runtime (never raises).

A failure in any stage ends that trajectory with a named reason (``error_init``/``error_run``/``error_eval``)
and never the batch.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from typing import Any, Callable

import attrs

from .chat import ChatFormat
from .costs import StageCostMemory, instance_key, supplied_cost
from .errors import ConfigError
from .inference.base import SamplingParams
from .plugins import get_registry
from .runtime import RuntimeSpec
from .tasks import Instance, Task, run_verifier
from .tools import Tool, ToolContext
from .transitions import Trajectory

log = logging.getLogger(__name__)


@attrs.define
class _Resolved:
    """A task config bound to registered components."""

    task: Task
    tools: dict[str, Tool]
    builder: Callable
    verifier: Callable
    runtime_spec: RuntimeSpec
    runtime_cls: type


@attrs.define
class _Slot:
    """Per-trajectory state the stages share."""

    resolved: _Resolved
    instance: Instance
    ctx: ToolContext
    runtime: Any = None


def sampling_params(config: Any, **overrides: Any) -> SamplingParams:
    """SamplingParams from ``config.sampling`` (``n_samples`` is not a per-call setting)."""
    s = config.sampling
    values = dict(temperature=s.temperature, top_p=s.top_p, top_k=s.top_k, max_tokens=s.max_tokens, seed=s.seed)
    values.update(overrides)
    return SamplingParams(**values)


class RolloutSession:
    """Engine, chat format, parser and resolved tasks for a run. Create with ``await RolloutSession.create``.

    ``on_trajectory_done(trajectory)`` (optional, set by callers such as ``skyrl eval``) is called once per
    trajectory when its runtime has been released.

    ``cost_memory`` (:class:`~skyrl_core.costs.StageCostMemory`) remembers each instance's measured stage seconds
    across rollouts when ``dispatcher.remember_costs`` is on (the default): every rollout sets
    ``trajectory.metrics["priority"]`` from it before dispatching (an instance's own
    ``data["expected_cost_s"]`` wins) and records the finished trajectories after. The trainer's checkpoints
    save it.
    """

    def __init__(self, config: Any, engine: Any, registry: Any = None, owns_engine: bool = False) -> None:
        self.config = config
        self.registry = registry or get_registry()
        self.engine = engine
        self.owns_engine = owns_engine
        self.chat = ChatFormat(engine.tokenizer, keep_thinking=config.agent.keep_thinking,
                               template_kwargs=config.agent.chat_template_kwargs)
        parser = self.registry.get("parsers", config.agent.parser)
        self.parser = parser() if isinstance(parser, type) else parser
        self._resolved: dict[int, _Resolved] = {}
        self.on_trajectory_done: Callable[[Trajectory], None] | None = None
        self.cost_memory = StageCostMemory()
        for tc in config.tasks:
            self._resolve(tc)

    @classmethod
    async def create(cls, config: Any, engine: Any = None, registry: Any = None) -> "RolloutSession":
        """Build the session; the engine comes from ``registry.get("inference_engines", config.engine.type)``
        unless given (then the caller closes it). Raises UnknownComponentError / ConfigError naming a missing
        tool, task, verifier, instruction builder, runtime, parser or engine."""
        registry = registry or get_registry()
        owns = engine is None
        if engine is None:
            factory = registry.get("inference_engines", config.engine.type)
            engine = await asyncio.to_thread(factory, config)
        try:
            return cls(config, engine, registry, owns_engine=owns)
        except BaseException:
            if owns:
                await engine.close()
            raise

    # -- instances ---------------------------------------------------------------------------------------
    def load_instances(self, split: str = "train") -> list[tuple[Any, Instance]]:
        """Every configured task's instances for ``split``: ``train`` reads ``data``; ``eval`` reads
        ``eval_data`` (falling back to ``data``). Returns (TaskConfig, Instance) pairs in task order."""
        if split not in ("train", "eval"):
            raise ConfigError(f"split must be 'train' or 'eval', got {split!r}")
        items: list[tuple[Any, Instance]] = []
        for tc in self.config.tasks:
            resolved = self._resolve(tc)
            spec = tc.data if split == "train" or tc.eval_data is None else tc.eval_data
            items.extend((tc, inst) for inst in resolved.task.select(spec))
        return items

    # -- a batch -----------------------------------------------------------------------------------------
    async def rollout(self, items: list[tuple[Any, Instance]], n_samples: int,
                      sampling: SamplingParams | None = None) -> tuple[list[Trajectory], dict]:
        """Roll out each (TaskConfig, Instance) ``n_samples`` times. Returns the trajectories (grouped: the
        samples of one item share a ``group_id``, in item order) and the dispatcher's metrics."""
        if n_samples < 1:
            raise ConfigError(f"n_samples must be at least 1, got {n_samples}")
        sampling = sampling or sampling_params(self.config)
        trajectories: list[Trajectory] = []
        slots: dict[int, _Slot] = {}
        seen: dict[str, int] = {}
        cost_keys: list[str] = []
        supplied: dict[str, float] = {}
        remember = self.config.dispatcher.remember_costs
        for tc, inst in items:
            resolved = self._resolve(tc)
            if remember:
                key = instance_key(tc.name, inst)
                cost = supplied_cost(inst)
                if cost is not None:
                    supplied[key] = cost
            group = f"{tc.name}:{inst.id}"
            seen[group] = seen.get(group, 0) + 1
            if seen[group] > 1:
                group = f"{group}/{seen[group] - 1}"
            for k in range(n_samples):
                traj = Trajectory(instance_id=inst.id, sample_index=k, task=tc.name, group_id=group)
                trajectories.append(traj)
                if remember:
                    cost_keys.append(key)
                slots[id(traj)] = _Slot(resolved=resolved, instance=inst, ctx=ToolContext(instance=inst,
                                                                                          engine=self.engine))

        cfg = self.config

        def sampling_for(traj: Trajectory) -> SamplingParams:
            if sampling.seed is None:
                return sampling
            # distinct samples of a group must differ; seed + index keeps them reproducible
            return attrs.evolve(sampling, seed=sampling.seed + trajectories_index[id(traj)])

        trajectories_index = {id(t): i for i, t in enumerate(trajectories)}

        async def init(traj: Trajectory) -> None:
            slot = slots[id(traj)]
            rt = slot.resolved.runtime_cls(slot.resolved.runtime_spec)
            slot.runtime = rt
            slot.ctx.runtime = rt
            await rt.start()
            prepare = getattr(rt, "prepare", None)
            if prepare is not None:
                await prepare(slot.instance)
            messages = slot.resolved.builder(slot.instance, slot.resolved.task)
            if inspect.isawaitable(messages):
                messages = await messages
            messages = [dict(m) for m in messages]
            if cfg.agent.system_prompt:
                if messages and messages[0].get("role") == "system":
                    messages[0]["content"] = cfg.agent.system_prompt
                else:
                    messages.insert(0, {"role": "system", "content": cfg.agent.system_prompt})
            traj.messages = messages

        async def run(traj: Trajectory) -> None:
            from .agent import run_agent

            slot = slots[id(traj)]
            await run_agent(traj, engine=self.engine, tools=slot.resolved.tools, parser=self.parser,
                            chat=self.chat, agent_config=cfg.agent, sampling=sampling_for(traj), ctx=slot.ctx,
                            engine_timeout_s=cfg.engine.timeout_s)

        async def evaluate(traj: Trajectory) -> None:
            slot = slots[id(traj)]
            result = await run_verifier(slot.resolved.verifier, traj, slot.runtime, slot.instance)
            traj.reward = float(result.reward)
            traj.metrics.update(result.metrics)

        async def release(traj: Trajectory) -> None:
            slot = slots[id(traj)]
            try:
                if slot.runtime is not None:
                    await slot.runtime.close()
            except Exception as exc:  # release never raises; a broken close is logged
                log.warning("trajectory %s: closing its runtime failed: %s: %s", traj.id, type(exc).__name__, exc)
            finally:
                if self.on_trajectory_done is not None:
                    try:
                        self.on_trajectory_done(traj)
                    except Exception:
                        log.exception("on_trajectory_done callback failed")

        from .dispatchers import Stages

        dispatcher = self.registry.get("dispatchers", cfg.dispatcher.type)(cfg.dispatcher, self.engine.stats)
        sources = self.cost_memory.assign(trajectories, cost_keys, supplied) if remember else {}
        metrics = await dispatcher.dispatch(trajectories, Stages(init=init, run=run, eval=evaluate,
                                                                  release=release))
        if remember:
            # a cancelled dispatch raises past this point: its cut-off stages are not costs worth remembering
            metrics["costs_recorded"] = self.cost_memory.record_trajectories(trajectories, cost_keys)
            metrics["costs_remembered_instances"] = len(self.cost_memory)
            metrics.update({f"priority_from_{source}": n for source, n in sources.items()})
        return trajectories, metrics

    async def close(self) -> None:
        """Close the engine when this session built it."""
        if self.owns_engine:
            await self.engine.close()

    # -- resolution --------------------------------------------------------------------------------------
    def _resolve(self, tc: Any) -> _Resolved:
        key = id(tc)
        if key in self._resolved:
            return self._resolved[key]
        reg = self.registry
        task = reg.get("tasks", tc.name)
        tool_names = list(tc.tools) if tc.tools is not None else list(task.tools)
        if not tool_names:
            raise ConfigError(f"task '{tc.name}' has no tools; set tasks.N.tools (registered: "
                              f"{', '.join(reg.names('tools'))})")
        tools = {name: reg.get("tools", name) for name in tool_names}
        builder = reg.get("instruction_builders", tc.instruction_builder or task.instruction_builder)
        verifier = reg.get("verifiers", tc.verifier or task.verifier)
        spec = tc.runtime if tc.runtime is not None else RuntimeSpec(type=task.runtime)
        runtime_cls = reg.get("runtimes", spec.type)
        resolved = _Resolved(task=task, tools=tools, builder=builder, verifier=verifier, runtime_spec=spec,
                             runtime_cls=runtime_cls)
        self._resolved[key] = resolved
        return resolved
