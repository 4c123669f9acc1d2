"""Config: YAML -> typed config; unknown keys, wrong types, env interpolation, overrides."""

from __future__ import annotations

import pytest

from skyrl_core.config import Config, apply_override, config_from_dict, load_config
from skyrl_core.default_plugins.eval.overrides import command_check
from skyrl_core.errors import ConfigError


def write(tmp_path, text: str):
    path = tmp_path / "cfg.yaml"
    path.write_text(text)
    return path


def test_defaults_are_the_cpu_quickstart_shape():
    cfg = load_config(None)
    assert isinstance(cfg, Config)
    assert cfg.model == "smollm2-135m-instruct"
    assert (cfg.engine.type, cfg.dispatcher.type, cfg.backend.type) == ("hf", "async_pipeline", "local")
    assert cfg.backend.advantage == "rloo" and cfg.backend.std_normalize is False
    assert [t.name for t in cfg.tasks] == ["gsm8k"]


def test_yaml_file_with_shorthand_and_overrides(tmp_path):
    path = write(tmp_path, """
model: smollm2-135m-instruct
engine: hf
tasks:
  - name: gsm8k
    data: {split: test, limit: 64}
    tools: [python, finish]
    runtime: sandbox
agent: {max_turns: 8, hints: {turns_left: false}}
train: {steps: 20}
""")
    cfg = load_config(path, ["train.steps=1", "data.limit=4", "backend=verl", "agent.hints.repeated_action=0"])
    assert cfg.train.steps == 1
    assert cfg.tasks[0].data.limit == 4 and cfg.tasks[0].data.split == "test"
    assert cfg.tasks[0].runtime.type == "sandbox"
    assert cfg.backend.type == "verl" and cfg.backend.lr == 1e-6
    assert cfg.agent.hints.turns_left is False and cfg.agent.hints.repeated_action == 0


@pytest.mark.parametrize("overrides, message", [
    (["agent.max_turn=3"], "unknown config key 'agent.max_turn' (did you mean 'max_turns'?)"),
    (["tasks.0.data.limt=2"], "unknown config key 'tasks.0.data.limt' (did you mean 'limit'?)"),
    (["agent.on_no_tool_call=retry"], "config key 'agent.on_no_tool_call': must be one of stop, nudge"),
    (["tasks.0.agent={max_turn: 2}"], "unknown config key 'tasks.0.agent.max_turn' (did you mean 'max_turns'?)"),
    (["tasks.0.sampling={n_samples: 2}"], "'tasks.0.sampling.n_samples': n_samples is per run"),
    (["train.steps=abc"], "config key 'train.steps': expected int, got 'abc'"),
    (["tasks.0.agent={max_turns: many}"], "config key 'tasks.0.agent.max_turns': expected int, got 'many'"),
    (["train.steps"], "override 'train.steps' is not of the form key.sub=value"),
    (["train.steps.x=1"], "config key 'train.steps': expected int, got {'x': 1}"),
    (["sampling.n_samples=0"], "config key 'sampling.n_samples' must be at least 1"),
    (["tasks.3.data.limit=1"], "'tasks.3' needs an index below 1"),
])
def test_bad_config_names_the_key(overrides, message):
    with pytest.raises(ConfigError) as exc:
        load_config(None, overrides)
    assert message in str(exc.value)


def test_unknown_top_level_key_lists_valid_keys(tmp_path):
    with pytest.raises(ConfigError) as exc:
        load_config(write(tmp_path, "modle: x\n"))
    assert "unknown config key 'modle' (did you mean 'model'?)" in str(exc.value)
    assert "engine" in str(exc.value) and "tasks" in str(exc.value)


def test_env_interpolation(monkeypatch, tmp_path):
    monkeypatch.setenv("SKYRL_TEST_KEY", "sk-123")
    cfg = load_config(write(tmp_path, "engine: {type: openai, api_key: '${SKYRL_TEST_KEY}', base_url: '${SKYRL_NO_SUCH:-http://127.0.0.1:8000/v1}'}\n"))
    assert cfg.engine.api_key == "sk-123" and cfg.engine.base_url == "http://127.0.0.1:8000/v1"
    monkeypatch.delenv("SKYRL_TEST_KEY")
    with pytest.raises(ConfigError) as exc:
        load_config(write(tmp_path, "engine: {api_key: '${SKYRL_TEST_KEY}'}\n"))
    assert "config key 'engine.api_key'" in str(exc.value) and "SKYRL_TEST_KEY is not set" in str(exc.value)


def test_env_interpolation_leaves_shell_text_and_takes_defaults_whole(monkeypatch):
    """Where OmegaConf's interpolation would differ (skyrl_core.config.interpolate_env says why it is not used):
    shell text stays as written, a default holding a comma or colon is taken whole, ``${VAR}`` is the environment
    even when a config key has that name."""
    monkeypatch.setenv("SKYRL_TEST_DIR", "/srv/data")
    monkeypatch.delenv("SKYRL_NO_SUCH", raising=False)
    cfg = config_from_dict({"model": "smollm2-135m-instruct", "tasks": [{"name": "gsm8k", "data": {"options": {
        "setup": "for d in ${SKYRL_TEST_DIR}/*/; do echo ${d%/} $HOME; done",
        "hosts": "${SKYRL_NO_SUCH:-a.example:80,b.example:80}", "model": "${model:-none}"}}}]})
    assert cfg.tasks[0].data.options == {"setup": "for d in /srv/data/*/; do echo ${d%/} $HOME; done",
                                         "hosts": "a.example:80,b.example:80", "model": "none"}


def test_override_into_a_value_is_an_error():
    data = {"train": {"steps": 3}}
    with pytest.raises(ConfigError, match=r"override 'train.steps.x=1': 'train.steps' is a value \(3\), not a section"):
        apply_override(data, "train.steps.x=1")
    assert data == {"train": {"steps": 3}}


def test_data_shorthand_is_ambiguous_with_two_tasks():
    data = {"tasks": [{"name": "a"}, {"name": "b"}]}
    with pytest.raises(ConfigError, match="ambiguous with 2 tasks"):
        apply_override(data, "data.limit=3")
    apply_override(data, "tasks.1.data.limit=3")
    assert data["tasks"][1]["data"]["limit"] == 3


def test_runtime_shorthand_addresses_the_single_tasks_runtime():
    data = {"tasks": [{"name": "swe", "runtime": {"type": "swe_sandbox", "memory_mb": 2048}}]}
    apply_override(data, "runtime.type=docker")
    apply_override(data, "runtime.options.cpus=2")
    assert data["tasks"][0]["runtime"] == {"type": "docker", "memory_mb": 2048, "options": {"cpus": 2}}
    two = {"tasks": [{"name": "a"}, {"name": "b"}]}
    with pytest.raises(ConfigError, match="ambiguous with 2 tasks"):
        apply_override(two, "runtime.type=docker")


def test_override_values_parse_as_yaml():
    data: dict = {}
    apply_override(data, "tasks=[gsm8k, gsm8k_steps]")
    apply_override(data, "agent.hints.turns_left=false")
    apply_override(data, "backend.lr=3e-6")
    cfg = config_from_dict(data)
    assert [t.name for t in cfg.tasks] == ["gsm8k", "gsm8k_steps"]
    assert cfg.agent.hints.turns_left is False and cfg.backend.lr == pytest.approx(3e-6)


def test_missing_file_and_bad_yaml(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.yaml")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(write(tmp_path, "a: [1, 2\n"))
    with pytest.raises(ConfigError, match="mapping at the top level"):
        load_config(write(tmp_path, "- 1\n- 2\n"))


def test_round_trip_through_dict():
    cfg = load_config(None, ["train.steps=3", "backend.lora={r: 8}"])
    again = config_from_dict(cfg.to_dict())
    assert again == cfg and again.backend.lora.r == 8


def test_unknown_estimator_or_loss_names_the_registered_ones(plugins):
    """backend.advantage and backend.policy_loss name registered components (plugins may add more): a wrong
    name is an error listing the registered ones, raised before any rollout."""
    from skyrl_core.errors import UnknownComponentError
    from skyrl_core.default_plugins.trainer.local import resolve_policy_loss

    cfg = load_config(None, ["backend.advantage=ppo", "backend.policy_loss=dpo"])
    with pytest.raises(UnknownComponentError, match="no advantage estimator named 'ppo' is registered; registered: grpo, none, rloo"):
        plugins.registry.get("advantage_estimators", cfg.backend.advantage)
    with pytest.raises(UnknownComponentError, match="no policy loss named 'dpo' is registered; registered: decoupled_ppo, gspo, ppo_clip, reinforce"):
        resolve_policy_loss(cfg.backend.policy_loss)


def _write(tmp_path, text):
    path = tmp_path / "run.yaml"
    path.write_text(text)
    return str(path)


def test_eval_refuses_a_data_override_that_the_eval_split_ignores(tmp_path):
    """`skyrl eval CONFIG data.limit=3` on a config with eval_data rolled out the whole eval_data: now an error
    naming eval_data.limit=3; with eval_data.* beside it (the hygiene set on purpose) and under train it stands."""
    config = _write(tmp_path, "tasks:\n  - {name: gsm8k, data: {split: test, offset: 20},\n"
                              "     eval_data: {split: test, limit: 20}}\n")
    with pytest.raises(ConfigError) as exc:
        load_config(config, ["data.limit=3"], check=command_check("eval"))
    assert "write eval_data.limit=3" in str(exc.value) and "task 'gsm8k'" in str(exc.value)
    assert load_config(config, ["data.limit=3"], check=command_check("train")).tasks[0].data.limit == 3
    cfg = load_config(config, ["data.limit=0", "eval_data.limit=3"], check=command_check("eval"))
    assert cfg.tasks[0].eval_data.limit == 3 and cfg.tasks[0].data.limit == 0
    assert load_config(config, ["eval_data.limit=3"], check=command_check("eval")).tasks[0].eval_data.limit == 3
    two = _write(tmp_path, "tasks:\n  - {name: gsm8k, eval_data: {split: test}}\n  - {name: gsm8k}\n")
    with pytest.raises(ConfigError, match=r"write tasks\.0\.eval_data\.limit=2"):
        load_config(two, ["tasks.0.data.limit=2"], check=command_check("eval"))
    load_config(two, ["tasks.1.data.limit=2"], check=command_check("eval"))  # task 1 evaluates on its data


def test_an_eval_data_slice_on_a_task_without_eval_data_names_data(tmp_path):
    config = _write(tmp_path, "tasks:\n  - {name: gsm8k, data: {split: test}}\n")
    for command in ("eval", "train"):
        with pytest.raises(ConfigError) as exc:
            load_config(config, ["eval_data.limit=3"], check=command_check(command))
        assert "has no eval_data" in str(exc.value) and "write data.limit=3" in str(exc.value)
    # a split of its own
    cfg = load_config(config, ["eval_data.split=train", "eval_data.limit=3"], check=command_check("eval"))
    assert cfg.tasks[0].eval_data.split == "train" and cfg.tasks[0].eval_data.limit == 3


def test_eval_warns_about_train_only_overrides(tmp_path, caplog):
    config = _write(tmp_path, "tasks: [gsm8k]\n")
    with caplog.at_level("WARNING", logger="skyrl_core.config"):
        load_config(config, ["train.steps=3", "backend.lr=0.1", "sampling.n_samples=1"],
                    check=command_check("eval"))
    warned = [r.getMessage() for r in caplog.records]
    assert warned == ["override 'train.steps=3' has no effect on skyrl eval (train.* is read only by skyrl train)",
                      "override 'backend.lr=0.1' has no effect on skyrl eval (backend.* is read only by skyrl train)"]


def test_load_config_hands_its_check_the_config_as_read_before_the_overrides(tmp_path, caplog):
    """The core's loader knows no command: a ``check`` (a command's, e.g. the eval built-in's command_check) gets
    the config as read, normalised, and the overrides; its warnings are logged and its ConfigError is the load's."""
    config = _write(tmp_path, "engine: hf\ntrain: {steps: 3}\n")
    seen = []

    def check(data, overrides):
        seen.append((data["engine"], data["train"]["steps"], data["tasks"], overrides))
        return [f"{len(overrides)} override(s) seen"]

    with caplog.at_level("WARNING", logger="skyrl_core.config"):
        cfg = load_config(config, ("train.steps=5",), check=check)
    assert cfg.train.steps == 5
    assert seen == [({"type": "hf"}, 3, [{"name": "gsm8k"}], ["train.steps=5"])]
    assert [r.getMessage() for r in caplog.records] == ["1 override(s) seen"]

    def refuse(data, overrides):
        raise ConfigError("override 'train.steps=5': not here")

    with pytest.raises(ConfigError, match="not here"):
        load_config(config, ["train.steps=5"], check=refuse)
