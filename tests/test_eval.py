"""``skyrl eval``: pass@k, the metrics summary, the written files, and the command end to end on GSM8K."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from skyrl_core.default_plugins.eval import run_problems
from skyrl_core.default_plugins.viewer.render import pick, trajectory_markdown
from skyrl_core.default_plugins.eval.run import error_messages, eval_metrics, pass_at_k, write_outputs
from skyrl_core.transitions import Trajectory, Transition

REPO = Path(__file__).resolve().parents[1]


def test_pass_at_k_is_the_unbiased_estimator():
    assert pass_at_k(4, 1, 1) == pytest.approx(0.25)
    assert pass_at_k(4, 1, 2) == pytest.approx(1 - 3 / 6)  # 1 - C(3,2)/C(4,2)
    assert pass_at_k(4, 0, 4) == 0.0 and pass_at_k(4, 4, 1) == 1.0 and pass_at_k(4, 3, 2) == 1.0
    with pytest.raises(ValueError, match="pass@3 needs at least 3 samples"):
        pass_at_k(2, 1, 3)


def _traj(inst: str, k: int, reward: float, reason: str, calls: dict, n_in: int = 10, n_out: int = 4) -> Trajectory:
    t = Trajectory(instance_id=inst, sample_index=k, task="gsm8k", group_id=f"gsm8k:{inst}", reward=reward,
                   finish_reason=reason, tool_calls=calls, turns=len(calls) or 1,
                   masked=reason in ("max_turns", "error_run"),
                   messages=[{"role": "user", "content": f"question {inst} <b>&"},
                             {"role": "assistant", "content": "answer"}])
    t.transitions = [Transition(input_ids=list(range(n_in)), output_ids=list(range(n_out)),
                                output_logprobs=[-0.5] * n_out, finish_reason="stop")]
    return t


TRAJS = [_traj("a", 0, 1.0, "finished", {"python": 1, "finish": 1}),
         _traj("a", 1, 0.0, "max_turns", {"python": 3}),
         _traj("b", 0, 0.0, "no_tool_call", {}),
         _traj("b", 1, 0.0, "error_run", {"finish": 1})]


def test_eval_metrics_counts():
    m = eval_metrics(TRAJS, wall_s=12.5, dispatch={"n_ok": 4, "timeline": {"t": [0.0]}})
    assert m["n_instances"] == 2 and m["n_samples"] == 2 and m["n_trajectories"] == 4
    assert m["pass@1"] == pytest.approx((0.5 + 0.0) / 2)
    assert m["pass@2"] == pytest.approx((1.0 + 0.0) / 2)
    assert m["finish_reasons"] == {"finished": 1, "max_turns": 1, "no_tool_call": 1, "error_run": 1}
    assert m["tool_calls"] == {"finish": 2, "python": 4}
    assert m["mean_turns"] == pytest.approx((2 + 1 + 1 + 1) / 4)
    assert m["tokens_in"] == 40 and m["tokens_out"] == 16 and m["llm_calls"] == 4
    assert m["masked"] == 0.5 and m["wall_s"] == 12.5
    assert m["dispatch"] == {"n_ok": 4}  # the timeline is left out


def test_eval_metrics_averages_numeric_trajectory_metrics():
    trajs = [_traj("a", 0, 1.0, "finished", {}), _traj("a", 1, 0.0, "finished", {}), _traj("b", 0, 0.0, "finished", {})]
    trajs[0].metrics = {"em": 1.0, "f1": 1.0, "cache_hits": 2, "priority": 9.0, "model_patch": "diff"}
    trajs[1].metrics = {"em": 0.0, "f1": 0.5, "cache_hits": 0, "ok": True}
    trajs[2].metrics = {"f1": float("nan")}
    means = eval_metrics(trajs, wall_s=1.0)["trajectory_metrics"]
    # each key over the trajectories that have a finite number for it; strings and the dispatcher's priority skipped
    assert means == {"cache_hits": 1.0, "em": 0.5, "f1": 0.75, "ok": 1.0}
    assert "trajectory_metrics" not in eval_metrics(TRAJS, wall_s=1.0)


def test_written_files(tmp_path):
    m = eval_metrics(TRAJS, wall_s=1.0)
    from skyrl_core.config import Config, LoggingConfig

    # trajectories.html comes from the built-in viewer plugin's eval writer, sized by logging.trajectories_html
    paths = write_outputs(tmp_path, TRAJS, m, config=Config(logging=LoggingConfig(trajectories_html=3)))
    rows = [json.loads(line) for line in paths["trajectories"].read_text().splitlines()]
    assert [r["id"] for r in rows] == [t.id for t in TRAJS]
    assert rows[0]["transitions"][0]["output_logprobs"] == [-0.5] * 4
    assert rows[0]["reward"] == 1.0 and rows[1]["finish_reason"] == "max_turns"
    assert json.loads(paths["metrics"].read_text())["pass@2"] == pytest.approx(0.5)
    page = paths["html"].read_text()
    assert page.count("<h2 id=") == 3
    assert "question a &lt;b&gt;&amp;" in page and "question a <b>&" not in page  # escaped
    assert "3 of 4 trajectories" in page
    assert f"pass@1 {m['pass@1']:.3g}" in page  # the summary line, from the metrics.json written before the writers ran
    # both rewarded and unrewarded trajectories are picked
    assert [t.reward for t in pick(TRAJS, 2)] == [1.0, 0.0]
    md = trajectory_markdown(TRAJS[1])
    assert "finish reason `max_turns` (masked)" in md and "python×3" in md


def test_eval_command_reports_a_bad_config_without_a_traceback(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("agent: {max_turnz: 3}\n")
    proc = subprocess.run([sys.executable, "-m", "skyrl_core.cli", "eval", str(bad)], capture_output=True, text=True,
                          cwd=REPO, env={**os.environ, "SKYRL_LOAD_PLUGINS": ""}, timeout=120)
    assert proc.returncode == 2
    assert "unknown config key 'agent.max_turnz'" in proc.stderr and "did you mean 'max_turns'" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_error_summary_names_the_first_message_of_each_kind():
    failed = []
    for i, error in enumerate(["init raised WebOptionsError: search.provider 'bing' is not one of local_web, serper",
                               "init raised WebOptionsError: search.provider 'bing' is not one of local_web, serper",
                               "engine call timed out after 5 s (engine.timeout_s)", "x" * 900]):
        t = _traj(str(i), 0, 0.0, "error_init", {}, n_in=0, n_out=0)
        t.turns, t.error, t.transitions = 0, error, []
        failed.append(t)
    messages = error_messages(failed)
    assert messages[0] == "init raised WebOptionsError: search.provider 'bing' is not one of local_web, serper"
    assert messages[1:] == ["engine call timed out after 5 s (engine.timeout_s)", "x" * 297 + "..."]
    lines, bad = run_problems(eval_metrics(failed, 1.0))
    assert bad and lines[0] == "no trajectory could run: all 4 ended before the model's first answer"
    assert "the verifier ran on none of the 4 trajectories" in lines[-1]
    lines, bad = run_problems(eval_metrics(TRAJS, 1.0))  # they ran; no verifier outcomes recorded in _traj
    assert not bad and not any(line.startswith("no trajectory") for line in lines)


def test_eval_where_no_trajectory_could_run_exits_nonzero_and_says_why(tmp_path, tiny_chat_model_dir):
    """Every trajectory failing at set-up gave rc 0 and ``init raised FileNotFoundError: 2``; now rc 1 and the
    message naming the culprit."""
    out = tmp_path / "eval"
    proc = subprocess.run(
        [sys.executable, "-m", "skyrl_core.cli", "eval", str(REPO / "examples" / "gsm8k.yaml"), "data.limit=2",
         f"model={tiny_chat_model_dir}", "engine.device=cpu", f"runtime.source={tmp_path / 'no-such-dir'}",
         "--output", str(out)],
        capture_output=True, text=True, cwd=REPO, env={**os.environ, "SKYRL_LOAD_PLUGINS": "", "COLUMNS": "200"},
        timeout=600)
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "no trajectory could run: all 2 ended before the model's first answer" in proc.stdout
    assert f"init raised FileNotFoundError: [Errno 2] No such file or directory: '{tmp_path / 'no-such-dir'}'" \
        in proc.stdout
    assert "the verifier ran on none of the 2 trajectories" in proc.stdout
    assert json.loads((out / "metrics.json").read_text())["trajectories_run"] == 0


async def test_a_slow_queue_is_not_a_timeout_only_a_stall_is(tmp_path, tiny_chat_model_dir):
    """engine.timeout_s bounded one call's wall time, queueing included: three 600-token calls through one
    batch slot with a 2 s limit timed out (the third waits for two whole calls). It bounds a stall now: every
    call is answered, each to its max_tokens."""
    from skyrl_core.config import load_config
    from skyrl_core.default_plugins.eval.run import run_eval

    cfg = load_config(str(REPO / "examples" / "gsm8k.yaml"),
                      ["data.limit=3", f"model={tiny_chat_model_dir}", "engine.device=cpu", "engine.max_batch=1",
                       "engine.timeout_s=2", "agent.max_turns=1", "agent.max_context_tokens=2048",
                       "sampling.max_tokens=600", "dispatcher.max_parallel_agents=3"])
    metrics = await run_eval(cfg, tmp_path)
    assert metrics["finish_reasons"] == {"max_tokens": 3}, metrics.get("error_messages")
    assert metrics["tokens_out"] == 3 * 600


@pytest.mark.slow
def test_skyrl_eval_on_gsm8k_end_to_end(tmp_path):
    """The real command: real GSM8K problems (the bundled copy), the real model and sandbox, files written, table
    printed."""
    out = tmp_path / "eval"
    proc = subprocess.run(
        [sys.executable, "-m", "skyrl_core.cli", "eval", str(REPO / "examples" / "gsm8k.yaml"), "data.limit=2",
         "sampling.n_samples=1", "sampling.max_tokens=24", "agent.max_turns=2", "--output", str(out)],
        capture_output=True, text=True, cwd=REPO, env={**os.environ, "SKYRL_LOAD_PLUGINS": "", "COLUMNS": "200"},
        timeout=900)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "pass@1" in proc.stdout and "finish_reasons" in proc.stdout
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["n_trajectories"] == 2 and metrics["llm_calls"] >= 2
    assert sum(metrics["finish_reasons"].values()) == 2
    rows = [json.loads(line) for line in (out / "trajectories.jsonl").read_text().splitlines()]
    assert "Janet" in rows[0]["messages"][1]["content"]
    t0 = rows[0]["transitions"][0]
    assert len(t0["output_logprobs"]) == len(t0["output_ids"]) > 0
    assert "Janet" in (out / "trajectories.html").read_text()
    # the re-tokenisation drift check runs by default in eval (agent.drift_check: eval)
    assert all("retok_drift" in row["metrics"] for row in rows)
    assert metrics["retok_drift"]["trajectories"] == sum(bool(row["metrics"]["retok_drift"]) for row in rows)
