"""``skyrl eval`` on the swe task end to end: SmolLM2 through the hf engine, generated instances in the
bubblewrap sandbox (prepared in the init stage), the test-based verifier, and the SWE-bench predictions file."""

from __future__ import annotations

import json

import pytest

from skyrl_core.transitions import CONTEXT_EXCEEDED, FINISHED, MAX_TOKENS, MAX_TURNS, NO_TOOL_CALL



@pytest.mark.slow
async def test_eval_of_two_generated_instances_with_the_hf_engine(generated, tmp_path, one_torch_thread):
    from skyrl_core.config import load_config
    from skyrl_core.evaluate import run_eval
    from skyrl_swe.predictions import read_trajectories_jsonl

    cfg = load_config("swe:generated",
                      [f"data.path={generated}", "data.limit=0", f"eval_data.path={generated}", "eval_data.offset=0",
                       "eval_data.limit=2",
                       "sampling.n_samples=1", "agent.max_turns=2", "sampling.max_tokens=48", "sampling.seed=0"])
    rows = [json.loads(line) for line in generated.read_text().splitlines() if line.strip()]
    metrics = await run_eval(cfg, tmp_path)

    assert metrics["n_instances"] == 2 and metrics["n_trajectories"] == 2
    trajectories = [json.loads(line) for line in (tmp_path / "trajectories.jsonl").read_text().splitlines()]
    assert {t["instance_id"] for t in trajectories} == {r["instance_id"] for r in rows}
    for t in trajectories:
        assert t["reward"] in (0.0, 1.0)
        # a named reason the agent loop reached by itself or by a limit; infrastructure errors would fail here
        assert t["finish_reason"] in (FINISHED, NO_TOOL_CALL, MAX_TURNS, MAX_TOKENS, CONTEXT_EXCEEDED), t["error"]
        assert t["transitions"] and t["transitions"][0]["output_ids"]  # the model really generated
        # the verifier ran in the eval stage: per-test results over every listed test, and the patch recorded
        row = next(r for r in rows if r["instance_id"] == t["instance_id"])
        tests = t["metrics"]["tests"]
        assert set(tests) == set(row["FAIL_TO_PASS"]) | set(row["PASS_TO_PASS"])
        assert t["reward"] == float(all(v == "PASSED" for v in tests.values()))
        assert isinstance(t["metrics"]["model_patch"], str)
    assert sum(metrics["finish_reasons"].values()) == 2 and "None" not in metrics["finish_reasons"]

    preds = [json.loads(line) for line in (tmp_path / "predictions.jsonl").read_text().splitlines()]
    assert len(preds) == 2
    assert {p["instance_id"] for p in preds} == {r["instance_id"] for r in rows}
    by_id = {t["instance_id"]: t for t in trajectories}
    for p in preds:
        assert set(p) == {"instance_id", "model_name_or_path", "model_patch"}
        assert p["model_name_or_path"] == "smollm2-135m-instruct"
        assert p["model_patch"] == by_id[p["instance_id"]]["metrics"]["model_patch"]
    # `skyrl swe predictions` over the saved trajectories makes the same file
    from skyrl_swe.predictions import write_predictions

    again = write_predictions(read_trajectories_jsonl(tmp_path / "trajectories.jsonl"), tmp_path / "p2.jsonl",
                              "smollm2-135m-instruct")
    assert again.read_text() == (tmp_path / "predictions.jsonl").read_text()


def test_predictions_take_each_instance_best_sample(tmp_path):
    from skyrl_core.evaluate import write_outputs
    from skyrl_core.transitions import Trajectory

    def traj(iid, k, reward, patch):
        t = Trajectory(instance_id=iid, sample_index=k, task="swe", group_id=iid)
        t.reward = reward
        if patch is not None:
            t.metrics["model_patch"] = patch
        return t

    trajs = [traj("a", 0, 0.0, ""), traj("a", 1, 0.0, "diff a1"), traj("a", 2, 1.0, "diff a2"),
             traj("b", 0, 0.0, None), traj("b", 1, 0.0, "diff b1"), traj("c", 0, 0.0, None)]
    paths = write_outputs(tmp_path, trajs, {"n": 6}, model_name="m")
    preds = [json.loads(line) for line in paths["predictions"].read_text().splitlines()]
    assert preds == [{"instance_id": "a", "model_name_or_path": "m", "model_patch": "diff a2"},
                     {"instance_id": "b", "model_name_or_path": "m", "model_patch": "diff b1"},
                     {"instance_id": "c", "model_name_or_path": "m", "model_patch": ""}]
    # a task whose verifier records no patch gets no predictions file
    assert "predictions" not in write_outputs(tmp_path / "plain", [traj("x", 0, 1.0, None)], {})
