"""The ``skyrl train`` loop: rollouts -> post-process -> train step -> weight sync, with eval, checkpoints and
metrics (written to the logger :data:`RUN_LOG`, asked of the registry: ``register_loggers``).

One step (SkyRL-Agent, arXiv 2511.16108, Sec. 3): take ``train.batch_size`` instances from the data cursor, roll
each out ``sampling.n_samples`` times through the :class:`~skyrl_core.rollout.RolloutSession` (its dispatcher
schedules init / run / eval stages), build the :class:`~skyrl_core.transitions.TrainingBatch`
(:func:`~skyrl_core.postprocess.build_training_batch`), update the policy through the backend and sync the
engine's weights. Every ``train.eval_every`` steps the held-out split is rolled out once per instance at
``train.eval_temperature``; pass@1 is the fraction of eval trajectories with reward >= 1.

Data order is a deterministic function of ``train.seed``: epoch ``e`` visits the train instances in the order
``random.Random(f"{seed}:{e}").shuffle``; after ``k`` steps the cursor stands at ``k * batch_size``. A checkpoint
stores the step (hence the cursor), the backend state and the RNG states, so ``--resume`` after a kill runs step
``k + 1`` on exactly the instances an uninterrupted run would, and no step is lost or repeated (metrics of steps
after the checkpoint are dropped from metrics.jsonl on resume).
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import time
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Sequence


from .backends import TrainingDivergedError, create_backend, refuse_scripted_policy
from .config import Config, config_to_yaml
from .contracts import member
from .errors import SkyrlError
from .notes import note
from .postprocess import build_training_batch
from .rollout import sampling_params
from .transitions import POLICY_VERSION
from .checkpoint import (data_fingerprint, fingerprint_changes, latest_checkpoint, load_checkpoint,  # noqa: F401
                         save_checkpoint)

log = logging.getLogger(__name__)


EVAL_SEED_BASE = 20_251_116  # sampling seed base when sampling.seed is unset (+ train.seed)

#: the registry name of the logger a run writes its records and rollouts to (``register_loggers``; the built-in
#: trainer's ``run`` writes to every logger the config names and keeps the rollouts: its ``runlog.py``)
RUN_LOG = "run"

#: the registry name of the asynchronous loop a run with ``train.max_staleness`` > 0 uses (``register_async_loops``;
#: the built-in ``async_training`` plugin registers it)
ASYNC_LOOP = "async"


def raise_if_cancelled() -> None:
    """Re-raise a Ctrl-C that a rollout absorbed (a dispatcher that turns cancellation into "cancelled"
    trajectories must not make the loop train on them)."""
    task = asyncio.current_task()
    if task is not None and getattr(task, "cancelling", lambda: 0)():
        raise asyncio.CancelledError


class DataCursor:
    """Deterministic, resumable order over ``n`` train instances: ``take(k)`` returns the next ``k`` indices,
    crossing epoch boundaries; ``position`` counts instances handed out so far."""

    def __init__(self, n: int, seed: int, position: int = 0) -> None:
        if n <= 0:
            raise SkyrlError("no train instances: check the task's data (tasks.N.data) and data.limit")
        self.n = n
        self.seed = seed
        self.position = position
        self._orders: dict[int, list[int]] = {}

    def _order(self, epoch: int) -> list[int]:
        if epoch not in self._orders:
            order = list(range(self.n))
            random.Random(f"{self.seed}:{epoch}").shuffle(order)
            self._orders = {epoch: order}
        return self._orders[epoch]

    def take(self, k: int) -> list[int]:
        out = []
        for _ in range(k):
            epoch, i = divmod(self.position, self.n)
            out.append(self._order(epoch)[i])
            self.position += 1
        return out


def directory_bytes(path: Path) -> int:
    """Bytes of the regular files under ``path`` (a checkpoint), symlinks not followed."""
    return sum(p.stat().st_size for p in Path(path).rglob("*") if p.is_file() and not p.is_symlink())


def human_size(n: float) -> str:
    """``1.6 GB``, ``512 kB``: decimal units, three significant figures."""
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if n < 1000 or unit == "TB":
            return f"{n:.3g} {unit}"
        n /= 1000
    return f"{n:.3g} TB"  # pragma: no cover


def trainable_data(batch: Any) -> int:
    """Data of ``batch`` that can move the policy: not loss-masked and with at least one generated token (what
    every backend trains on; zero-advantage groups are already left out of ``batch.data``)."""
    return sum(1 for d in batch.data if d.loss_mask and any(d.response_mask))


def no_data_reason(trajectories: Sequence[Any], batch: Any) -> str:
    """Why a step's batch holds no trainable data, in words a user can act on: every trajectory failed before
    the model produced a token (with the first error), every group had zero advantage (equal rewards within each
    group), or every trajectory with data was loss-masked (counted by finish reason; ``max_tokens`` is a
    generation cut at ``sampling.max_tokens``)."""
    n = len(trajectories)
    with_data = [t for t in trajectories if t.transitions]
    if not with_data:
        first = next((t.error for t in trajectories if t.error), None)
        return (f"none of the {n} trajectories produced a token" + (f" (first error: {first})" if first else ""))
    zero = int(batch.metrics.get("zero_advantage_groups", 0))
    groups = len({t.group_id for t in with_data})
    if zero and zero >= groups:
        rewards = sorted({float(t.reward) for t in with_data})
        shown = ", ".join(f"{r:g}" for r in rewards[:5])
        return (f"all {groups} groups had zero advantage (every sample of a group got the same reward; rewards "
                f"seen: {shown})")
    masked = Counter(t.finish_reason or "none" for t in with_data if t.masked)
    if masked:
        parts = ", ".join(f"{reason} {count}" for reason, count in masked.most_common())
        cut = " (max_tokens: cut at sampling.max_tokens)" if "max_tokens" in masked else ""
        return f"every trajectory with a non-zero advantage was loss-masked (finish reasons: {parts}){cut}"
    return "no datum had a generated token"


class TrainRun:
    """One training run writing into ``output``.

    ``session_factory`` (async, ``config -> session``) defaults to ``RolloutSession.create``. ``on_step`` is
    called with each train record (progress display); ``on_rollout(phase, done, total)`` with each finished
    trajectory of a rollout (``phase`` is ``rollouts for step <k>``, ``eval before training`` or
    ``eval after step <k>``). Raises SkyrlError when ``output`` already holds
    checkpoints and ``resume`` is False, or ``resume`` is True and there is none, or ``resume`` is True and the
    data fingerprint of the checkpoint (:func:`data_fingerprint`) differs from this config's, naming the keys
    (``accept_data_change`` resumes anyway, with a warning: the cursor then indexes the new order).
    """

    def __init__(self, config: Config, output: str | Path, resume: bool = False,
                 session_factory: Callable[[Config], Any] | None = None,
                 on_step: Callable[[dict], None] | None = None,
                 on_rollout: Callable[[str, int, int], None] | None = None,
                 accept_data_change: bool = False, group_deadline_s: float | None = None) -> None:
        self.config = config
        self.accept_data_change = accept_data_change
        self.fingerprint: dict[str, Any] | None = None
        self.on_rollout = on_rollout
        self.output = Path(output)
        self.ckpt_root = self.output / "checkpoints"
        self.resume = resume
        self.session_factory = session_factory
        self.on_step = on_step
        self.step = 0
        self.session: Any = None
        self.backend: Any = None
        self.logger: Any = None  # the logger RUN_LOG
        self.records: list[dict] = []
        self._saved_step = -1
        self._training = False
        self.steps_run = 0  # train steps run by this process (a resumed run's earlier steps not included)
        self.steps_updated = 0  # of those, steps that updated the policy (trainable data, an optimiser step)
        self.version = 0  # policy version: train steps whose weights have reached the engine
        self.group_deadline_s = group_deadline_s
        self.rollouts: Any = None  # the asynchronous loop's producer, with train.max_staleness > 0
        self._t_start = time.perf_counter()

    # -- setup -----------------------------------------------------------------------------------------------
    async def _setup(self) -> None:
        existing = latest_checkpoint(self.ckpt_root)
        if self.resume and existing is None:
            raise SkyrlError(f"--resume: no checkpoint under {self.ckpt_root}; start without --resume")
        if not self.resume and existing is not None:
            raise SkyrlError(f"{self.output} already holds a run (checkpoint {existing.name}); pass --resume to "
                             f"continue it or --output DIR for a new run")
        self.output.mkdir(parents=True, exist_ok=True)
        if self.session_factory is None:
            from .rollout import RolloutSession

            self.session = await RolloutSession.create(self.config)
        else:
            self.session = await self.session_factory(self.config)
        refuse_scripted_policy(self.session.engine)  # a benchmark fixture ignores weight updates: nothing to train
        # a misspelled estimator fails now, naming the registered ones, not after the first rollout
        self.session.registry.get("advantage_estimators", self.config.backend.advantage)
        # refuse before building a backend that cannot honour the setting, and check what was built too
        loop = self.session.registry.get("async_loops", ASYNC_LOOP) if self.config.train.max_staleness > 0 else None
        if loop is not None:
            loop.check(self.config, self.session.registry.get("backends", self.config.backend.type))
        self.backend = create_backend(self.config, self.session.engine)
        if loop is not None:
            loop.check(self.config, self.backend)
        self.train_items = self.session.load_instances("train")
        needs_eval = self.config.train.eval_every > 0 or self.config.train.eval_at_start
        self.eval_items = self.session.load_instances("eval") if needs_eval else []
        self.fingerprint = data_fingerprint(self.config, self.train_items, self.session.content)
        position, state = 0, None
        if self.resume:
            self._check_fingerprint(existing)
        (self.output / "config.yaml").write_text(config_to_yaml(self.config))
        self.logger = self.session.registry.get("loggers", RUN_LOG)(self.output, self.config)
        if self.resume:
            state = load_checkpoint(existing, self.backend)
            self.step = int(state["step"])
            position = int(state["cursor"])
            self._saved_step = self.step
            self.records = self._truncate_log(self.step)
            self._restore_dispatch_memory(state)
            self.version = self.step
            await self.backend.sync_weights(self.session.engine)
            log.warning("resumed from %s at step %d", existing, self.step)
        else:
            self._truncate_log(-1)
        self.cursor = DataCursor(len(self.train_items), self.config.train.seed, position)
        self._cursor_done = position
        if loop is not None:
            self.rollouts = loop.producer(self, state)

    def _check_fingerprint(self, checkpoint: Path) -> None:
        try:
            stored = json.loads((checkpoint / "state.json").read_text()).get("data_fingerprint")
        except (OSError, json.JSONDecodeError):
            stored = None  # load_checkpoint reports an unreadable state.json
        if stored is None:
            log.warning("checkpoint %s has no data fingerprint (written before skyrl stored one): resuming "
                        "without checking that the data order is unchanged", checkpoint)
            return
        changes = fingerprint_changes(stored, self.fingerprint)
        if not changes:
            return
        message = (f"--resume: the config changed what the run's data cursor indexes since {checkpoint.name} "
                   f"({'; '.join(changes)}); resuming would repeat or skip train instances. Restore those keys, "
                   f"or pass --accept-data-change to resume anyway")
        if not self.accept_data_change:
            raise SkyrlError(message)
        log.warning("%s (accepted)", message)

    @property
    def sampling_seed(self) -> int:
        """The base of every sampling seed of the run: ``sampling.seed``, else one fixed from ``train.seed``.
        Each trajectory samples with :func:`skyrl_core.rollout.sample_seed` of it, its round (``step-<n>`` or
        ``eval``), its group and its sample index, so a run is reproducible and no two samples share a seed."""
        cfg = self.config
        return cfg.sampling.seed if cfg.sampling.seed is not None else EVAL_SEED_BASE + cfg.train.seed

    # -- one step --------------------------------------------------------------------------------------------
    def step_items(self) -> list[Any]:
        """The instances of the next step (advances the cursor)."""
        return [self.train_items[i] for i in self.cursor.take(self.config.train.batch_size)]

    async def train_step(self) -> dict[str, Any]:
        cfg = self.config
        step = self.step + 1
        t0 = time.perf_counter()
        items = self.step_items()
        self._watch_rollout(f"rollouts for step {step}", len(items) * cfg.sampling.n_samples)
        sampling = sampling_params(cfg, seed=self.sampling_seed)
        trajectories, dispatch = await self.session.rollout(items, cfg.sampling.n_samples, sampling,
                                                            seed_round=f"step-{step}")
        raise_if_cancelled()
        t_rollout = time.perf_counter() - t0
        figures = self._log_rollout(f"step-{step:06d}", trajectories)
        batch, trainable, train_metrics, t1, t_train = await self._train_and_sync(trajectories)
        self.step = step
        self.version = step
        self._cursor_done = self.cursor.position  # what a checkpoint of this step records
        record = self._step_record(step, items, figures, batch, train_metrics)
        record.update({f"dispatch/{k}": v for k, v in dispatch.items() if isinstance(v, (int, float))})
        self._finish_record(record, trajectories, batch, trainable, train_metrics, step)
        record.update(rollout_s=t_rollout, train_s=t_train, step_s=time.perf_counter() - t0,
                      bad_steps=self.backend.bad_steps, **self._timeline(t1, t1 + t_train))
        self._log(record)
        self._check_bad_steps(step)
        return record

    async def _train_and_sync(self, trajectories: Sequence[Any]) -> tuple[Any, int, dict, float, float]:
        """Build the step's TrainingBatch, update the policy and push the weights to the engine; returns the batch,
        its trainable data count, the backend's metrics, when the update started (perf_counter) and its seconds
        (update + weight sync, as ``train_s`` always counted)."""
        cfg = self.config
        batch = build_training_batch(trajectories, cfg.backend.advantage, cfg.backend.std_normalize)
        t1 = time.perf_counter()
        self._training = True
        try:
            train_metrics = await self.backend.train_step(batch)
            await self.backend.sync_weights(self.session.engine)
        finally:
            self._training = False
        return batch, trainable_data(batch), train_metrics, t1, time.perf_counter() - t1

    @staticmethod
    def _step_record(step: int, items: Sequence[Any], figures: dict[str, float], batch: Any,
                     train_metrics: dict) -> dict[str, Any]:
        """A train step's record: its instances, the rollout's ``figures`` (:meth:`_log_rollout`), the batch's and
        the backend's metrics."""
        record: dict[str, Any] = {"kind": "train", "step": step,
                                  "instances": [f"{tc.name}:{inst.id}" for tc, inst in items]}
        record.update(figures)
        record.update({f"batch/{k}": v for k, v in batch.metrics.items()})
        record.update({f"train/{k}": v for k, v in train_metrics.items()})
        return record

    def _finish_record(self, record: dict, trajectories: Sequence[Any], batch: Any, trainable: int,
                       train_metrics: dict, step: int) -> None:
        updated = trainable > 0 and not train_metrics.get("empty") and train_metrics.get("optim_steps", 1) != 0
        record["trainable_data"] = float(trainable)
        if not updated:
            record["no_update"] = (no_data_reason(trajectories, batch) if not trainable else
                                   "the backend made no optimiser step")
            log.warning("step %d trained nothing: %s", step, record["no_update"])
        self.steps_run += 1
        self.steps_updated += updated

    def _timeline(self, train_start: float, train_end: float) -> dict[str, float]:
        """When the step's update ran, in seconds since the run started (the benchmark's timeline)."""
        return {"time/train_start_s": train_start - self._t_start, "time/train_end_s": train_end - self._t_start}

    def _check_bad_steps(self, step: int) -> None:
        cfg = self.config
        if self.backend.bad_steps >= cfg.train.max_bad_steps:
            raise TrainingDivergedError(
                f"{self.backend.bad_steps} training steps in a row had a non-finite loss or gradient (step {step}); "
                f"stopping (train.max_bad_steps={cfg.train.max_bad_steps}). Lower backend.lr or check rewards.")

    async def train_step_async(self) -> dict[str, Any]:
        """One step of asynchronous training (``train.max_staleness`` > 0): the asynchronous loop's producer's
        ``train_step`` (the built-in: :func:`skyrl_core.default_plugins.async_training.loop.async_train_step`)."""
        return await self.rollouts.train_step()

    async def evaluate(self) -> dict[str, Any]:
        """Roll out every eval instance once at ``train.eval_temperature``; log and return the eval record.

        Sampled evals are seeded (:attr:`sampling_seed`, round ``eval``): eval instance ``i`` draws from the
        same random stream at every eval, so the before/after comparison uses common random numbers and its
        difference is less noisy than two independent draws."""
        cfg = self.config
        t0 = time.perf_counter()
        sampling = sampling_params(cfg, temperature=cfg.train.eval_temperature, seed=self.sampling_seed)
        self._watch_rollout("eval before training" if self.step == 0 else f"eval after step {self.step}",
                            len(self.eval_items), {f"{tc.name}:{inst.id}" for tc, inst in self.eval_items})
        trajectories, _ = await self.session.rollout(self.eval_items, 1, sampling, seed_round="eval",
                                                     keep=("temperature",))
        raise_if_cancelled()
        summary = self._log_rollout(f"eval-{self.step:06d}", trajectories)
        record = {"kind": "eval", "step": self.step, "n": len(trajectories),
                  "pass@1": summary.get("pass_rate", 0.0), **summary, "eval_s": time.perf_counter() - t0}
        for key in [k for k in summary if k.startswith("task/") and k.endswith("/pass_rate")]:
            record[key.replace("/pass_rate", "/pass@1")] = summary[key]
        self._log(record)
        return record

    def _watch_rollout(self, phase: str, total: int, groups: set[str] | None = None) -> None:
        """Report each finished trajectory of the next rollout to ``on_rollout`` (progress display); with
        ``groups``, only trajectories of those groups count (async training rolls out train groups meanwhile)."""
        if self.on_rollout is None:
            return
        done = [0]

        def tick(trajectory: Any) -> None:
            if groups is not None and trajectory.group_id.split("/")[0] not in groups:
                return
            done[0] += 1
            self.on_rollout(phase, done[0], total)

        self.on_rollout(phase, 0, total)
        self.session.on_trajectory_done = tick

    # -- bookkeeping -----------------------------------------------------------------------------------------
    def _log(self, record: dict) -> None:
        self.records.append(record)
        assert self.logger is not None
        self.logger.log(record)
        if self.on_step is not None:
            self.on_step(record)

    def _log_rollout(self, name: str, trajectories: Sequence[Any]) -> dict[str, float]:
        """Hand a rollout (``step-000003``, ``eval-000000``) to the run's logger; return the figures its record
        carries (``{}`` from a logger without the contract's optional ``log_rollout``)."""
        log_rollout = member(self.logger, "loggers", "log_rollout")
        return dict(log_rollout(name, trajectories)) if log_rollout is not None else {}

    def _truncate_log(self, step: int) -> list[dict]:
        """The run's records of steps up to ``step``, the later ones dropped (``[]`` from a logger without the
        contract's optional ``truncate_after``: it keeps no record)."""
        truncate = member(self.logger, "loggers", "truncate_after")
        return list(truncate(step)) if truncate is not None else []

    def _restore_dispatch_memory(self, state: dict[str, Any]) -> None:
        """Load the session's dispatch memory (what its dispatcher keeps across rollouts, e.g. the built-in
        pipeline's stage costs: :meth:`skyrl_core.dispatchers.Dispatcher.session_memory`) from a checkpoint's
        state; a checkpoint without one (or a dispatcher that keeps none) leaves the memory empty."""
        memory = getattr(self.session, "dispatch_memory", None)
        if memory is not None:
            memory.load_state(state.get("dispatch_memory"))

    def checkpoint(self) -> Path | None:
        if self.step == self._saved_step:
            return None
        state: dict[str, Any] = {"cursor": self._cursor_done, "config": self.config.to_dict()}
        if self.fingerprint is not None:  # set by _setup from the loaded train instances
            state["data_fingerprint"] = self.fingerprint
        memory = getattr(self.session, "dispatch_memory", None)
        if memory is not None:  # e.g. the instances' measured stage seconds, so a resumed run keeps its priorities
            state["dispatch_memory"] = memory.to_state()
        if self.rollouts is not None:  # handed-out instances not yet trained: in the buffer, running or to resample
            state["cursor"] = self.cursor.position
            state["async_buffer"] = self.rollouts.to_state()
        path = save_checkpoint(self.ckpt_root, self.step, self.backend, state,
                               keep=self.config.train.keep_checkpoints)
        self._saved_step = self.step
        note("checkpoint of step %d: %s (%s)", self.step, path, human_size(directory_bytes(path)))
        return path

    def _eval_due(self) -> bool:
        every = self.config.train.eval_every
        return bool(self.eval_items) and ((every > 0 and self.step % every == 0) or self.step == self.config.train.steps)

    # -- the run ---------------------------------------------------------------------------------------------
    async def run(self) -> dict[str, Any]:
        """Train to ``train.steps``; return a summary (first/last eval pass@1, paths, ``steps_run`` and
        ``steps_updated`` by this process, ``no_update_reasons`` with counts). Saves a checkpoint on Ctrl-C (unless interrupted inside a weight update) and re-raises."""
        cfg = self.config
        POLICY_VERSION.set(lambda: self.version)  # every recorded call carries the version it was generated with
        self._t_start = time.perf_counter()
        try:
            await self._setup()
            if self.step == 0 and cfg.train.eval_at_start and self.eval_items:
                await self.evaluate()
            if self.rollouts is not None and self.step < cfg.train.steps:
                self.rollouts.start()
            while self.step < cfg.train.steps:
                if self.rollouts is not None:
                    await self.train_step_async()
                else:
                    await self.train_step()
                if self._eval_due():
                    await self.evaluate()
                if cfg.train.checkpoint_every > 0 and self.step % cfg.train.checkpoint_every == 0:
                    self.checkpoint()
            if self.step > 0 and cfg.train.checkpoint_every > 0:
                self.checkpoint()
        except (KeyboardInterrupt, asyncio.CancelledError):
            if self.backend is not None and not self._training and self.step > 0:
                log.warning("interrupted: saving a checkpoint at step %d", self.step)
                self.checkpoint()
            elif self._training:
                log.warning("interrupted during a weight update: the last checkpoint (step %d) stands",
                            self._saved_step)
            raise
        finally:
            await self._close()
        return self.summary()

    def summary(self) -> dict[str, Any]:
        evals = [r for r in self.records if r.get("kind") == "eval"]
        reasons = Counter(r["no_update"] for r in self.records if r.get("kind") == "train" and r.get("no_update"))
        return {"steps": self.step, "steps_run": self.steps_run, "steps_updated": self.steps_updated,
                "no_update_reasons": dict(reasons.most_common()),
                "output": str(self.output),
                "eval_first": evals[0] if evals else None, "eval_last": evals[-1] if evals else None,
                "checkpoint": str(latest_checkpoint(self.ckpt_root) or "")}

    async def _close(self) -> None:
        if self.rollouts is not None:
            await self.rollouts.close()
        if self.logger is not None:
            self.logger.close()
        if self.backend is not None:
            await self.backend.close()
        if self.session is not None:
            await self.session.close()
