"""Asynchronous training (train.max_staleness > 0): the staleness bound, the decoupled PPO loss, fault tolerance of
the running loop (hangs, crashes, cancelled groups, an engine restart) and a killed run's resume, on the real
rollout session, the real hf engine and the real local trainer with the tiny random model (seconds)."""

from __future__ import annotations

import asyncio
import json
import math
import os
import tempfile
from pathlib import Path

import pytest
import torch

from skyrl_core.config import load_config
from skyrl_core.errors import ConfigError
from skyrl_core.inference.base import EngineError, routing_key
from skyrl_core.default_plugins.async_training.loop import (AsyncRollouts, check_staleness_support,
                                                            declared_max_staleness, staleness_metrics)
from skyrl_core.training import TrainRun
from skyrl_core import VerifierResult, hookimpl


class TokenParity:
    """A verifier plugin for the random model: reward 1 when the sum of the trajectory's generated token ids is even.
    The samples of a group then differ in reward, so steps have non-zero advantages and really update the policy
    on stale data (the gsm8k verifier would give the random model 0 everywhere and no step would train)."""

    @hookimpl
    def register_verifiers(self, register):
        def parity(trajectory, runtime, instance):
            total = sum(sum(t.output_ids) for t in trajectory.transitions)
            return VerifierResult(reward=float(trajectory.transitions != [] and total % 2 == 0))

        register(parity, name="token_parity")


@pytest.fixture
def parity(plugins):
    plugins.register_plugin(TokenParity(), "token_parity")
    yield plugins


@pytest.fixture(scope="module")
def tiny_config(tiny_chat_model_dir, tmp_path_factory):
    path = tmp_path_factory.mktemp("async-train") / "tiny.yaml"
    path.write_text(f"""\
model: {tiny_chat_model_dir}
engine: {{type: hf, max_batch: 8}}
tasks:
  - name: gsm8k_steps
    verifier: token_parity
    data: {{split: train, limit: 16}}
agent: {{max_turns: 2, max_context_tokens: 1024}}
sampling: {{max_tokens: 8, n_samples: 4}}
dispatcher: {{type: async_pipeline, max_parallel_agents: 8, run_timeout_s: 3}}
backend: {{policy_loss: decoupled_ppo, lr: 1.0e-3}}
train: {{steps: 5, batch_size: 2, eval_every: 0, eval_at_start: false, checkpoint_every: 0, max_staleness: 1}}
""")
    return path


def read_records(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def trained_ids(out: Path) -> list[str]:
    ids = []
    for f in sorted((out / "rollouts").glob("step-*.jsonl")):
        ids += [json.loads(line)["id"] for line in f.read_text().splitlines()]
    return ids


class Faults:
    """Faults injected into the real engine's calls by trajectory (the rollout sets ``routing_key`` to the
    trajectory id for each call): the first call of the 1st trajectory seen hangs (a per-trajectory deadline ends
    it), every call of the 3rd raises EngineError (a crashed call), the 5th's first call raises CancelledError
    inside the trajectory, during the 7th's first call the engine is restarted (closed under its running
    calls, which fail, then opened again: its worker thread restarts on the next call), and the 9th's first call
    calls and every later trajectory's call ``on_ninth(trajectory id)`` (the test cancels one such group from
    outside)."""

    def __init__(self, engine):
        self.engine = engine
        self.real = engine.generate
        self.seen: list[str] = []
        self.fired: dict[str, int] = {}
        self.restarts = 0
        self.on_ninth = None
        engine.generate = self.generate

    async def generate(self, input_ids, sampling):
        tid = routing_key.get()
        if tid not in self.seen:
            self.seen.append(tid)
        order = self.seen.index(tid)
        first = tid not in self.fired
        self.fired[tid] = self.fired.get(tid, 0) + 1
        if order == 0 and first:
            await asyncio.sleep(3600)
        if order == 2:
            raise EngineError("injected: engine call crashed")
        if order == 4 and first:
            raise asyncio.CancelledError
        if order >= 8 and first and self.on_ninth is not None:
            self.on_ninth(tid)
        if order == 6 and first:
            call = asyncio.ensure_future(self.real(input_ids, sampling))
            await asyncio.sleep(0)
            await self.engine.close()
            self.engine._closed = False  # the same engine object serves again
            self.restarts += 1
            return await call
        return await self.real(input_ids, sampling)


def stop_often(engine) -> None:
    """Make every fifth token id a stop token of the real engine (like vLLM's ``stop_token_ids``): the random model
    then ends most replies by itself (``no_tool_call``, trained) instead of at ``sampling.max_tokens`` (masked)."""
    engine.eos_token_ids = frozenset(engine.eos_token_ids | set(range(0, len(engine.tokenizer), 5)))


async def often_stopping_session(config):
    from skyrl_core.rollout import RolloutSession

    session = await RolloutSession.create(config)
    stop_often(session.engine)
    return session


def workspaces() -> set[str]:
    return {p.name for p in Path(tempfile.gettempdir()).glob("skyrl-ws-*")}


def children() -> list[int]:
    me = str(os.getpid())
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[1] == me:
            out.append(int(stat.parent.name))
    return out


def test_async_loop_survives_hangs_crashes_cancels_and_an_engine_restart(parity, tiny_config, tmp_path,
                                                                        monkeypatch):
    cfg = load_config(tiny_config)
    k, bs, steps = cfg.train.max_staleness, cfg.train.batch_size, cfg.train.steps
    state: dict = {}
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the sandboxes' workspaces go here, ours alone
    assert workspaces() == set()

    events: list[str] = []

    def cancel_group_of(tid):  # a group cancelled from outside while its calls run
        run = state["run"]
        faulted = {state["faults"].seen[i].split("#")[0] for i in (0, 2, 4, 6)}  # keep the other faults' groups
        if events or tid.split("#")[0] in faulted:
            return
        for seq, g in run.rollouts.running.items():
            tc, inst = run.train_items[g.index]
            if tid.startswith(f"{tc.name}:{inst.id}#") and run.rollouts.cancel(seq):
                events.append("cancelled")
                return

    async def session_factory(config):
        from skyrl_core.rollout import RolloutSession

        session = await RolloutSession.create(config)
        stop_often(session.engine)
        state["faults"] = Faults(session.engine)
        state["faults"].on_ninth = cancel_group_of
        return session

    run = TrainRun(cfg, tmp_path / "run", session_factory=session_factory)
    state["run"] = run
    summary = asyncio.run(run.run())

    # it kept training to the end, and the policy moved on stale data through the decoupled loss
    assert summary["steps"] == steps and summary["steps_run"] == steps
    assert summary["steps_updated"] >= 2, summary
    records = [r for r in read_records(tmp_path / "run") if r["kind"] == "train"]
    assert [r["step"] for r in records] == list(range(1, steps + 1))
    assert events == ["cancelled"] and state["faults"].restarts == 1
    # the faults happened and ended their trajectories, not the run
    reasons = {}
    for f in (tmp_path / "run" / "rollouts").glob("step-*.jsonl"):
        for line in f.read_text().splitlines():
            t = json.loads(line)
            reasons[t["id"]] = (t["finish_reason"], t["error"])
    counts = run.rollouts.counts
    hung = state["faults"].seen[0]
    # the hang ends at its deadline (dispatcher.run_timeout_s): trained masked, or by then its group was older than
    # the bound allows (dropped stale, and the resample trained under the same trajectory id)
    assert reasons[hung][0] == "timeout" or counts["dropped_stale"] >= 1, (reasons[hung], counts)
    assert any(e and "injected: engine call crashed" in e for _, e in reasons.values()), reasons
    # the CancelledError inside a trajectory ends it `cancelled`; as with the hang, by then its group may be older
    # than the bound allows (dropped stale: its resample is trained under the same trajectory id)
    cancelled = state["faults"].seen[4]
    assert reasons.get(cancelled, ("",))[0] == "cancelled" or counts["dropped_stale"] >= 1, (reasons[cancelled], counts)
    assert any(e and ("closed before this request finished" in e or "hf engine is closed" in e)  # the restart
               for _, e in reasons.values()), reasons
    # the bound: never more live groups than steps t..t+k consume, no datum older than k versions
    assert run.rollouts.peak_live <= (k + 1) * bs
    for r in records:
        assert r["async/staleness_max"] <= k if "async/staleness_max" in r else True
        assert all(v >= r["step"] - 1 - k for v in r["async/group_versions"])
    assert any(r.get("async/staleness_1", 0) > 0 for r in records), "the producer never ran ahead"
    stale_updates = [r for r in records if r.get("async/staleness_1", 0) > 0 and not r.get("no_update")]
    assert stale_updates and all("train/is_capped_fraction" in r and math.isfinite(r["train/loss"])
                                 for r in stale_updates)
    # exact accounting: every admitted group completed or was dropped; every completed one was trained once
    unfinished = sum(counts[f"dropped_{o}"] for o in ("deadline", "error", "cancelled"))
    dropped = unfinished + counts["dropped_stale"]
    assert counts["admitted"] == counts["completed"] + unfinished + len(run.rollouts.running)
    assert counts["dropped_cancelled"] == len(events) and counts["resampled"] + counts["lost"] == dropped
    assert counts["completed"] == counts["consumed"] + counts["dropped_stale"] + len(run.rollouts.buffer)
    assert counts["consumed"] == steps * bs
    # each place of the instance stream trained exactly once (a resample keeps its place), all samples of each
    assert sorted(seq for r in records for seq in r["async/group_seqs"]) == list(range(steps * bs))
    assert len(trained_ids(tmp_path / "run")) == steps * bs * cfg.sampling.n_samples
    # every transition carries the version it was generated with, never newer than the policy it trained
    for f in (tmp_path / "run" / "rollouts").glob("step-*.jsonl"):
        step = int(f.stem.split("-")[1])
        for line in f.read_text().splitlines():
            for x in json.loads(line)["transitions"]:
                assert x["policy_version"] is not None and step - 1 - k <= x["policy_version"] <= step - 1
    # no runtime leaked: every sandbox workspace removed, no child process left
    assert workspaces() == set()
    assert children() == []


def test_a_killed_async_run_resumes_without_repeating_or_losing_data(parity, tiny_config, tmp_path):
    """The buffer is in the checkpoint: completed groups are trained after the resume, the running ones are
    rolled out again, so the instances trained over the two processes are exactly the stream's first ones."""
    cfg = load_config(tiny_config, ["train.checkpoint_every=2", "train.steps=4"])
    out = tmp_path / "run"

    class Kill(Exception):
        pass

    def on_step(record):
        if record["step"] == 3:
            raise Kill  # after step 3's record, before its checkpoint: the run dies holding a full buffer

    with pytest.raises(Kill):
        asyncio.run(TrainRun(cfg, out, on_step=on_step, session_factory=often_stopping_session).run())
    saved = json.loads((out / "checkpoints" / "step-000002" / "state.json").read_text())
    buf = saved["async_buffer"]
    assert buf["todo"] or buf["accepted"], "the checkpoint holds no in-flight work to carry over"
    assert len(buf["todo"]) + len(buf["accepted"]) <= (cfg.train.max_staleness + 1) * cfg.train.batch_size
    summary = asyncio.run(TrainRun(cfg, out, resume=True, session_factory=often_stopping_session).run())
    assert summary["steps"] == 4
    records = [r for r in read_records(out) if r["kind"] == "train"]
    assert [r["step"] for r in records] == [1, 2, 3, 4]
    trained = [i for r in records for i in r["instances"]]
    assert sorted(seq for r in records for seq in r["async/group_seqs"]) == list(range(4 * cfg.train.batch_size))
    # the stream's positions 0 .. 4*bs-1, each trained once (resamples aside, none here): nothing repeated or lost
    from skyrl_core.training import DataCursor
    from skyrl_core.rollout import RolloutSession

    async def stream():
        session = await RolloutSession.create(cfg)
        try:
            items = session.load_instances("train")
        finally:
            await session.close()
        cursor = DataCursor(len(items), cfg.train.seed)
        return [f"{items[i][0].name}:{items[i][1].id}" for i in cursor.take(4 * cfg.train.batch_size)]

    assert sorted(trained) == sorted(asyncio.run(stream()))


def test_max_staleness_zero_is_the_synchronous_loop(parity, tiny_config, tmp_path):
    """k = 0 runs the unchanged synchronous loop: no producer, each step's instances are the cursor's next batch,
    and every call is generated by the policy the step trains (version step - 1)."""
    cfg = load_config(tiny_config, ["train.max_staleness=0", "train.steps=2"])
    run = TrainRun(cfg, tmp_path / "run", session_factory=often_stopping_session)
    summary = asyncio.run(run.run())
    assert run.rollouts is None and summary["steps_updated"] >= 1
    for f in sorted((tmp_path / "run" / "rollouts").glob("step-*.jsonl")):
        step = int(f.stem.split("-")[1])
        for line in f.read_text().splitlines():
            assert {x["policy_version"] for x in json.loads(line)["transitions"]} <= {step - 1}


def test_a_backend_that_does_not_declare_staleness_is_refused_naming_it(tiny_config):
    from skyrl_core.default_plugins.trainer.local import LocalBackend

    class BridgeLike(LocalBackend):  # a bridge that subclasses the local trainer but trains with its own loss
        name = "bridge"

    cfg = load_config(tiny_config, ["train.max_staleness=2"])
    assert declared_max_staleness(LocalBackend) == math.inf
    assert declared_max_staleness(BridgeLike) == 0
    check_staleness_support(cfg, LocalBackend)
    for backend in ("verl", "tinker", "skyrl_train"):
        cfg.backend.type = backend
        with pytest.raises(ConfigError, match=rf"train.max_staleness.*backend '{backend}' \(BridgeLike\).*synchronously"):
            check_staleness_support(cfg, BridgeLike)
    def bridge_factory(config, engine=None):  # how the bridges register: a factory, checked before it builds
        raise AssertionError("never built")

    cfg.backend.type = "verl"
    with pytest.raises(ConfigError, match=r"backend 'verl' \(bridge_factory\) trains synchronously only"):
        check_staleness_support(cfg, bridge_factory)
    from skyrl_core.default_plugins.trainer import local_backend

    check_staleness_support(cfg, local_backend)
    cfg.train.max_staleness = 0
    check_staleness_support(cfg, BridgeLike)  # the synchronous loop needs no declaration
    check_staleness_support(cfg, bridge_factory)


def test_staleness_histogram_counts_versions_behind_the_policy_trained():
    from skyrl_core.transitions import Trajectory, Transition

    def traj(*versions):
        return Trajectory(instance_id="i", sample_index=0, task="t", group_id="g",
                          transitions=[Transition([1], [2], [0.0], "stop", policy_version=v) for v in versions])

    m = staleness_metrics([traj(4), traj(4, 5), traj(3), traj(2, 4), traj(None), traj()], step=5)
    assert m == {"async/staleness_0": 0.5, "async/staleness_1": 0.25, "async/staleness_2": 0.25,
                 "async/staleness_mean": 0.75, "async/staleness_max": 2.0}


def test_decoupled_ppo_separates_behaviour_and_proximal_policies():
    """Per token: -min(pi_prox/pi_behav, C) * min(r A, clip(r) A), r = pi/pi_prox; on-policy it is ppo_clip."""
    from types import SimpleNamespace

    from skyrl_core.default_plugins.trainer.losses import decoupled_ppo_loss, ppo_clip_loss

    config = SimpleNamespace(clip=0.2, clip_high=None, tis_cap=None)
    lp = torch.log(torch.tensor([[0.5, 0.3, 0.2, 0.6]])).requires_grad_()
    prox = torch.log(torch.tensor([[0.5, 0.25, 0.2, 0.5]]))
    behav = torch.log(torch.tensor([[0.5, 0.5, 0.05, 0.5]]))
    adv = torch.tensor([[1.0, 1.0, -1.0, 1.0]])
    mask = torch.ones(1, 4)
    loss, m = decoupled_ppo_loss(lp, prox, adv, mask, config, rollout_logprobs=behav)
    w = torch.tensor([1.0, 0.5, 2.0, 1.0])  # 0.2/0.05 = 4 truncated at C = 2
    r = torch.tensor([1.0, 1.2, 1.0, 1.2])
    expected = -(w * torch.minimum(r * adv[0], r.clamp(0.8, 1.2) * adv[0])).mean()
    assert float(loss.detach()) == pytest.approx(float(expected), rel=1e-5)
    assert m["is_capped_fraction"] == pytest.approx(0.25)
    assert m["is_weight_max"] == pytest.approx(4.0, rel=1e-5)
    bins = {k: v for k, v in m.items() if k.startswith("is_weight_bin/")}
    assert sum(bins.values()) == pytest.approx(1.0)
    assert bins["is_weight_bin/0.9-1.1"] == pytest.approx(0.5) and bins["is_weight_bin/2-inf"] == pytest.approx(0.25)
    # on-policy (behaviour = proximal): exactly ppo_clip
    on, _ = decoupled_ppo_loss(lp, prox, adv, mask, config, rollout_logprobs=prox)
    ref, _ = ppo_clip_loss(lp, prox, adv, mask, config)
    assert float(on.detach()) == pytest.approx(float(ref.detach()), rel=1e-6)
    with pytest.raises(ValueError, match="decoupled_ppo.*rollout logprobs"):
        decoupled_ppo_loss(lp, prox, adv, mask, config)


def test_admission_bound_and_stale_drop_without_a_model():
    """The bound's arithmetic: capacity (k+1)*B, cut to what the remaining steps consume."""
    from types import SimpleNamespace

    run = SimpleNamespace(config=SimpleNamespace(train=SimpleNamespace(steps=10, batch_size=4)), step=0)
    r = AsyncRollouts(run, max_staleness=2, deadline_s=None)
    assert r.capacity() == 12
    run.step = 9
    assert r.capacity() == 4
    run.step = 10
    assert r.capacity() == 0


def test_training_loop_simulation_overlaps_and_keeps_the_bound():
    """`skyrl bench dispatch`'s training-loop simulation: k = 0 is rollout + train per step; k > 0 overlaps them
    (never slower, never staler than k)."""
    from skyrl_core.default_plugins.bench.training_sim import simulate_loop, training_loop_table

    sync = simulate_loop(0, 2.0, steps=10, seed=1)
    assert sync["s_per_step"] == pytest.approx(sync["rollout_s_mean"] + 2.0)
    assert sync["max_staleness_seen"] == 0
    for k in (1, 2):
        r = simulate_loop(k, 2.0, steps=10, seed=1)
        assert r["s_per_step"] < sync["s_per_step"] and r["max_staleness_seen"] <= k
    rows = training_loop_table(ratios=(1.0,), seeds=1, steps=10)
    assert [r["max_staleness"] for r in rows] == [0, 1, 2] and rows[0]["speedup"] == 1.0 and rows[1]["speedup"] > 1


def test_hook_register_async_loops(parity, tiny_config, tmp_path):
    """A run with ``train.max_staleness`` > 0 asks the registry for the loop ``async``: a plugin's (here one that
    counts and hands over to the built-in) replaces the built-in by hook order, checks the registered backend and
    then the built one, and makes the producer that trains every step."""
    from skyrl_core.default_plugins.async_training.loop import AsyncRollouts, AsyncTraining

    calls = []

    class CountingLoop:
        name = "async"

        def check(self, config, backend):
            calls.append(("check", backend))
            AsyncTraining.check(config, backend)

        def producer(self, run, state=None):
            calls.append(("producer", run, state))
            return AsyncTraining.producer(run, state)

    class Plugin:
        @hookimpl(tryfirst=True)
        def register_async_loops(self, register):
            register(CountingLoop())

    parity.register_plugin(Plugin(), "counting-loop")
    assert parity.registry.entries["async_loops"]["async"].plugin == "counting-loop"
    cfg = load_config(tiny_config, ["train.steps=2"])
    run = TrainRun(cfg, tmp_path / "run", session_factory=often_stopping_session)
    assert asyncio.run(run.run())["steps"] == 2
    assert [c[0] for c in calls] == ["check", "check", "producer"]
    assert calls[0][1] is parity.registry.get("backends", cfg.backend.type) and calls[1][1] is run.backend
    assert calls[2][1:] == (run, None) and isinstance(run.rollouts, AsyncRollouts)
    records = [r for r in read_records(tmp_path / "run") if r["kind"] == "train"]
    assert [r["step"] for r in records] == [1, 2] and all(r["async/wait_s"] >= 0 for r in records)
    assert run.rollouts.counts["consumed"] == 2 * cfg.train.batch_size
