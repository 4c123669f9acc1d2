"""``skyrl eval`` of the swe example with ``runtime.type=docker``: SmolLM2 through the hf engine, a container per
trajectory (its image built on demand in the init stage), the verifier in fresh containers, nothing left behind."""

from __future__ import annotations

import json

import pytest

from skyrl_core.transitions import CONTEXT_EXCEEDED, FINISHED, MAX_TOKENS, MAX_TURNS, NO_TOOL_CALL



@pytest.mark.slow
@pytest.mark.timeout(1200)
async def test_eval_of_two_generated_instances_in_docker(generated, tmp_path, one_torch_thread, base_image):
    from skyrl_core.config import load_config
    from skyrl_core.default_plugins.eval.run import run_eval
    from skyrl_swe.docker_runtime import REMOVALS

    cfg = load_config("swe:generated",
                      ["runtime.type=docker", f"data.path={generated}", "data.limit=0", f"eval_data.path={generated}",
                       "eval_data.offset=0", "eval_data.limit=2", "sampling.n_samples=1", "agent.max_turns=2",
                       "sampling.max_tokens=48", "sampling.seed=0"])
    assert cfg.tasks[0].runtime.type == "docker"
    rows = [json.loads(line) for line in generated.read_text().splitlines() if line.strip()]
    removed_before = sum(REMOVALS.values())
    metrics = await run_eval(cfg, tmp_path)

    assert metrics["n_instances"] == 2 and metrics["n_trajectories"] == 2
    trajectories = [json.loads(line) for line in (tmp_path / "trajectories.jsonl").read_text().splitlines()]
    for t in trajectories:
        assert t["finish_reason"] in (FINISHED, NO_TOOL_CALL, MAX_TURNS, MAX_TOKENS, CONTEXT_EXCEEDED), t["error"]
        assert t["transitions"] and t["transitions"][0]["output_ids"]
        row = next(r for r in rows if r["instance_id"] == t["instance_id"])
        tests = t["metrics"]["tests"]  # the verifier ran in its own container and read every listed test
        assert set(tests) == set(row["FAIL_TO_PASS"]) | set(row["PASS_TO_PASS"])
        assert t["metrics"]["report"] == "channel"
        assert t["reward"] == float(all(v == "PASSED" for v in tests.values()))
    # two agent containers and two verifier containers, each removed once
    assert sum(REMOVALS.values()) - removed_before == 4
    assert (tmp_path / "predictions.jsonl").exists()
