"""The VeRL launcher: skyrl config -> VeRL's composed Hydra config, errors naming the skyrl key, documented keys,
the task parquet, and the plugin's registrations."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from skyrl_core.config import config_from_dict, load_config
from skyrl_core.errors import ConfigError
from skyrl_verl.launcher import KEY_MAP, build_verl_config, verl_overrides, write_task_parquet

PLUGIN = Path(__file__).resolve().parents[1]
EXAMPLE = "verl:gsm8k"  # shipped in skyrl_verl/examples/, taken by name


def _cfg(**sections):
    base = {"engine": {"type": "vllm"}, "backend": {"type": "verl"}}
    for key, value in sections.items():
        base[key] = {**base.get(key, {}), **value} if isinstance(value, dict) else value
    return config_from_dict(base)


@pytest.fixture(scope="module")
def composed():
    config = load_config(EXAMPLE, ["engine=vllm", "backend.tis_cap=2.5", "backend.kl_coef=0.01", "backend.clip_high=0.28"])
    return config, build_verl_config(config, n_gpus_per_node=2)


def test_example_composes_into_verl_config(composed):
    config, cfg = composed
    a, r = cfg.actor_rollout_ref.actor, cfg.actor_rollout_ref.rollout
    assert r.name == "vllm" and r.mode == "async"
    assert r.n == config.sampling.n_samples and r.temperature == config.sampling.temperature
    assert r.agent.default_agent_loop == "skyrl"
    assert cfg.data.train_batch_size == config.train.batch_size
    assert cfg.data.max_prompt_length == cfg.data.max_response_length == config.agent.max_context_tokens
    assert r.prompt_length == config.agent.max_context_tokens  # VeRL's interpolation follows
    assert cfg.algorithm.adv_estimator == config.backend.advantage
    assert a.optim.lr == pytest.approx(config.backend.lr)
    assert (a.clip_ratio_low, a.clip_ratio_high) == (pytest.approx(config.backend.clip), pytest.approx(0.28))
    assert a.use_kl_loss is True and a.kl_loss_coef == pytest.approx(0.01) and a.kl_loss_type == "low_var_kl"
    assert cfg.algorithm.rollout_correction.rollout_is == "token"
    assert cfg.algorithm.rollout_correction.rollout_is_threshold == pytest.approx(2.5)
    assert a.ppo_mini_batch_size == config.train.batch_size // config.backend.mini_batches
    assert cfg.trainer.total_training_steps == config.train.steps and cfg.trainer.n_gpus_per_node == 2
    assert Path(cfg.actor_rollout_ref.model.path, "config.json").is_file()
    # the skyrl config rides along for the agent loop
    assert cfg.skyrl.tasks[0].name == config.tasks[0].name and cfg.skyrl.agent.max_turns == config.agent.max_turns


def test_verl_validates_the_composed_config(composed):
    """VeRL's own dataclass checks accept the actor, rollout and algorithm sections."""
    from verl.utils.config import omega_conf_to_dataclass

    _, cfg = composed
    actor = omega_conf_to_dataclass(cfg.actor_rollout_ref.actor)
    assert actor.clip_ratio_high == pytest.approx(0.28)
    algo = omega_conf_to_dataclass(cfg.algorithm)
    assert algo.adv_estimator == "grpo" or algo.adv_estimator == "rloo"
    rollout = omega_conf_to_dataclass(cfg.actor_rollout_ref.rollout)
    assert rollout.n == cfg.actor_rollout_ref.rollout.n


@pytest.mark.parametrize("sections, key", [
    ({"engine": {"type": "openai"}}, "engine.type"),
    ({"backend": {"advantage": "none"}}, "backend.advantage"),
    ({"backend": {"advantage": "rloo", "std_normalize": True}}, "backend.std_normalize"),
    ({"backend": {"mini_batches": 3}, "train": {"batch_size": 4}}, "backend.mini_batches"),
    ({"backend": {"lora": {"dropout": 0.1}}}, "backend.lora.dropout"),
    ({"backend": {"bf16": "off"}}, "backend.bf16"),
    ({"backend": {"options": {"loss_mode": "nope"}}}, "backend.options.loss_mode"),
    ({"backend": {"options": {"loss_agg_mode": "mean"}}}, "backend.options.loss_agg_mode"),
    ({"backend": {"options": {"lr_schedule": "cosine"}}}, "backend.options.lr_schedule"),
    ({"backend": {"options": {"verl_overrides": "trainer.nnodes=2"}}}, "backend.options.verl_overrides"),
])
def test_unsupported_settings_name_the_key(sections, key):
    with pytest.raises(ConfigError, match=re.escape(key)):
        verl_overrides(_cfg(**sections), train_files="t", val_files="v")


def test_raw_overrides_applied_last_and_bad_ones_rejected():
    cfg = build_verl_config(_cfg(backend={"options": {"verl_overrides": ["trainer.nnodes=3"]}}))
    assert cfg.trainer.nnodes == 3
    with pytest.raises(ConfigError, match="verl_overrides"):
        build_verl_config(_cfg(backend={"options": {"verl_overrides": ["trainer.no_such_key=1"]}}))


def test_every_mapped_key_is_documented_in_the_readme():
    readme = (PLUGIN / "README.md").read_text()
    missing = [m.skyrl for m in KEY_MAP if f"`{m.skyrl}`" not in readme]
    assert not missing, f"README lacks the mapping of {missing}"
    assert "```yaml" in readme and "backend: verl" in readme or "type: verl" in readme


def test_task_parquet_rows_name_task_and_instance(tmp_path):
    import pandas as pd

    config = load_config(EXAMPLE, ["data.limit=3"])
    n = write_task_parquet(config, "train", tmp_path / "train.parquet")
    df = pd.read_parquet(tmp_path / "train.parquet")
    assert n == len(df) == 3
    assert set(df["agent_name"]) == {"skyrl"} and set(df["data_source"]) == {config.tasks[0].name}
    first = df.iloc[0]
    assert first["extra_info"]["task_index"] == 0 and first["extra_info"]["instance_id"]
    assert first["extra_info"]["split"] == "train"
    assert any(m["role"] == "user" and m["content"] for m in first["prompt"])


def test_plugin_registers_backend_and_command(plugins):
    from skyrl_verl.factories import verl_backend

    reg = plugins.registry
    assert reg.get("backends", "verl") is verl_backend
    assert "verl" in reg.names("commands")
    assert plugins.infos["verl"].distribution == "skyrl-verl"
