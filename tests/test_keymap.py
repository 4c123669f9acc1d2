"""The key-mapping helper the VeRL and SkyRL-train launchers share (skyrl_core.default_plugins.trainer.keymap)."""

from __future__ import annotations

import pytest

from skyrl_core.config import config_from_dict
from skyrl_core.errors import ConfigError
from skyrl_core.default_plugins.trainer.keymap import hydra_overrides, model_path, task_rows


def test_hydra_overrides_write_values_as_hydra_reads_them():
    assert hydra_overrides({"trainer.logger": ["console", "wandb"], "a.b": True, "a.c": False, "x": None,
                            "optim.betas": (0.9, 0.98), "lr": 2e-06, "n": 8, "name": "vllm"}) == [
        "trainer.logger=[console,wandb]", "a.b=true", "a.c=false", "x=null", "optim.betas=[0.9,0.98]",
        "lr=2e-06", "n=8", "name=vllm"]


def test_model_path_names_the_key_and_the_upstream(tmp_path):
    assert model_path(str(tmp_path), "VeRL") == str(tmp_path.resolve())
    with pytest.raises(ConfigError, match=r"config key 'model': 'org/no-such-model' is neither a local Hugging Face "
                                          r"directory nor a bundled model VeRL can load"):
        model_path("org/no-such-model", "VeRL")
    assert model_path("org/no-such-model", "SkyRL-train", by_name=True) == "org/no-such-model"


def test_task_rows_build_prompts_and_name_an_empty_task(plugins):
    config = config_from_dict({"tasks": [{"name": "gsm8k", "data": {"split": "test", "limit": 2}}]})
    rows = list(task_rows(config, "train"))
    assert [(ti, name) for ti, name, _, _ in rows] == [(0, "gsm8k"), (0, "gsm8k")]
    assert rows[0][2].id != rows[1][2].id and rows[0][3][-1]["role"] == "user"
    empty = config_from_dict({"tasks": [{"name": "gsm8k", "data": {"split": "test", "offset": 10**6}}]})
    with pytest.raises(ConfigError, match=r"config key 'tasks.0' \(gsm8k\): no train instances"):
        list(task_rows(empty, "train"))
