"""Every limit a command hits (``ExecResult.limits``) is named in the observation (``[limit NAME: ...]``) and
counted in the trajectory's metrics (``runtime_limits``), for every task — here the arith task of
test_rollout.py, through the real sandbox and the generic python tool."""

from __future__ import annotations

import pytest

from skyrl_core.rollout import RolloutSession
from skyrl_core.default_plugins.runtimes.sandbox import LocalSandbox
from skyrl_core.runtime import RuntimeSpec
from skyrl_core.testing import require_sandbox
from test_agent import ScriptedReplyInjector, call
from test_rollout import config, engine, registry  # noqa: F401 (the same plugin, engine and registry fixtures)

pytestmark = pytest.mark.timeout(300)


class FloodThenFinish(ScriptedReplyInjector):
    """A python call printing 100 000 characters (over the 16 000 the runtime returns), then finish."""

    def __init__(self, inner):
        super().__init__(inner, [call("python", code="print('x' * 100000)"), call("finish", answer="72")],
                         run_model=False)


async def test_a_limit_hit_is_named_in_the_observation_and_counted_in_the_trajectory_metrics(registry, engine):
    session = await RolloutSession.create(config(), engine=FloodThenFinish(engine), registry=registry)
    trajs, _ = await session.rollout(session.load_instances("eval")[:1], n_samples=1)
    traj = trajs[0]
    tool_turns = [m["content"] for m in traj.messages if m.get("role") == "tool"]
    assert tool_turns and "[limit output: the output was longer than 16000 characters" in tool_turns[0]
    assert traj.metrics["runtime_limits"] == {"output": 1} and traj.metrics["runtime_limit_hits"] == 1
    assert traj.reward == 1.0 and traj.finish_reason == "finished"
    await session.close()


async def test_every_limit_note_names_its_limit():
    require_sandbox()  # fails instead of skipping under SKYRL_REQUIRE_SANDBOX=1 (CI)
    spec = RuntimeSpec(max_file_mb=1, cpu_time_s=1, max_output_chars=100)
    async with LocalSandbox(spec) as rt:
        cases = {"file_size": "head -c 3000000 /dev/zero > big", "cpu_time": "while :; do :; done",
                 "output": "seq 1 1000", "wall_time": "sleep 5"}
        for name, command in cases.items():
            res = await rt.exec(command, timeout_s=2 if name == "wall_time" else 30)
            assert name in res.limits, (name, res.output)
            assert f"[limit {name}: " in res.output, res.output
        assert set(rt.limit_hits) >= set(cases)
