"""Rollouts: tasks x samples -> trajectories, scheduled by the configured dispatcher.

A :class:`RolloutSession` builds everything a batch needs once from the registry and the config — the engine
(unless one is passed in), the chat format, the tool-call parser — and runs batches of trajectories through the
dispatcher's four stages (SkyRL-Agent, arXiv 2511.16108, Sec. 3.2):

- init: start the task's runtime (``registry.get("runtimes", spec.type)(spec)``, ``await rt.start()``, then
  ``await rt.prepare(instance)``) and build the initial messages with the task's instruction builder;
- run: the agent loop (:func:`skyrl_core.agent.run_agent`);
- eval: the task's verifier -> ``trajectory.reward`` and ``trajectory.metrics`` (a synchronous verifier runs in
  a worker thread; a reward that is not a finite number ends the trajectory ``error_eval``, see
  :func:`checked_reward`);
- release: close the runtime (never raises).

A failure in any stage ends that trajectory with a named reason (``error_init``/``error_run``/``error_eval``)
and never the batch.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import inspect
import json
import logging
import math
import numbers
import re
import unicodedata
from typing import Any, Callable, Iterable, Sequence

import attrs

from .config import task_agent_config, task_sampling_config
from .contracts import member
from .errors import ConfigError
from .inference.base import SamplingParams, routing_key
from .notes import note
from .placement import PlacedTask, check_placements
from .plugins import get_registry
from .runtime import RuntimeSpec
from .tasks import TAMPERED, UNVERIFIABLE, Instance, Task, Unverifiable, VerifierResult, run_verifier
from .tools import Tool, ToolContext
from .transitions import Trajectory

log = logging.getLogger(__name__)

CALL_BOUND_GRACE_S = 5.0  # the agent loop's per-call backstop trails engine.call_timeout_s by this (seconds)


@attrs.define
class _Resolved:
    """A task config bound to registered components."""

    task: Task
    tools: dict[str, Tool]
    builder: Callable
    verifier: Callable
    verifier_name: str
    runtime_spec: RuntimeSpec
    runtime_cls: Callable  # the placed runtime class: runtime_cls(spec) -> Runtime
    placed: PlacedTask
    agent: Any  # the task's AgentConfig (the run's, with tasks.N.agent / tasks.N.parser applied)
    parser: Any
    chat: Any  # the chat format (skyrl_core.contracts.ChatFormat)
    sampling: dict[str, Any]  # the SamplingParams keys tasks.N.sampling overrides


@attrs.define
class _Slot:
    """Per-trajectory state the stages share."""

    resolved: _Resolved
    instance: Instance
    ctx: ToolContext
    runtime: Any = None


_SPACE = re.compile(r"\s+")


def instance_content(instance: Instance, fields: Sequence[str] = ()) -> str:
    """The normalised content of an instance, which decides whether two instances pose the same problem.

    ``fields`` is the task's ``content_fields`` (the ``Task`` contract): the first of them that holds a string in
    ``instance.data`` is the content; with none given (or none present) it is the whole of ``data`` as sorted JSON. The text is Unicode NFKC-normalised,
    case-folded, with all whitespace removed and trailing full stops dropped: so ``"Calculate 48 / 2."`` and
    ``"calculate 48/2"`` are one problem. Ids are not compared (a problem repeated under another id is still a
    leak).
    """
    data = instance.data
    text = next((data[f] for f in fields if isinstance(data.get(f), str)), None)
    if text is None:  # the whole instance: numbers such as a generator's seed tell problems apart too
        text = json.dumps(data, sort_keys=True, default=str)
    return _SPACE.sub("", unicodedata.normalize("NFKC", text).casefold()).rstrip(".")


def clean_eval_split(candidates: Iterable[Instance], train_contents: set[str],
                     limit: int | None = None, fields: Sequence[str] = ()) -> tuple[list[Instance], dict[str, int]]:
    """The eval instances, in order, that pose no train problem and no earlier eval problem, at most ``limit``.

    ``train_contents`` holds the :func:`instance_content` of every train instance; ``fields`` is the eval task's
    ``content_fields``. Returns the kept instances and ``{"eval_train_overlap", "eval_repeats", "eval_kept"}``
    (counts of the candidates looked at before ``limit`` was reached)."""
    kept: list[Instance] = []
    seen: set[str] = set()
    overlap = repeats = 0
    for inst in candidates:
        if limit is not None and len(kept) >= limit:
            break
        content = instance_content(inst, fields)
        if content in train_contents:
            overlap += 1
        elif content in seen:
            repeats += 1
        else:
            seen.add(content)
            kept.append(inst)
    return kept, {"eval_train_overlap": overlap, "eval_repeats": repeats, "eval_kept": len(kept)}


class RewardError(ValueError):
    """A verifier's reward is not a finite number (the trajectory ends ``error_eval`` with this message)."""


def checked_reward(reward: Any, verifier: str = "verifier") -> float:
    """``reward`` as a float. Raises RewardError naming the verifier when it is not a real number (a string,
    None, a bool) or not finite (NaN, +-inf): such a reward would poison its group's advantages."""
    if isinstance(reward, bool) or not isinstance(reward, numbers.Real):
        raise RewardError(f"verifier '{verifier}' returned reward {reward!r} ({type(reward).__name__}); "
                          f"a reward must be a finite real number")
    value = float(reward)
    if not math.isfinite(value):
        raise RewardError(f"verifier '{verifier}' returned a non-finite reward {value}")
    return value


def _is_async_callable(fn: Any) -> bool:
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(getattr(fn, "__call__", None))


def apply_verifier_result(traj: Any, result: VerifierResult, verifier_name: str) -> None:
    """Record a verdict on ``traj`` under the outcome contract: ``metrics["outcome"]`` always; *tampered* keeps
    reward 0 with ``metrics["tampered"]`` = reason (trained on: the agent did it); *unverifiable* raises
    :class:`~skyrl_core.tasks.Unverifiable`, so the dispatcher ends the trajectory ``error_eval``, loss-masked."""
    traj.metrics.update(result.metrics)
    traj.metrics["outcome"] = result.outcome
    if result.outcome == UNVERIFIABLE:
        raise Unverifiable(f"verifier {verifier_name!r} could not decide: {result.reason or 'no reason given'}")
    if result.outcome == TAMPERED:
        traj.reward = 0.0
        traj.metrics["tampered"] = result.reason or "tampering detected"
        return
    traj.reward = checked_reward(result.reward, verifier_name)


async def call_verifier(verifier: Any, trajectory: Any, runtime: Any, instance: Instance) -> VerifierResult:
    """Run a verifier without blocking the event loop: an ``async def`` one is awaited, a synchronous one (a
    subprocess, a test run, a file read) runs in a worker thread, as synchronous tools do. Its answer is
    normalised by :func:`skyrl_core.tasks.run_verifier` (a number or a VerifierResult; TypeError otherwise)."""
    if _is_async_callable(verifier):
        return await run_verifier(verifier, trajectory, runtime, instance)
    answer = await asyncio.to_thread(verifier, trajectory, runtime, instance)
    return await run_verifier(lambda *_: answer, trajectory, runtime, instance)


def sample_seed(base: int, seed_round: str, group_id: str, sample_index: int) -> int:
    """A sampling seed for one (round, instance, sample): the first 31 bits of SHA-256 over the four values.
    Distinct for distinct inputs (collisions are 2^-31 rare), the same in every process and run (no Python
    ``hash`` randomisation). ``seed_round`` names the training step (``step-3``) or the eval; ``group_id`` is
    the instance's group (``task:id``); ``sample_index`` its sample."""
    digest = hashlib.sha256(f"{int(base)}\0{seed_round}\0{group_id}\0{int(sample_index)}".encode()).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFF_FFFF


def sampling_params(config: Any, **overrides: Any) -> SamplingParams:
    """SamplingParams from ``config.sampling`` (``n_samples`` is not a per-call setting)."""
    s = config.sampling
    values = dict(temperature=s.temperature, top_p=s.top_p, top_k=s.top_k, max_tokens=s.max_tokens, seed=s.seed)
    values.update(overrides)
    return SamplingParams(**values)


_NOT_ASKED = object()


class RolloutSession:
    """Engine, chat format, parser and resolved tasks for a run. Create with ``await RolloutSession.create``.

    ``on_trajectory_done(trajectory)`` (optional, set by callers such as ``skyrl eval``) is called once per
    trajectory when its runtime has been released.

    ``dispatch_memory`` is what the configured dispatcher class remembers across this session's rollouts
    (:meth:`skyrl_core.dispatchers.Dispatcher.session_memory`; None when it remembers nothing): every rollout
    hands it the trajectories before and after dispatching. The built-in pipeline dispatchers remember each
    instance's stage seconds and set ``trajectory.metrics["priority"]`` from them. The trainer's checkpoints
    save it.
    """

    def __init__(self, config: Any, engine: Any, registry: Any = None, owns_engine: bool = False) -> None:
        self.config = config
        self.registry = registry or get_registry()
        check_placements(config, self.registry)
        self.engine = engine
        self.owns_engine = owns_engine
        self._chats: dict[tuple[bool, str], Any] = {}
        self.chat = self._chat(config.agent)
        self.parser = self._parser(config.agent.parser)
        self._resolved: dict[int, _Resolved] = {}
        self.on_trajectory_done: Callable[[Trajectory], None] | None = None
        self.for_eval = False  # an eval run (run_eval sets it): agent.drift_check "eval" applies
        self._dispatch_memory: Any = _NOT_ASKED  # see dispatch_memory
        self.split_report: dict[str, dict[str, int]] = {}
        self._harnesses: Any = None  # the HarnessRunner (one gateway) of tasks with a harness, made on first use
        for tc in config.tasks:
            self._resolve(tc)

    @classmethod
    async def create(cls, config: Any, engine: Any = None, registry: Any = None) -> "RolloutSession":
        """Build the session; the engine is built by the engine builder ``default`` (``register_engine_builders``;
        the built-in: ``registry.get("inference_engines", config.engine.type)``, behind a router when
        ``engine.replicas`` or ``engine.endpoints`` ask for several) unless given (then the caller closes it).
        Raises UnknownComponentError / ConfigError naming a missing tool, task, verifier, instruction builder,
        runtime, parser or engine."""
        registry = registry or get_registry()
        check_placements(config, registry)
        owns = engine is None
        if engine is None:
            engine = await registry.get("engine_builders", "default")(config, registry)
        try:
            return cls(config, engine, registry, owns_engine=owns)
        except BaseException:
            if owns:
                await engine.close()
            raise

    @property
    def dispatch_memory(self) -> Any:
        """What ``dispatcher.type``'s class remembers across this session's rollouts (a
        :class:`~skyrl_core.dispatchers.DispatchMemory`), or None; asked of the class once, on first use."""
        if self._dispatch_memory is _NOT_ASKED:
            factory = self.registry.get("dispatchers", self.config.dispatcher.type)
            session_memory = member(factory, "dispatchers", "session_memory")  # a plain factory remembers nothing
            self._dispatch_memory = session_memory(self.config.dispatcher) if session_memory else None
        return self._dispatch_memory

    # -- instances ---------------------------------------------------------------------------------------
    def content(self, tc: Any, instance: Instance) -> str:
        """:func:`instance_content` of an instance of the task ``tc`` configures, by that task's ``content_fields``."""
        return instance_content(instance, member(self._resolve(tc).task, "tasks", "content_fields"))

    def load_instances(self, split: str = "train") -> list[tuple[Any, Instance]]:
        """Every configured task's instances for ``split``: ``train`` reads ``data``; ``eval`` reads
        ``eval_data`` (falling back to ``data``). Returns (TaskConfig, Instance) pairs in task order.

        Split hygiene: a task's ``eval_data`` never poses a problem its run trains on. Eval instances whose
        :func:`instance_content` equals that of any train instance of the run (every task's ``data`` as
        selected) are dropped, and so are repeats within the eval split, *before* ``eval_data.limit`` is
        applied, so an eval of ``limit: 100`` still holds 100 distinct held-out problems when the split has
        them. What was dropped is in ``self.split_report`` (per task: ``eval_train_overlap``,
        ``eval_repeats``, ``eval_kept``) and logged; an eval split left empty by it is a ConfigError naming the
        task. A task without ``eval_data`` evaluates on its ``data`` (what ``skyrl eval`` of a config with one
        split does)."""
        if split not in ("train", "eval"):
            raise ConfigError(f"split must be 'train' or 'eval', got {split!r}")
        items: list[tuple[Any, Instance]] = []
        if split == "train":
            for tc in self.config.tasks:
                items.extend((tc, inst) for inst in self._resolve(tc).task.select(tc.data))
            return items
        train_contents: set[str] | None = None  # read only when some task has an eval split of its own
        for tc in self.config.tasks:
            task = self._resolve(tc).task
            if tc.eval_data is None:
                log.info("task '%s' has no eval_data: its eval split is its data", tc.name)
                items.extend((tc, inst) for inst in task.select(tc.data))
                continue
            if train_contents is None:
                train_contents = {self.content(t, inst) for t, inst in self.load_instances("train")}
            kept, report = clean_eval_split(task.select(attrs.evolve(tc.eval_data, limit=None)), train_contents,
                                            tc.eval_data.limit, member(task, "tasks", "content_fields"))
            self.split_report[tc.name] = report
            if not kept and report["eval_train_overlap"]:
                raise ConfigError(f"task '{tc.name}': every one of its {report['eval_train_overlap']} eval_data "
                                  f"instances poses a problem of the run's train data (tasks.N.data), so nothing "
                                  f"is held out; point eval_data at other rows (another split, file or offset), "
                                  f"or leave eval_data out to evaluate on data itself")
            if report["eval_train_overlap"] or report["eval_repeats"]:  # expected split hygiene: a note
                note("task '%s': %d eval instances pose a train problem and %d repeat an earlier eval one: "
                     "left out of the eval (%d kept)", tc.name, report["eval_train_overlap"],
                     report["eval_repeats"], len(kept))
            items.extend((tc, inst) for inst in kept)
        return items

    # -- a batch -----------------------------------------------------------------------------------------
    async def rollout(self, items: list[tuple[Any, Instance]], n_samples: int,
                      sampling: SamplingParams | None = None, seed_round: str = "",
                      keep: tuple[str, ...] = ()) -> tuple[list[Trajectory], dict]:
        """Roll out each (TaskConfig, Instance) ``n_samples`` times. Returns the trajectories (grouped: the
        samples of one item share a ``group_id``, in item order) and the dispatcher's metrics.

        With a sampling seed, sample ``k`` of group ``g`` samples with ``sample_seed(seed, seed_round, g, k)``:
        distinct within a rollout, reproducible across runs; the trainer passes ``step-<n>`` as ``seed_round``
        so every step draws new samples (and a fixed round for its evals, so each eval instance sees the same
        random numbers at every eval).

        A task's ``sampling`` overrides (``tasks.N.sampling``) replace those keys of ``sampling`` for its
        trajectories, except the keys named in ``keep`` (the trainer keeps its eval temperature this way)."""
        if n_samples < 1:
            raise ConfigError(f"n_samples must be at least 1, got {n_samples}")
        sampling = sampling or sampling_params(self.config)
        trajectories: list[Trajectory] = []
        slots: dict[int, _Slot] = {}
        seen: dict[str, int] = {}
        owners: list[tuple[str, Instance]] = []  # (task name, instance) of each trajectory, for the dispatch memory
        for tc, inst in items:
            resolved = self._resolve(tc)
            group = f"{tc.name}:{inst.id}"
            seen[group] = seen.get(group, 0) + 1
            if seen[group] > 1:
                group = f"{group}/{seen[group] - 1}"
            for k in range(n_samples):
                traj = Trajectory(instance_id=inst.id, sample_index=k, task=tc.name, group_id=group)
                trajectories.append(traj)
                owners.append((tc.name, inst))
                slots[id(traj)] = _Slot(resolved=resolved, instance=inst, ctx=ToolContext(instance=inst,
                                                                                          engine=self.engine))

        cfg = self.config

        def sampling_for(traj: Trajectory) -> SamplingParams:
            own = {k: v for k, v in slots[id(traj)].resolved.sampling.items() if k not in keep}
            params = attrs.evolve(sampling, **own) if own else sampling
            if params.seed is None:
                return params
            # one seed per (round, instance, sample): the samples of a group differ, a new round draws anew
            return attrs.evolve(params, seed=sample_seed(params.seed, seed_round, traj.group_id, traj.sample_index))

        async def init(traj: Trajectory) -> None:
            slot = slots[id(traj)]
            rt = slot.resolved.runtime_cls(slot.resolved.runtime_spec)
            slot.runtime = rt
            slot.ctx.runtime = rt
            await rt.start()
            prepare = member(rt, "runtimes", "prepare")
            if prepare is not None:
                await prepare(slot.instance)
            messages = slot.resolved.builder(slot.instance, slot.resolved.task)
            if inspect.isawaitable(messages):
                messages = await messages
            messages = [dict(m) for m in messages]
            system_prompt = slot.resolved.agent.system_prompt
            if system_prompt:
                if messages and messages[0].get("role") == "system":
                    messages[0]["content"] = system_prompt
                else:
                    messages.insert(0, {"role": "system", "content": system_prompt})
            traj.messages = messages

        # engine.timeout_s (a stall) and engine.call_timeout_s are the engine's own bounds (EngineStalled names
        # them); the loop's bound is a backstop for an engine without them, a little later so theirs fire first
        call_limit = cfg.engine.call_timeout_s
        call_bound = None if call_limit is None else call_limit + CALL_BOUND_GRACE_S

        async def run(traj: Trajectory) -> None:
            from .agent import run_agent

            slot = slots[id(traj)]
            routing_key.set(traj.id)  # an engine router keeps a trajectory on one replica (engine.sticky)
            harness = member(slot.resolved.task, "tasks", "harness")
            if harness is not None:  # an external agent against a recording-gateway session (docs/gateway.md)
                await self._harness_runner().run(
                    traj, functools.partial(harness, instance=slot.instance, sampling=sampling_for(traj)) if callable(harness)
                    else harness,
                    slot.runtime, timeout_s=max(1.0, (cfg.dispatcher.run_timeout_s or 3600.0) - CALL_BOUND_GRACE_S))
                return
            await run_agent(traj, engine=self.engine, tools=slot.resolved.tools, parser=slot.resolved.parser,
                            chat=slot.resolved.chat, agent_config=slot.resolved.agent, sampling=sampling_for(traj),
                            ctx=slot.ctx, engine_timeout_s=call_bound,
                            drift_check=slot.resolved.agent.drift_check == "always"
                            or (self.for_eval and slot.resolved.agent.drift_check == "eval"))

        async def evaluate(traj: Trajectory) -> None:
            slot = slots[id(traj)]
            result = await call_verifier(slot.resolved.verifier, traj, slot.runtime, slot.instance)
            apply_verifier_result(traj, result, slot.resolved.verifier_name)

        async def release(traj: Trajectory) -> None:
            slot = slots[id(traj)]
            try:
                if slot.runtime is not None:
                    # every limit the agent's commands hit, by name, for every task (docs/runtimes.md)
                    hits = dict(member(slot.runtime, "runtimes", "limit_hits") or {})
                    if hits:
                        traj.metrics["runtime_limits"] = hits
                        traj.metrics["runtime_limit_hits"] = sum(hits.values())
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
        memory = self.dispatch_memory
        before = memory.before_dispatch(trajectories, owners) if memory is not None else {}
        metrics = await dispatcher.dispatch(trajectories, Stages(init=init, run=run, eval=evaluate,
                                                                  release=release))
        for placed in {id(r.placed): r.placed for r in self._resolved.values()}.values():
            metrics.update(placed.stats())  # a placement's counters (Ray: its actors)
        if memory is not None:
            # a cancelled dispatch raises past this point: its cut-off stages are not worth remembering
            metrics.update(memory.after_dispatch(trajectories, owners))
            metrics.update(before)
        return trajectories, metrics

    async def close(self) -> None:
        """Close what each task's placement holds (Ray: its actors), then the engine when this session built it."""
        for placed in {id(r.placed): r.placed for r in self._resolved.values()}.values():
            await placed.close()
        if self._harnesses is not None:
            await self._harnesses.close()
        if self.owns_engine:
            await self.engine.close()

    # -- resolution --------------------------------------------------------------------------------------
    def _harness_runner(self) -> Any:
        if self._harnesses is None:
            self._harnesses = self.registry.get("harness_runners", "default")(self.engine, self.chat, self.parser)
        return self._harnesses

    def _chat(self, agent: Any) -> Any:
        """The chat format (``registry.get("chat_formats", "default")``) of the engine's tokenizer for ``agent``'s
        ``keep_thinking`` and ``chat_template_kwargs``: one per distinct pair among the run's tasks."""
        key = _chat_key(agent)
        if key not in self._chats:
            self._chats[key] = self.registry.get("chat_formats", "default")(
                self.engine.tokenizer, keep_thinking=agent.keep_thinking, template_kwargs=agent.chat_template_kwargs)
        return self._chats[key]

    def _parser(self, name: str) -> Any:
        parser = self.registry.get("parsers", name)
        parser = parser() if isinstance(parser, type) else parser
        for_model = member(parser, "parsers", "for_model")
        if for_model is not None:  # a stand-in (the built-in ``auto``) that names the parser for this model
            chosen, why = for_model(self.engine.tokenizer)
            log.info("agent.parser %s: using parser '%s' (%s)", name, chosen, why)
            parser = self.registry.get("parsers", chosen)
            parser = parser() if isinstance(parser, type) else parser
        return parser

    def _resolve(self, tc: Any) -> _Resolved:
        key = id(tc)
        if key in self._resolved:
            return self._resolved[key]
        reg = self.registry
        task = reg.get("tasks", tc.name)
        tool_names = list(tc.tools) if tc.tools is not None else list(task.tools)
        if not tool_names and member(task, "tasks", "harness") is None:
            raise ConfigError(f"task '{tc.name}' has no tools; set tasks.N.tools (registered: "
                              f"{', '.join(reg.names('tools'))})")
        tools = {name: reg.get("tools", name) for name in tool_names}
        builder = reg.get("instruction_builders", tc.instruction_builder or task.instruction_builder)
        verifier_name = tc.verifier or task.verifier
        verifier = reg.get("verifiers", verifier_name)
        spec = tc.runtime if tc.runtime is not None else RuntimeSpec(type=task.runtime)
        # where the runtime, its tools and the verifier run: the named placement's versions (docs/scale-out.md)
        placed = reg.get("placements", spec.placement).place_task(spec, reg.get("runtimes", spec.type), tools,
                                                                  verifier, verifier_name, self.config)
        index = next((i for i, t in enumerate(self.config.tasks) if t is tc), None)
        agent = task_agent_config(self.config, index) if index is not None else self.config.agent
        own_sampling: dict[str, Any] = {}
        if index is not None and tc.sampling:
            merged = task_sampling_config(self.config, index)
            own_sampling = {k: getattr(merged, k) for k in tc.sampling}
        parser = self.parser if agent.parser == self.config.agent.parser else self._parser(agent.parser)
        resolved = _Resolved(task=task, tools=placed.tools, builder=builder, verifier=placed.verifier,
                             verifier_name=verifier_name, runtime_spec=spec, runtime_cls=placed.runtime_cls,
                             placed=placed, agent=agent, parser=parser,
                             chat=self._chat(agent), sampling=own_sampling)
        self._resolved[key] = resolved
        return resolved


def _chat_key(agent: Any) -> tuple[bool, str]:
    """One ChatFormat per distinct (keep_thinking, chat_template_kwargs) among the run's tasks."""
    import json

    return agent.keep_thinking, json.dumps(agent.chat_template_kwargs or {}, sort_keys=True, default=str)
