"""``skyrl eval`` on the swe task end to end: SmolLM2 through the hf engine, generated instances in the
bubblewrap sandbox (prepared in the init stage), the test-based verifier, and the SWE-bench predictions file."""

from __future__ import annotations

import json

import pytest

from skyrl_core.transitions import CONTEXT_EXCEEDED, FINISHED, MAX_TOKENS, MAX_TURNS, NO_TOOL_CALL



@pytest.mark.slow
async def test_eval_of_two_generated_instances_with_the_hf_engine(generated, tmp_path, one_torch_thread):
    from skyrl_core.config import load_config
    from skyrl_core.default_plugins.eval.run import run_eval
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


def _traj(iid, k, reward, patch):
    from skyrl_core.transitions import Trajectory

    t = Trajectory(instance_id=iid, sample_index=k, task="swe", group_id=iid)
    t.reward = reward
    if patch is not None:
        t.metrics["model_patch"] = patch
    return t


# instance a: the tests pass only sample 2's patch, two samples agree on another; b: no sample passes
SAMPLES = [_traj("a", 0, 0.0, ""), _traj("a", 1, 0.0, "diff a1\n"), _traj("a", 2, 1.0, "diff a2"),
           _traj("a", 3, 0.0, "diff a1"), _traj("b", 0, 0.0, None), _traj("b", 1, 0.0, "diff b1"),
           _traj("c", 0, 0.0, None)]


def _read(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_predictions_never_read_the_reward_by_default(tmp_path):
    """The default predictions.jsonl is a vote over identical patches, named in predictions.meta.json; the
    sample the hidden tests passed (a2) is not picked because it passed. Old code picked the best reward."""
    from skyrl_core.config import Config, EvalConfig
    from skyrl_core.default_plugins.eval.run import write_outputs

    paths = write_outputs(tmp_path, SAMPLES, {"n": 7}, config=Config(model="m"))
    assert _read(paths["predictions"]) == [
        {"instance_id": "a", "model_name_or_path": "m", "model_patch": "diff a1\n"},  # 2 votes against 1
        {"instance_id": "b", "model_name_or_path": "m", "model_patch": "diff b1"},     # the one non-empty patch
        {"instance_id": "c", "model_name_or_path": "m", "model_patch": ""}]
    meta = json.loads((tmp_path / "predictions.meta.json").read_text())
    assert meta["selection"] == "vote" and meta["reads_reward"] is False and meta["instances"] == 3
    assert not list(tmp_path.glob("predictions.oracle*"))  # no oracle file unless asked for
    # sample 0, whatever the reward
    first = write_outputs(tmp_path / "first", SAMPLES, {}, config=Config(model="m", eval=EvalConfig(selection="first")))
    assert [p["model_patch"] for p in _read(first["predictions"])] == ["", "", ""]
    # a task whose verifier records no patch gets no predictions file
    assert "predictions" not in write_outputs(tmp_path / "plain", [_traj("x", 0, 1.0, None)], {})


def test_oracle_best_of_n_only_under_its_flag_and_its_own_file_name(tmp_path):
    from skyrl_core.config import load_config
    from skyrl_core.default_plugins.eval.run import write_outputs

    cfg = load_config(None, ["model=m", "eval.oracle_best_of_n=true"])
    paths = write_outputs(tmp_path, SAMPLES, {}, config=cfg)
    assert paths["oracle_predictions"].name == "predictions.oracle-best-of-4.jsonl"
    assert [p["model_patch"] for p in _read(paths["oracle_predictions"])] == ["diff a2", "diff b1", ""]
    oracle_meta = json.loads((tmp_path / "predictions.oracle-best-of-4.meta.json").read_text())
    assert oracle_meta["reads_reward"] is True and "upper bound" in oracle_meta["rule"]
    # the reward-free file is still there, unchanged by the flag
    assert _read(paths["predictions"])[0]["model_patch"] == "diff a1\n"


def test_an_oracle_selection_is_refused_as_the_default_pick():
    from skyrl_core.config import load_config
    from skyrl_core.errors import ConfigError

    with pytest.raises(ConfigError, match="eval.selection.*vote, first.*oracle_best_of_n"):
        load_config(None, ["eval.selection=oracle"])


def test_swe_predictions_command_is_reward_free_unless_oracle(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from skyrl_swe.cli import swe_app

    saved = tmp_path / "trajectories.jsonl"
    saved.write_text("".join(json.dumps(t.to_json(), default=str) + "\n" for t in SAMPLES))
    runner = CliRunner()
    res = runner.invoke(swe_app, ["predictions", str(saved), "--out", str(tmp_path / "p.jsonl")])
    assert res.exit_code == 0, res.output
    assert _read(tmp_path / "p.jsonl")[0]["model_patch"] == "diff a1\n"
    monkeypatch.chdir(tmp_path)
    res = runner.invoke(swe_app, ["predictions", str(saved), "--oracle"], catch_exceptions=False)
    assert res.exit_code == 0 and "oracle" in res.output
    assert _read(tmp_path / "predictions.oracle-best-of-4.jsonl")[0]["model_patch"] == "diff a2"
    res = runner.invoke(swe_app, ["predictions", str(saved), "--select", "oracle"])
    assert res.exit_code != 0 and "--oracle" in res.output
