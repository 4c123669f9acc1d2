"""With the real SmolLM2-135M-Instruct: the two-stage summary of a long page, the LLM judge (whose unparseable
verdict must be an error, not a 0), ``skyrl eval`` of 10 HotpotQA questions on the local web and ``skyrl curate``
on that saved eval."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from skyrl_core import Instance, ToolContext, Trajectory
from skyrl_core.runtime import RuntimeSpec

REPO = Path(__file__).resolve().parents[3]
SMOLLM2 = {"model": "smollm2-135m-instruct", "engine": {"type": "hf", "max_batch": 4, "device": "cpu"}}

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread():
    torch = pytest.importorskip("torch")
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


async def test_a_long_page_is_summarised_in_two_stages_and_keeps_its_source(tmp_path):
    from skyrl_deep_research.runtime import WebRuntime
    from skyrl_deep_research.tools import open_page_tool

    rt = WebRuntime(RuntimeSpec(type="web", options={
        "search": "local", "open_page": "local", "summarizer": SMOLLM2, "summary_threshold_chars": 1000,
        "chunk_chars": 2000, "summary_max_tokens": 16, "cache": {"path": str(tmp_path / "c.sqlite")}}))
    await rt.start()
    url = "https://en.wikipedia.org/wiki/Jim_Lentz"  # 2367 characters: two chunks of at most 2000
    out = await open_page_tool.call({"url": url, "goal": "his positions at Toyota"}, ToolContext(runtime=rt))
    assert not out.error and out.metadata["summarised"] is True
    from skyrl_deep_research.summary import chunk_text

    n_chunks = len(chunk_text(rt.reader.corpus.get("Jim Lentz").text, 2000))
    assert n_chunks == 2
    assert f"Source: {url} (parts used:" in out.output and f"of {n_chunks})" in out.output
    assert out.output.endswith(f"[source: {url}]") and rt.metrics["summaries"] == 1
    # the same page and goal again: the summary comes from the cache
    again = await open_page_tool.call({"url": url, "goal": "His positions at  Toyota"}, ToolContext(runtime=rt))
    assert again.output == out.output and rt.metrics["cache_hits"] == 2


async def test_the_judge_model_s_unparseable_verdict_is_unverifiable_not_a_zero():
    """SmolLM2-135M does not answer in the verdict format (measured: it writes a sentence), for the control
    question (the gold answer) either, so llm_judge's verdict is unverifiable, which the rollout turns into
    error_eval (masked); a larger judge model is needed for rewards."""
    from skyrl_deep_research.verifiers import llm_judge

    class Runtime:
        options = {"judge": SMOLLM2}

        def trajectory_metrics(self):
            return {}

    traj = Trajectory(instance_id="q", sample_index=0, task="hotpotqa", group_id="g")
    traj.answer = "GmbH"
    inst = Instance(id="q", data={"question": "What does GmbH stand for?",
                                  "answers": ["Gesellschaft mit beschränkter Haftung"]})
    result = await llm_judge(traj, Runtime(), inst)
    assert result.outcome == "unverifiable" and "the control question (the gold answer) failed too" in result.reason
    assert "judge reply is not exactly one 'VERDICT" in result.reason


def _skyrl(*args: str, timeout: int = 1500) -> subprocess.CompletedProcess:
    env = {**os.environ, "SKYRL_LOAD_PLUGINS": "skyrl-deep-research", "OMP_NUM_THREADS": "1", "COLUMNS": "160"}
    return subprocess.run([sys.executable, "-m", "skyrl_core.cli", *args], capture_output=True, text=True, env=env,
                          timeout=timeout, cwd=REPO)


def test_eval_of_10_questions_on_the_local_web_then_curate(tmp_path):
    out = tmp_path / "eval"
    cache = tmp_path / "web-cache.sqlite"
    proc = _skyrl("eval", "deep-research:hotpotqa", "eval_data.limit=10",
                  f"tasks.0.runtime.options.cache.path={cache}", "--output", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["n_trajectories"] == 10 and "tool_calls_per_trajectory" in metrics
    # the research_codeblock parser and the few-shot builder make the 135M model search (measured: 10 of 10)
    assert metrics["tool_calls"].get("web_search", 0) >= 5
    traj_metrics = metrics["trajectory_metrics"]
    assert {"em", "f1", "answered", "cache_hits", "cache_misses", "search_queries", "blocked"} <= set(traj_metrics)
    assert 0.0 <= traj_metrics["f1"] <= 1.0 and traj_metrics["em"] == pytest.approx(metrics["reward_mean"])
    rows = [json.loads(line) for line in (out / "trajectories.jsonl").read_text().splitlines()]
    for r in rows:
        m = r["metrics"]
        lookups = m["cache_hits"] + m["cache_misses"]
        assert lookups >= m["search_queries"]  # every query searched is looked up in the cache first
        assert ("cache_hit_rate" in m) == (lookups > 0)
        assert m["search_queries"] <= 5 * r["tool_calls"].get("web_search", 0)

    curated = tmp_path / "curated.jsonl"
    proc = _skyrl("curate", "deep-research:hotpotqa", "eval_data.limit=10", "--from-eval", str(out),
                  "--split", "eval", "--mix", "impossible=1,easy=1", "--output", str(curated), timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "before: 10 question(s)" in proc.stdout
    solved = sum(r["reward"] >= 1.0 for r in rows)
    kept = [json.loads(line) for line in curated.read_text().splitlines()]
    assert len(kept) == 2 * min(solved, 10 - solved)
    assert all(r["curation"]["band"] in ("impossible", "easy") and r["question"] for r in kept)
