"""Stage-cost memory: what each instance's trajectories cost in earlier rollouts, to order the next ones.

The ``priority`` dispatcher (docs/dispatchers.md) grants every stage to the highest
``trajectory.metrics["priority"]`` first; longest-processing-time-first shortens the makespan tail (Graham 1969).
In a training run the same instances come back every epoch, and the samples of one instance share a repository,
a test suite and a task, so the measured seconds of an instance's last trajectories are a good estimate of the
next ones. :class:`StageCostMemory` keeps, per instance key, the running mean of the init, run and eval seconds
of its finished trajectories (``trajectory.timing``) and a count; :meth:`StageCostMemory.assign` turns it into
priorities. It is the pipeline dispatchers' session memory (:meth:`skyrl_core.dispatchers.Dispatcher.session_memory`,
``dispatcher.remember_costs``): a :class:`~skyrl_core.rollout.RolloutSession` keeps one across its rollouts and the
trainer's checkpoints save it, so a resumed run keeps what it learned.
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any, Mapping, Sequence

from skyrl_core.errors import SkyrlError
from skyrl_core.transitions import CANCELLED, ERROR_EVAL, ERROR_INIT, ERROR_RUN, TIMEOUT

from .base import STAGES

#: Endings whose stage seconds say when the trajectory was stopped, not what its stages cost.
CUT_OFF = frozenset({ERROR_INIT, ERROR_RUN, ERROR_EVAL, TIMEOUT, CANCELLED})

#: ``instance.data`` field a task or dataset may set to supply an instance's expected init + run + eval seconds.
INSTANCE_COST_FIELD = "expected_cost_s"


def instance_key(task: str, instance: Any) -> str:
    """The memory key of one instance: ``"<task>:<instance id>#<digest of its data>"``.

    The digest (8 hex digits of SHA-1 over the data as sorted JSON) tells apart instances that share an id, e.g.
    row ``0`` of a task's train split and row ``0`` of its test split; a dataset loaded again gives the same key.
    """
    blob = json.dumps(instance.data, sort_keys=True, default=str).encode()
    return f"{task}:{instance.id}#{hashlib.sha1(blob).hexdigest()[:8]}"


def supplied_cost(instance: Any) -> float | None:
    """The instance's own expected cost in seconds (``instance.data["expected_cost_s"]``), or None when it has
    none. Raises SkyrlError naming the instance when the field is there but not a finite number >= 0."""
    data = getattr(instance, "data", None)
    if not isinstance(data, Mapping) or data.get(INSTANCE_COST_FIELD) is None:
        return None
    value = data[INSTANCE_COST_FIELD]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise SkyrlError(f"instance {getattr(instance, 'id', '?')!r}: data.{INSTANCE_COST_FIELD} must be a "
                         f"number of seconds >= 0, got {value!r}")
    return float(value)


class StageCostMemory:
    """Per instance key: the running mean of init, run and eval seconds over its recorded trajectories, and how
    many were recorded. Only trajectories that went through all three stages and were not cut off (a stage
    error, the batch deadline, cancellation: :data:`CUT_OFF`) are recorded, since their stage seconds say when
    they stopped, not what the stages cost. Agent-loop limits (``max_turns``, ``max_tokens``,
    ``context_exceeded``) are what the instance costs under the run's settings and are recorded.
    """

    def __init__(self) -> None:
        self._entries: dict[str, dict[str, float]] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: str) -> bool:
        return key in self._entries

    def record(self, key: str, timing: Mapping[str, float]) -> bool:
        """Add one trajectory's stage seconds (``{"init": s, "run": s, "eval": s}``) to ``key``'s running means.
        Returns False (and records nothing) when a stage is missing or not a finite number >= 0."""
        values = [timing.get(s) for s in STAGES]
        if any(not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0 for v in values):
            return False
        entry = self._entries.setdefault(key, {"n": 0, **{s: 0.0 for s in STAGES}})
        entry["n"] += 1
        for stage, v in zip(STAGES, values):
            entry[stage] += (float(v) - entry[stage]) / entry["n"]
        return True

    def record_trajectories(self, trajectories: Sequence[Any], keys: Sequence[str]) -> int:
        """Record every trajectory (``trajectories[i]`` under ``keys[i]``) that was not cut off (its
        ``finish_reason`` is not in :data:`CUT_OFF`) and has init, run and eval seconds in ``trajectory.timing``.
        Returns how many were recorded."""
        if len(trajectories) != len(keys):
            raise ValueError(f"{len(trajectories)} trajectories but {len(keys)} keys")
        return sum(self.record(k, t.timing) for t, k in zip(trajectories, keys) if t.finish_reason not in CUT_OFF)

    def count(self, key: str) -> int:
        """How many trajectories of ``key`` were recorded."""
        entry = self._entries.get(key)
        return int(entry["n"]) if entry else 0

    def stage_means(self, key: str) -> dict[str, float] | None:
        """``{"init": s, "run": s, "eval": s}``, the mean seconds per stage, or None for an unknown key."""
        entry = self._entries.get(key)
        return {s: entry[s] for s in STAGES} if entry else None

    def expected(self, key: str) -> float | None:
        """Expected init + run + eval seconds of one more trajectory of ``key``, or None when it has none recorded."""
        entry = self._entries.get(key)
        return sum(entry[s] for s in STAGES) if entry else None

    def mean_expected(self) -> float | None:
        """The mean of :meth:`expected` over every remembered key (the prior for an instance never seen), or None
        when the memory is empty."""
        if not self._entries:
            return None
        return sum(self.expected(key) for key in self._entries) / len(self._entries)

    def assign(self, trajectories: Sequence[Any], keys: Sequence[str],
               supplied: Mapping[str, float] | None = None) -> dict[str, int]:
        """Set ``trajectory.metrics["priority"]`` (seconds; higher runs first) where it is not already set.

        In order: the instance's own cost (``supplied[key]``, e.g. from ``instance.data["expected_cost_s"]``),
        the remembered :meth:`expected` cost, and for an instance never seen the mean over remembered instances
        (:meth:`mean_expected`), so it is neither rushed nor starved. With nothing remembered and nothing
        supplied the priority stays unset; the ``priority`` dispatcher runs trajectories without one after those
        with one and, among themselves, in the auto pipeline's hint-free group-cost order.

        Returns counts by source: ``instance``, ``memory``, ``mean``, ``unset`` (left unset) and ``preset``
        (already set by someone else, left alone).
        """
        supplied = supplied or {}
        counts = {"instance": 0, "memory": 0, "mean": 0, "unset": 0, "preset": 0}
        prior = self.mean_expected()
        for traj, key in zip(trajectories, keys):
            if "priority" in traj.metrics:
                counts["preset"] += 1
                continue
            if key in supplied:
                value, source = supplied[key], "instance"
            elif key in self._entries:
                value, source = self.expected(key), "memory"
            elif prior is not None:
                value, source = prior, "mean"
            else:
                counts["unset"] += 1
                continue
            traj.metrics["priority"] = float(value)
            counts[source] += 1
        return counts

    # -- the session's dispatch memory (skyrl_core.dispatchers.DispatchMemory) -------------------------------
    @staticmethod
    def _keys(owners: Sequence[tuple[str, Any]]) -> tuple[list[str], dict[str, float]]:
        """The key of each ``(task, instance)`` and the supplied costs by key (each instance's data hashed once)."""
        keys: list[str] = []
        supplied: dict[str, float] = {}
        seen: dict[int, str] = {}
        for task, instance in owners:
            key = seen.get(id(instance))
            if key is None:
                key = seen[id(instance)] = instance_key(task, instance)
                cost = supplied_cost(instance)
                if cost is not None:
                    supplied[key] = cost
            keys.append(key)
        return keys, supplied

    def before_dispatch(self, trajectories: Sequence[Any], owners: Sequence[tuple[str, Any]]) -> dict[str, int]:
        """Set the trajectories' priorities (:meth:`assign`); returns ``priority_from_<source>`` counts. Raises
        SkyrlError naming an instance whose ``data["expected_cost_s"]`` is not a number of seconds >= 0."""
        keys, supplied = self._keys(owners)
        return {f"priority_from_{source}": n for source, n in self.assign(trajectories, keys, supplied).items()}

    def after_dispatch(self, trajectories: Sequence[Any], owners: Sequence[tuple[str, Any]]) -> dict[str, int]:
        """Record the finished trajectories (:meth:`record_trajectories`); returns ``costs_recorded`` and
        ``costs_remembered_instances``."""
        recorded = self.record_trajectories(trajectories, self._keys(owners)[0])
        return {"costs_recorded": recorded, "costs_remembered_instances": len(self)}

    # -- persistence (the trainer's checkpoint state.json) --------------------------------------------------
    def to_state(self) -> dict[str, Any]:
        """A JSON-serialisable snapshot: ``{"version": 1, "entries": {key: {"n", "init", "run", "eval"}}}``."""
        return {"version": 1, "entries": {k: dict(v) for k, v in self._entries.items()}}

    def load_state(self, state: Mapping[str, Any] | None) -> None:
        """Replace the contents with a :meth:`to_state` snapshot; None (an older checkpoint without one) empties
        the memory. Raises SkyrlError when the snapshot is malformed."""
        self._entries = {}
        if state is None:
            return
        entries = state.get("entries") if isinstance(state, Mapping) else None
        if not isinstance(entries, Mapping):
            raise SkyrlError(f"stage-cost memory snapshot has no 'entries' mapping: {str(state)[:200]}")
        for key, entry in entries.items():
            try:
                n = int(entry["n"])
                values = {s: float(entry[s]) for s in STAGES}
            except (KeyError, TypeError, ValueError) as exc:
                raise SkyrlError(f"stage-cost memory entry {key!r} is malformed ({exc}); expected n, "
                                 f"{', '.join(STAGES)}") from exc
            if n > 0:
                self._entries[str(key)] = {"n": n, **values}

    @classmethod
    def from_state(cls, state: Mapping[str, Any] | None) -> "StageCostMemory":
        memory = cls()
        memory.load_state(state)
        return memory
