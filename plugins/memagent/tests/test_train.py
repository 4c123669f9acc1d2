"""``skyrl train`` on the memagent examples: the scripted oracle is refused (a benchmark fixture cannot be trained
with), and the SmolLM2 example builds the short contexts its training figure assumes."""

from __future__ import annotations

import json

import pytest



async def test_skyrl_train_refuses_the_scripted_oracle(tmp_path, tokenizer, rows):
    """The oracle ignores weight updates, so a run "training" on its rollouts trains nothing it samples from;
    before #31 it registered as an engine and this run took a step. Now no config can name it, and a training
    run handed it stops before its first rollout, naming it."""
    from skyrl_core.config import load_config
    from skyrl_core.errors import ConfigError, UnknownComponentError
    from skyrl_core.plugins import get_plugins, get_registry
    from skyrl_core.rollout import RolloutSession
    from skyrl_core.training import TrainRun
    from skyrl_memagent.oracle import OraclePolicy

    assert "memagent_oracle" not in get_registry().names("inference_engines")
    assert "memagent_oracle" not in get_plugins().infos["memagent"].capabilities["inference_engines"]
    with pytest.raises(UnknownComponentError, match="no inference engine named 'memagent_oracle'"):
        get_registry().get("inference_engines", "memagent_oracle")
    cfg = load_config("memagent:ruler-hotpotqa", ["train.steps=1", "train.batch_size=1"])

    async def with_the_oracle(config):
        return await RolloutSession.create(config, engine=OraclePolicy(tokenizer, rows))

    with pytest.raises(ConfigError, match="'memagent_oracle' is a scripted policy"):
        await TrainRun(cfg, tmp_path / "run", session_factory=with_the_oracle).run()
    assert not (tmp_path / "run" / "metrics.jsonl").exists()


async def test_the_smollm2_example_builds_short_contexts_with_the_worked_example(tokenizer):
    """memagent:smollm2 (the config of the README's SmolLM2 training figure) loads, and its
    contexts are what the figure assumes: 2-3 sections of at most 512 tokens, the worked example first, prompts
    far below the context window, the shaped verifier registered."""
    import attrs

    from skyrl_core.default_plugins.chat.template import ChatFormat
    from skyrl_core.config import load_config
    from skyrl_core.plugins import get_registry
    from skyrl_memagent.data import ensure_document
    from skyrl_memagent.tasks import build_memagent_instructions, memagent_hotpotqa_task

    cfg = load_config("memagent:smollm2")
    task = cfg.tasks[0]
    assert task.verifier == "hotpotqa_f1_progress" and get_registry().get("verifiers", task.verifier) is not None
    assert cfg.sampling.n_samples >= 2  # groups, so rloo advantages can be nonzero
    instances = memagent_hotpotqa_task.select(attrs.evolve(task.data, limit=3))
    chat = ChatFormat(tokenizer)
    for inst in instances:
        chunks = ensure_document(inst).chunks
        assert 2 <= len(chunks) <= 3 and all(len(tokenizer.encode(c)) <= 512 for c in chunks)
        messages = await build_memagent_instructions(inst)
        assert messages[2]["tool_calls"][0]["function"]["name"] == "next"
        assert len(chat.start(messages)) < cfg.agent.max_context_tokens // 2

