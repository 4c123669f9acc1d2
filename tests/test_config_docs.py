"""docs/config.md names every config key, so the reference cannot silently fall behind the schema."""

from pathlib import Path

import attrs

from skyrl_core import config as C

DOC = (Path(__file__).resolve().parents[1] / "docs" / "config.md").read_text()


def test_every_config_key_is_documented():
    missing = []
    for cls in (C.Config, C.EngineConfig, C.TaskConfig, C.AgentConfig, C.HintsConfig, C.SamplingConfig,
                C.DispatcherConfig, C.BackendConfig, C.LoraConfig, C.TrainConfig, C.LoggingConfig,
                C.EvalConfig):
        for field in attrs.fields(cls):
            if f"| `{field.name}` |" not in DOC:
                missing.append(f"{cls.__name__}.{field.name}")
    assert not missing, f"add these keys to docs/config.md (regenerate it): {missing}"
