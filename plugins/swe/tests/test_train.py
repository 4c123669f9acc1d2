"""``skyrl train`` on the swe task: one step end to end — rollouts of generated instances in the sandbox with
SmolLM2 through the hf engine, the test-based verifier, training data and the local backend's update."""

from __future__ import annotations

import json

import pytest

from skyrl_core.transitions import CONTEXT_EXCEEDED, FINISHED, MAX_TOKENS, MAX_TURNS, NO_TOOL_CALL



@pytest.mark.slow
async def test_one_train_step_on_generated_instances(generated, tmp_path, one_torch_thread):
    from skyrl_core.config import load_config
    from skyrl_core.training import TrainRun

    rows = {json.loads(line)["instance_id"] for line in generated.read_text().splitlines() if line.strip()}
    cfg = load_config("swe:generated",
                      ["train.steps=1", f"data.path={generated}", f"eval_data.path={generated}",
                       "agent.max_turns=2", "sampling.max_tokens=48", "sampling.seed=0"])
    summary = await TrainRun(cfg, tmp_path).run()

    assert summary["steps"] == 1
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in records if r["kind"] == "train"]
    assert len(train) == 1 and train[0]["step"] == 1
    step = train[0]
    assert {i.split(":", 1)[1] for i in step["instances"]} == rows  # batch_size 2: both generated instances
    assert step["batch/trajectories"] == 4 and step["batch/groups"] == 2
    assert 0.0 <= step["reward_mean"] <= 1.0
    assert "train/train_time_s" in step and step["train_s"] > 0
    trajectories = [json.loads(line) for line in (tmp_path / "rollouts" / "step-000001.jsonl").read_text().splitlines()]
    assert len(trajectories) == 4
    for t in trajectories:
        assert t["reward"] in (0.0, 1.0)
        assert t["finish_reason"] in (FINISHED, NO_TOOL_CALL, MAX_TURNS, MAX_TOKENS, CONTEXT_EXCEEDED), t["error"]
        assert "tests" in t["metrics"] and "model_patch" in t["metrics"]  # the verifier ran in the eval stage
    # all-equal rewards in a group carry no gradient: those groups are counted, not trained on
    equal = sum(len({t["reward"] for t in trajectories if t["group_id"] == g}) == 1
                for g in {t["group_id"] for t in trajectories})
    assert step["batch/zero_advantage_groups"] == equal
