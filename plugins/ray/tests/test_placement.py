"""``runtime.placement: ray`` on a local Ray cluster: the GSM8K task's sandbox, python tool and verifier run in Ray
actors and give the same rewards as local placement; a killed actor fails only its trajectory and is replaced;
leases are released exactly once; what the agent runs cannot reach the actor or the cluster."""

from __future__ import annotations

import asyncio
import json
import re

import attrs
import pytest

from skyrl_core.config import load_config
from skyrl_core.rollout import RolloutSession
from skyrl_core.transitions import ERROR_RUNTIME, FINISHED, NO_TOOL_CALL

pytestmark = [pytest.mark.timeout(600), pytest.mark.usefixtures("ray_cluster")]

N = 4


def gsm8k_config(placement: str, *extra: str):
    runtime = f"{{type: sandbox, cpu_time_s: 20, memory_mb: 512, placement: {placement}}}"
    cfg = load_config(None, ["tasks.0.name=gsm8k", f"tasks.0.data={{split: test, limit: {N}}}",
                             "tasks.0.tools=[python, finish]", f"tasks.0.runtime={runtime}",
                             "tasks.0.verifier=gsm8k_answer", "sampling.n_samples=1", "sampling.seed=0",
                             "sampling.max_tokens=64", "agent.max_turns=3", "agent.tool_timeout_s=60",
                             "dispatcher.max_parallel_agents=4", *extra])
    if placement == "ray":
        assert cfg.tasks[0].runtime.placement == "ray"
    return cfg


def call(name: str, **args) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': args})}\n</tool_call>"


def script_for(answers: dict[str, str], slow: str | None = None):
    """Per question: compute the (right, wrong or no) answer with python in the sandbox, then finish with what
    the sandbox printed. ``slow``'s code first leaves a marker file and sleeps (the kill test's target)."""
    ordered = list(answers.items())

    def script(prompt: str, turn: int) -> str:
        k, (question, answer) = next((k, qa) for k, qa in enumerate(ordered) if qa[0] in prompt)
        if turn == 0:
            if k == 3:
                return "I think it is about 7."  # no tool call: ends no_tool_call with reward 0
            value = int(float(answer)) + (1 if k == 2 else 0)  # k == 2 computes a wrong answer
            code = f"import os\nprint('RESULT=%d pid=%d' % ({value}, os.getpid()))"
            if question == slow:
                code = "import time\nopen('started', 'w').write('1')\ntime.sleep(30)\n" + code
            return call("python", code=code)
        found = re.findall(r"RESULT=(-?\d+)", prompt)
        return call("finish", answer=found[-1] if found else "none")

    return script


async def rollout(cfg, engine):
    session = await RolloutSession.create(cfg, engine=engine)
    try:
        items = session.load_instances("train")
        trajs, metrics = await session.rollout(items, 1)
    finally:
        await session.close()
    return items, trajs, metrics


@pytest.fixture(scope="module")
def gsm8k_answers():
    from skyrl_core.default_plugins.gsm8k import load_gsm8k
    from skyrl_core.tasks import DataSpec

    rows = load_gsm8k(DataSpec(split="test", limit=N))
    return {r.data["question"]: r.data["answer"] for r in rows}


async def test_gsm8k_rewards_on_ray_equal_local_placement(tiny_engine, gsm8k_answers):
    from scripted_engine import PromptScriptedEngine

    engine = PromptScriptedEngine(tiny_engine, script_for(gsm8k_answers))
    _, local, _ = await rollout(gsm8k_config("local"), engine)
    _, remote, metrics = await rollout(gsm8k_config("ray", "tasks.0.runtime.resources={num_cpus: 1}"), engine)

    assert [t.reward for t in local] == [1.0, 1.0, 0.0, 0.0]
    assert [t.reward for t in remote] == [t.reward for t in local]
    assert [t.finish_reason for t in remote] == [FINISHED, FINISHED, FINISHED, NO_TOOL_CALL]
    assert [t.finish_reason for t in remote] == [t.finish_reason for t in local]
    assert [t.answer for t in remote] == [t.answer for t in local]
    # the observations the model saw are the same (the sandbox's pid namespace prints the same pid)
    assert [[m["content"] for m in t.messages] for t in remote] == [[m["content"] for m in t.messages] for t in local]
    # every trajectory leased an actor, and every lease was released exactly once
    assert metrics["leases"] == N and metrics["releases"] == N and metrics["double_releases"] == 0
    assert 1 <= metrics["actors_created"] <= 2  # the 2-CPU cluster fits two num_cpus: 1 actors
    assert metrics["actors_replaced"] == 0 and metrics["runtime_releases"] == N


async def test_a_killed_actor_ends_only_its_trajectory_and_is_replaced(tiny_engine, gsm8k_answers, ray_cluster):
    from scripted_engine import PromptScriptedEngine

    questions = list(gsm8k_answers)
    slow = questions[1]
    engine = PromptScriptedEngine(tiny_engine, script_for(gsm8k_answers, slow=slow))
    cfg = gsm8k_config("ray", "tasks.0.runtime.max_actors=2", "dispatcher.max_parallel_agents=2")
    session = await RolloutSession.create(cfg, engine=engine)
    placement = next(iter(session._resolved.values())).runtime_cls
    items = session.load_instances("train")
    killed = []

    async def kill_the_slow_one():
        # the slow trajectory's python call has left its marker: its actor is mid-tool-call
        while True:
            for lease in list(placement.pool.busy.values()):
                try:
                    await lease.actor.read_file.remote("started")
                except Exception:
                    continue
                killed.append(await lease.actor.ping.remote())
                ray_cluster.kill(lease.actor, no_restart=True)
                return
            await asyncio.sleep(0.2)

    try:
        killer = asyncio.ensure_future(kill_the_slow_one())
        trajs, metrics = await asyncio.wait_for(session.rollout(items, 1), 300)
        await asyncio.wait_for(killer, 10)
        # the dead actor's slot was freed: two trajectories at once now get two live actors, one of them new (a
        # replacement starts when a lease finds no idle actor, so during the rollout it may not have been needed)
        pool = placement.pool
        a, b = await pool.acquire(), await pool.acquire()
        try:
            pids = [await a.actor.ping.remote(), await b.actor.ping.remote()]
            assert pool.alive == 2 and len(set(pids)) == 2 and killed[0] not in pids
            assert pool.created >= 3  # the two first actors and at least one replacement
        finally:
            pool.release(a)
            pool.release(b)
    finally:
        await session.close()

    by_q = {t.instance_id: t for t in trajs}
    slow_traj = next(t for t, (_, inst) in zip(trajs, items) if inst.data["question"] == slow)
    assert slow_traj.finish_reason == ERROR_RUNTIME and slow_traj.masked and slow_traj.reward == 0.0
    assert "Ray actor" in slow_traj.error and f"pid {killed[0]}" in slow_traj.error, slow_traj.error
    others = [t for t in trajs if t is not slow_traj]
    # the others finished as without the kill: 1, 0 (wrong), 0 (no tool call) in question order
    assert [t.finish_reason for t in others] == [FINISHED, FINISHED, NO_TOOL_CALL], [t.error for t in others]
    assert [t.reward for t in others] == [1.0, 0.0, 0.0]
    assert metrics["failures"] == {ERROR_RUNTIME: 1}
    # the dead actor was dropped (its replacement is checked above); every lease released once, the dispatcher's
    # release ran once per trajectory
    assert metrics["actors_replaced"] == 1 and metrics["actors_created"] >= 2, metrics
    assert metrics["leases"] == metrics["releases"] == N and metrics["double_releases"] == 0
    assert metrics["runtime_releases"] == N and metrics["release_errors"] == 0
    assert len(by_q) == N


async def test_agent_code_cannot_kill_its_actor_or_reach_the_cluster(tiny_engine, gsm8k_answers, ray_cluster):
    """Attack: the agent's python kills every process it can see, signals its parents, and connects to the Ray
    cluster's GCS port on 127.0.0.1. The sandbox (own pid and network namespaces) holds: the actor lives on and the
    trajectory finishes normally."""
    from scripted_engine import PromptScriptedEngine

    gcs = ray_cluster.get_runtime_context().gcs_address
    host, port = gcs.rsplit(":", 1)
    attack = (
        "import os, signal, socket\n"
        "print('RESULT=42', flush=True)\n"
        "try:\n"
        f"    socket.create_connection(({host!r}, {int(port)}), timeout=3); print('GCS REACHED', flush=True)\n"
        "except Exception as e: print('gcs: %s' % type(e).__name__, flush=True)\n"
        "for pid in (os.getppid(), 1):\n"
        "    try: os.kill(pid, signal.SIGKILL); print('signalled', pid, flush=True)\n"
        "    except Exception as e: print('kill %d: %s' % (pid, type(e).__name__), flush=True)\n"
        "os.kill(-1, signal.SIGKILL)\n")

    def script(prompt: str, turn: int) -> str:
        if turn == 0:
            return call("python", code=attack)
        found = re.findall(r"RESULT=(-?\d+)", prompt)
        return call("finish", answer=found[-1] if found else "none")

    cfg = gsm8k_config("ray", "tasks.0.data.limit=1", "tasks.0.runtime.max_actors=1")
    session = await RolloutSession.create(cfg, engine=PromptScriptedEngine(tiny_engine, script))
    placement = next(iter(session._resolved.values())).runtime_cls
    try:
        trajs, metrics = await session.rollout(session.load_instances("train"), 1)
        (actor,) = placement.pool.idle
        assert isinstance(await actor.ping.remote(), int)  # the actor outlived the attack
    finally:
        await session.close()
    (traj,) = trajs
    observation = next(m["content"] for m in traj.messages if "RESULT=42" in (m.get("content") or "")
                       and m.get("role") != "assistant")
    assert "GCS REACHED" not in observation and "gcs: " in observation, observation
    assert traj.finish_reason == FINISHED and traj.answer == "42", traj.error
    assert metrics["actors_replaced"] == 0 and metrics["leases"] == metrics["releases"] == 1


async def test_resources_the_cluster_cannot_fit_fail_init_with_the_reason(tiny_engine, gsm8k_answers):
    from scripted_engine import PromptScriptedEngine

    cfg = gsm8k_config("ray", "tasks.0.data.limit=1", "tasks.0.runtime.resources={num_cpus: 64}")
    _, (traj,), _ = await rollout(cfg, PromptScriptedEngine(tiny_engine, script_for(gsm8k_answers)))
    assert traj.finish_reason == "error_init" and "do not fit" in traj.error and "num_cpus" in traj.error, traj.error


def test_a_second_release_of_one_lease_is_counted_and_ignored():
    from skyrl_ray.runtimes import ActorPool, Lease

    pool = ActorPool(object, {}, None, "v", {}, max_actors=1)
    lease = Lease(id=1, actor="actor-handle")
    pool.busy[1] = lease
    pool.alive = 1
    pool.release(lease)
    pool.release(lease)
    assert pool.releases == 1 and pool.double_releases == 1 and list(pool.idle) == ["actor-handle"]
    assert attrs.asdict(lease)["released"] is True


async def test_a_tool_past_its_timeout_is_stopped_and_the_trajectory_goes_on(tiny_engine, gsm8k_answers):
    """The agent's per-call timeout cancels the remote call (and the command in the actor's sandbox); the next
    call on the same actor answers at once."""
    from scripted_engine import PromptScriptedEngine

    def script(prompt: str, turn: int) -> str:
        if turn == 0:
            return call("python", code="import time\ntime.sleep(60)")
        if turn == 1:
            return call("python", code="print('RESULT=%d' % 6)")
        found = re.findall(r"RESULT=(-?\d+)", prompt)
        return call("finish", answer=found[-1] if found else "none")

    cfg = gsm8k_config("ray", "tasks.0.data.limit=1", "agent.tool_timeout_s=3", "agent.max_turns=4")
    _, (traj,), metrics = await asyncio.wait_for(rollout(cfg, PromptScriptedEngine(tiny_engine, script)), 90)
    observations = [m["content"] for m in traj.messages if m.get("role") not in ("assistant", "system", "user")]
    assert "timed out after 3 s" in observations[0], observations
    assert traj.finish_reason == FINISHED and traj.answer == "6", traj.error
    assert traj.timing["run"] < 30
    assert metrics["actors_replaced"] == 0 and metrics["leases"] == metrics["releases"] == 1


async def test_a_runtime_failing_in_its_actor_fails_init_with_its_own_error(tiny_engine, gsm8k_answers, tmp_path):
    """A runtime that raises while starting in the actor (its source directory is missing) ends the trajectory
    ``error_init`` with the runtime's own exception, not as a lost actor: the actor is kept for the next lease."""
    from scripted_engine import PromptScriptedEngine

    missing = tmp_path / "no-such-source"
    cfg = gsm8k_config("ray", "tasks.0.data.limit=2", "tasks.0.runtime.max_actors=1",
                       f"tasks.0.runtime.source={missing}")
    _, trajs, metrics = await rollout(cfg, PromptScriptedEngine(tiny_engine, script_for(gsm8k_answers)))
    assert [t.finish_reason for t in trajs] == ["error_init", "error_init"]
    assert all("FileNotFoundError" in t.error and str(missing) in t.error for t in trajs), [t.error for t in trajs]
    assert metrics["actors_created"] == 1 and metrics["actors_replaced"] == 0
    assert metrics["leases"] == metrics["releases"] == 2 and metrics["double_releases"] == 0
