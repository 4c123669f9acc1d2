"""The swe task with ``placement: ray``: the swe_sandbox, the editor, search, bash and submit tools and the
test-based verifier run in a Ray actor, and score the same as with local placement (a small repository made
here; its environment is a real venv with pytest from the package index)."""

from __future__ import annotations

import json
import textwrap

import pytest

pytest.importorskip("skyrl_swe")

from skyrl_core.config import load_config  # noqa: E402
from skyrl_core.transitions import FINISHED  # noqa: E402

pytestmark = [pytest.mark.timeout(900), pytest.mark.usefixtures("ray_cluster")]

BUGGY = "def add(a, b):\n    return a - b\n\n\ndef sub(a, b):\n    return a - b\n"
TESTS = "from calc import add, sub\n\n\ndef test_add():\n    assert add(2, 3) == 5\n\n\ndef test_sub():\n    assert sub(5, 3) == 2\n"
GOLD = textwrap.dedent("""\
    diff --git a/calc.py b/calc.py
    --- a/calc.py
    +++ b/calc.py
    @@ -1,5 +1,5 @@
     def add(a, b):
    -    return a - b
    +    return a + b
     
     
     def sub(a, b):
    """)


@pytest.fixture(scope="module")
def swe_rows(tmp_path_factory):
    root = tmp_path_factory.mktemp("swe-ray")
    repo = root / "calc"
    (repo / "tests").mkdir(parents=True)
    (repo / "calc.py").write_text(BUGGY)
    (repo / "tests" / "test_calc.py").write_text(TESTS)
    rows = [{"instance_id": f"calc-{k}", "repo": "local/calc", "version": "1", "repo_dir": str(repo),
             "base_commit": "", "problem_statement": f"Ticket {k}: add(2, 3) returns -1 instead of 5.",
             "patch": GOLD, "test_patch": "", "FAIL_TO_PASS": ["tests/test_calc.py::test_add"],
             "PASS_TO_PASS": ["tests/test_calc.py::test_sub"]} for k in (1, 2)]
    path = root / "instances.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def call(name: str, **args) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': args})}\n</tool_call>"


def script(prompt: str, turn: int) -> str:
    """Ticket 1: fix with the editor, run the tests with bash, submit. Ticket 2: search, then submit unfixed."""
    if "Ticket 1:" in prompt:
        return [call("str_replace_editor", command="str_replace", path="calc.py", old_str="    return a - b\n\n\ndef sub",
                     new_str="    return a + b\n\n\ndef sub"),
                call("bash", command="python -m pytest -q tests 2>&1 | tail -n 1"),
                call("submit")][min(turn, 2)]
    return [call("search", query="def:add"), call("submit")][min(turn, 1)]


async def eval_swe(path, placement: str, engine, registry):
    from skyrl_core.rollout import RolloutSession

    cfg = load_config(None, ["tasks.0.name=swe", f"tasks.0.data={{path: {path}}}",
                             "tasks.0.tools=[bash, str_replace_editor, search, submit]",
                             f"tasks.0.runtime={{type: swe_sandbox, cpu_time_s: 60, placement: {placement}}}",
                             "tasks.0.verifier=swe_tests", "sampling.n_samples=1", "sampling.seed=0",
                             "agent.max_turns=4", "agent.tool_timeout_s=120", "dispatcher.max_parallel_agents=2"])
    session = await RolloutSession.create(cfg, engine=engine, registry=registry)
    try:
        return await session.rollout(session.load_instances("train"), 1)
    finally:
        await session.close()


async def test_swe_rewards_on_ray_equal_local_placement(swe_rows, tiny_engine, plugins):
    import skyrl_swe
    from scripted_engine import PromptScriptedEngine

    plugins.register_plugin(skyrl_swe, "skyrl_swe")
    engine = PromptScriptedEngine(tiny_engine, script)
    local, _ = await eval_swe(swe_rows, "local", engine, plugins.registry)
    remote, metrics = await eval_swe(swe_rows, "ray", engine, plugins.registry)

    assert [t.reward for t in local] == [1.0, 0.0], [(t.error, t.metrics.get("error")) for t in local]
    assert [t.reward for t in remote] == [t.reward for t in local]
    assert [t.finish_reason for t in remote] == [FINISHED, FINISHED]
    for here, there in zip(local, remote):
        assert there.metrics["tests"] == here.metrics["tests"]
        assert there.metrics["model_patch"] == here.metrics["model_patch"]
        assert there.tool_calls == here.tool_calls
    assert "return a + b" in remote[0].metrics["model_patch"] and remote[1].metrics["model_patch"] == ""
    assert remote[0].metrics["tests"] == {"tests/test_calc.py::test_add": "PASSED",
                                          "tests/test_calc.py::test_sub": "PASSED"}
    # the bash tool ran the tests in the actor's sandbox, over the file the editor changed there
    bash_obs = [m["content"] for m in remote[0].messages if m.get("role") != "assistant" and "passed" in
                (m.get("content") or "")]
    assert bash_obs and "2 passed" in bash_obs[0], remote[0].messages
    assert metrics["leases"] == metrics["releases"] == 2 and metrics["double_releases"] == 0
