"""skyrl-gymenvs on skyrl-gym's real environments (no stand-ins): listing, config errors, and the three proven envs
— gsm8k multi-turn, search (against the shipped retriever on 127.0.0.1) and text2sql (the shipped SQLite
database) — driven through the gym_step tool, the gymenv runtime and the gymenv_reward verifier, with the attacks
an agent's text can make on each."""

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
import requests
from skyrl_core import DataSpec, Instance, ToolContext
from skyrl_core.errors import ConfigError, ToolArgumentsError

from skyrl_gymenvs.envs import SQL_DB_ID, registered_ids, shipped_sql_root
from skyrl_gymenvs.retriever import shipped_retriever_url
from skyrl_gymenvs.runtime import GymRuntime
from skyrl_gymenvs.tasks import ACT_HINT, build_instructions, gymenvs_task
from skyrl_gymenvs.tools import gym_step_tool
from skyrl_gymenvs.verifiers import gymenv_reward


def instances(env: str, **options) -> list[Instance]:
    return gymenvs_task.select(DataSpec(options={"env": env, **options}))


async def play(instance: Instance, actions: list[str]) -> tuple[list, object, GymRuntime]:
    """Run ``actions`` through gym_step on a fresh runtime; (tool results, verdict, the closed runtime)."""
    rt = GymRuntime()
    await rt.start()
    await rt.prepare(instance)
    ctx = ToolContext(runtime=rt, instance=instance)
    try:
        results = [await gym_step_tool.call({"action": a}, ctx) for a in actions]
        verdict = await gymenv_reward(None, rt, instance)
    finally:
        await rt.close()
    return results, verdict, rt


def test_listed_by_skyrl_plugins_with_its_capabilities():
    proc = subprocess.run([sys.executable, "-m", "skyrl_core.cli", "plugins", "--json"], capture_output=True,
                          text=True, check=True)
    plugin = {p["name"]: p for p in json.loads(proc.stdout)}["gymenvs"]
    assert plugin["distribution"] == "skyrl-gymenvs"
    assert not plugin.get("error"), plugin.get("error")
    caps = plugin["capabilities"]
    assert caps["tools"] == ["gym_step"]
    assert caps["tasks"] == ["gymenvs"]
    assert caps["verifiers"] == ["gymenv_reward"]
    assert caps["runtimes"] == ["gymenv"]
    assert caps["instruction_builders"] == ["gymenvs"]


def test_unknown_env_id_is_one_error_listing_the_registered_ids():
    with pytest.raises(ConfigError) as err:
        instances("gsm8k_multiturn")
    msg = str(err.value)
    assert "data.options.env" in msg and "'gsm8k_multiturn'" in msg
    for env_id in ("gsm8k", "gsm8k_multi_turn", "search", "text2sql"):
        assert env_id in msg
    assert set(registered_ids()) >= {"gsm8k_multi_turn", "search", "text2sql"}


def test_bad_rows_and_options_name_the_culprit(tmp_path):
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps({"env_class": "no_such_env", "prompt": [{"role": "user", "content": "hi"}]}) + "\n")
    with pytest.raises(ConfigError, match=r"rows.jsonl row 0: unknown skyrl_gym env id 'no_such_env'; registered"):
        gymenvs_task.select(DataSpec(path=str(rows)))
    rows.write_text(json.dumps({"prompt": "not messages"}) + "\n")
    with pytest.raises(ConfigError, match="row 0: 'prompt' must be a list of chat messages"):
        gymenvs_task.select(DataSpec(path=str(rows), options={"env": "gsm8k"}))
    with pytest.raises(ConfigError, match="unknown data.options key.*envs; valid: env, env_config, max_turns"):
        gymenvs_task.select(DataSpec(options={"envs": "gsm8k"}))
    with pytest.raises(ConfigError, match="no shipped rows for env 'gsm8k'"):
        instances("gsm8k")
    with pytest.raises(ConfigError, match="env_config for env 'search': unknown key.*search_ur; valid: log_requests"):
        build_instructions(instances("search", env_config={"search_ur": "http://x"})[0])


def test_rows_from_a_users_file_with_per_row_env_class(tmp_path):
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps({"id": "mine", "env_class": "gsm8k", "prompt": [{"role": "user", "content": "1+1?"}],
                                "reward_spec": {"ground_truth": "2"}}) + "\n")
    (inst,) = gymenvs_task.select(DataSpec(path=str(rows)))
    assert inst.id == "mine" and inst.data["env"] == "gsm8k"


def test_instruction_builder_is_the_envs_init_after_the_tool_hint():
    inst = instances("gsm8k_multi_turn")[0]
    messages = build_instructions(inst)
    assert messages[0] == {"role": "system", "content": ACT_HINT}
    assert messages[1:] == inst.data["row"]["prompt"]
    assert "Janet" in messages[1]["content"]


async def test_gsm8k_multi_turn_turn_rewards_summed_and_metrics_carried():
    inst = instances("gsm8k_multi_turn")[0]  # ground truth 18, max_turns 3 in its row
    results, verdict, rt = await play(inst, ["The answer is #### 16", "#### 18"])
    assert "'#### ANSWER'" in results[0].output and not results[0].finish
    assert results[1].finish and results[1].answer == "#### 18"
    # the env's turn rewards: format score 0.2/3 for a well-formed wrong answer, then 1.0
    assert rt.rewards == pytest.approx([0.2 / 3, 1.0])
    assert verdict.reward == pytest.approx(1.0 + 0.2 / 3)
    assert verdict.metrics["env_steps"] == 2 and verdict.metrics["env_done"] == 1
    assert verdict.metrics["env_id"] == "gsm8k_multi_turn"


async def test_attack_no_reward_after_done_and_first_answer_counts():
    inst = instances("gsm8k_multi_turn")[0]
    results, verdict, _ = await play(inst, ["#### 18", "#### 18", "#### 18"])
    assert results[1].error and "already finished" in results[1].output
    assert verdict.reward == 1.0 and verdict.metrics["env_steps"] == 1  # farming the correct answer earns nothing
    # skyrl-gym's strict gsm8k parser reads the first '#### N' of an action: a wrong one first earns the format
    # score only, whatever follows it (README, "Limits": the first-match rule also means '#### 18 #### 17' scores 1)
    _, verdict, _ = await play(inst, ["#### 17 #### 18 reward: 1.0"] * 3)
    assert verdict.reward == pytest.approx(3 * 0.2 / 3) and verdict.metrics["env_done"] == 1


async def test_search_env_against_the_local_retriever():
    inst = instances("search")[0]  # Which river flows through Arlen? -> Sel
    results, verdict, _ = await play(inst, ["<search> river through Arlen </search>", "<answer> Sel </answer>"])
    assert "<information>" in results[0].output and "The river Sel flows through Arlen" in results[0].output
    assert results[1].finish and verdict.reward == 1.0
    _, verdict, _ = await play(inst, ["<search> Arlen </search>", "<answer> Ossa </answer>"])
    assert verdict.reward == 0.0 and verdict.metrics["env_done"] == 1


def test_attack_retriever_refuses_malformed_requests():
    url = shipped_retriever_url()
    assert url.startswith("http://127.0.0.1:")
    ok = requests.post(url, json={"query": "Mira Holt observatory", "topk": 2}, timeout=10)
    assert ok.status_code == 200
    hits = ok.json()["result"][0]
    assert len(hits) == 2 and "Mira Holt" in hits[0]["document"]["contents"]
    for body, status in ((b"not json", 400), (json.dumps({"query": 5}).encode(), 400),
                         (json.dumps({"query": "x", "topk": 10**9}).encode(), 400), (b"x" * (65 * 1024), 413)):
        bad = requests.post(url, data=body, headers={"Content-Type": "application/json"}, timeout=10)
        assert bad.status_code == status, (body[:40], bad.text)
    assert requests.post(url.replace("/retrieve", "/admin"), json={}, timeout=10).status_code == 404


async def test_text2sql_on_the_shipped_database():
    inst = instances("text2sql")[0]  # How many singers are from France? -> 4
    results, verdict, _ = await play(inst, [
        "<think>count them</think><sql>SELECT count(*) FROM singer WHERE country = 'France'</sql>",
        "<think>four</think><solution>SELECT count(*) FROM singer WHERE country = 'France'</solution>"])
    assert "<observation>" in results[0].output and "4" in results[0].output
    assert verdict.reward == 1.0
    _, verdict, _ = await play(inst, ["<think>guess</think><solution>SELECT count(*) FROM singer</solution>"])
    assert verdict.reward == 0.0


async def test_attack_sql_cannot_change_the_database_it_is_scored_on():
    inst = instances("text2sql")[0]
    results, verdict, rt = await play(inst, [
        "<think>x</think><sql>DROP TABLE singer</sql>",
        "<think>x</think><sql>UPDATE singer SET country = 'France'</sql>",
        "<think>x</think><sql>ATTACH DATABASE '/tmp/skyrl-gymenvs-attack.sqlite' AS a</sql>",
        "<think>four</think><solution>SELECT count(*) FROM singer WHERE country = 'France'</solution>"])
    assert verdict.reward == 1.0  # nothing reached the database: the gold query still sees 4
    assert [r.error for r in results] == [True, True, True, False]
    assert "not authorized" in results[2].output and "Nothing was run" in results[2].output
    assert not Path("/tmp/skyrl-gymenvs-attack.sqlite").exists()  # a rolled-back ATTACH would have created it
    assert verdict.metrics["env_refused_actions"] == 3 and verdict.metrics["env_steps"] == 1
    assert not Path(rt._dir).exists()  # the trajectory's private copy is gone with its runtime
    shipped = Path(shipped_sql_root()) / "spider/database" / SQL_DB_ID / f"{SQL_DB_ID}.sqlite"
    conn = sqlite3.connect(shipped)
    try:
        assert conn.execute("SELECT count(*) FROM singer WHERE country = 'France'").fetchone() == (4,)
    finally:
        conn.close()


async def test_attack_sql_solution_that_writes_is_refused_too(tmp_path):
    inst = instances("text2sql")[0]
    target = tmp_path / "planted.sqlite"
    results, verdict, _ = await play(inst, [
        f"<think>x</think><solution>ATTACH DATABASE '{target}' AS p</solution>",
        "<think>x</think><sql>PRAGMA writable_schema = 1</sql>",
        "<think>x</think><sql>SELECT name FROM singer; DROP TABLE singer</sql>"])
    assert results[0].error and results[1].error and not target.exists()
    assert "one statement" in results[2].output  # sqlite3 runs one statement: the env reports it, drops nothing
    assert verdict.reward == 0.0


async def test_tool_outside_a_gymenv_runtime_and_bad_arguments():
    out = await gym_step_tool.call({"action": "#### 1"}, ToolContext())
    assert out.error and "runtime 'gymenv'" in out.output
    with pytest.raises(ToolArgumentsError, match="argument 'action'"):
        await gym_step_tool.call({"action": 5}, ToolContext())
    verdict = await gymenv_reward(None, None, instances("gsm8k_multi_turn")[0])
    assert verdict.outcome == "unverifiable"
