"""The scaffold end to end, independently of model quality: the scripted oracle policy (``memagent_oracle``)
through the real rollout session, agent loop, chat template, ``next`` tool and verifier, at 8k and 28k tokens;
the forgetful control fails; the training batch has one datum per context with the trajectory's advantage and
the tokens exactly as generated."""

from __future__ import annotations


import pytest

from skyrl_core.config import load_config
from skyrl_core.postprocess import build_training_batch
from skyrl_core.rollout import RolloutSession
from skyrl_memagent.data import ensure_document
from skyrl_memagent.oracle import OraclePolicy

EXAMPLE = "memagent:ruler-hotpotqa"  # shipped in skyrl_memagent/examples/, taken by name


async def rollout(tokenizer, rows, overrides, forget=False):
    # max_tokens: room for the oracle's memory (up to 512 tokens) in one call
    cfg = load_config(EXAMPLE, ["sampling.n_samples=1", "sampling.max_tokens=768", "agent.max_turns=40", *overrides])
    engine = OraclePolicy(tokenizer, rows, forget=forget)
    session = await RolloutSession.create(cfg, engine=engine)
    try:
        items = session.load_instances("eval")
        trajectories, _ = await session.rollout(items, 1)
    finally:
        await session.close()
    return items, trajectories


@pytest.mark.parametrize("target,chunk", [(8192, 2048), (28672, 4096)])
async def test_the_oracle_answers_every_question_and_the_forgetful_one_does_not(tokenizer, rows, target, chunk):
    opts = [f"eval_data.options.target_tokens={target}", f"eval_data.options.chunk_tokens={chunk}",
            "eval_data.options.memory_tokens=512", "eval_data.limit=4"]
    items, trajs = await rollout(tokenizer, rows, opts)
    assert [t.finish_reason for t in trajs] == ["finished"] * 4, [t.error for t in trajs]
    assert [t.reward for t in trajs] == [1.0] * 4
    for (_, inst), t in zip(items, trajs):
        n = len(ensure_document(inst).chunks)
        assert n >= target // chunk
        assert t.tool_calls == {"next": n, "finish": 1}
        assert t.metrics["contexts"] == n + 1 and t.metrics["chunks"] == n
        assert [tr.new_context for tr in t.transitions] == [False] + [True] * n
        # every context is small although the document is not: system + question + memory + one chunk
        assert max(len(tr.input_ids) for tr in t.transitions) < chunk + 1200
    _, forgot = await rollout(tokenizer, rows, opts, forget=True)
    # the same policy keeping no memory across contexts cannot answer: the memory carries the evidence
    assert sum(t.reward for t in forgot) <= 1.0  # (only where both gold paragraphs fall in the last chunk)


async def test_one_datum_per_context_with_the_trajectorys_advantage(tokenizer, rows):
    opts = ["eval_data.options.target_tokens=8192", "eval_data.options.chunk_tokens=2048",
            "eval_data.options.memory_tokens=512", "eval_data.limit=2"]
    _, good = await rollout(tokenizer, rows, opts)
    _, bad = await rollout(tokenizer, rows, opts, forget=True)
    for k, t in enumerate(bad):
        t.sample_index = 1  # the second sample of the same group
    trajs = good + bad
    assert all(t.reward == 1.0 for t in good) and all(t.reward == 0.0 for t in bad)
    batch = build_training_batch(trajs, advantage="rloo")
    by_traj: dict[str, list] = {}
    for d in batch.data:
        by_traj.setdefault(d.trajectory_id, []).append(d)
    assert set(by_traj) == {t.id for t in trajs}
    for t in trajs:
        data = by_traj[t.id]
        assert len(data) == t.metrics["contexts"] == 1 + t.tool_calls["next"]  # one datum per context
        assert len({d.advantage for d in data}) == 1  # every datum carries its trajectory's advantage
        assert data[0].advantage == (1.0 if t.reward == 1.0 else -1.0)  # RLOO in a group of two
        assert [d.is_last_step for d in data] == [False] * (len(data) - 1) + [True]
        for d, tr in zip(data, t.transitions):  # tokens exactly as sent and generated
            assert d.prompt_ids == tr.input_ids
            assert [x for x, m in zip(d.response_ids, d.response_mask) if m] == tr.output_ids
            assert d.num_calls == 1
    assert batch.metrics["data"] == sum(t.metrics["contexts"] for t in trajs)
    assert batch.metrics["trajectories"] == 4


def test_the_scaffold_check_command_labels_its_figure_as_a_scaffold_check(tmp_path):
    """`skyrl memagent scaffold-check` (the only way to run the oracle since it left the engine registry) with the
    example's own settings: its metrics say which scripted policy ran and that the figure is no model's score."""
    import json

    from typer.testing import CliRunner

    from skyrl_core.plugins import get_registry

    app = get_registry().get("commands", "memagent")
    res = CliRunner().invoke(app, ["scaffold-check", EXAMPLE, "sampling.n_samples=1", "eval_data.limit=2",
                                   "--output", str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert "scaffold check with the scripted policy 'memagent_oracle'" in res.output
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert metrics["scaffold_check"]["policy"] == "memagent_oracle" and "not a model" in metrics["scaffold_check"]["note"]
    assert metrics["n_instances"] == 2 and metrics["finish_reasons"] == {"finished": 2}
