"""A backend factory with a ``launch`` attribute owns the training loop: ``skyrl train`` hands it the run
(config, output directory, resume flag) instead of running the local loop (used by the SkyRL-train bridge)."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from skyrl_core import hookimpl

CONFIG = """model: smollm2-135m-instruct
tasks: [{name: gsm8k, data: {split: test, limit: 2}}]
backend: {type: launching}
train: {steps: 3}
"""


def test_skyrl_train_hands_the_run_to_a_launching_backend(plugins, tmp_path):
    from skyrl_core import plugins as plugins_mod
    from skyrl_core.cli import build_cli

    calls = []

    def factory(config, engine=None):
        raise AssertionError("a launching backend is never built in-process")

    factory.launch = lambda config, *, output, resume: calls.append((config.train.steps, output, resume))

    class Launching:
        @hookimpl
        def register_backends(self, register):
            register(factory, name="launching")

    plugins.register_plugin(Launching(), "launching")
    plugins_mod._PLUGINS = plugins  # the CLI reads the process-wide manager
    cfg = tmp_path / "run.yaml"
    cfg.write_text(CONFIG)
    result = CliRunner().invoke(build_cli(), ["train", str(cfg), "train.steps=5", "--output", str(tmp_path / "o"),
                                              "--resume"])
    assert result.exit_code == 0, result.output
    assert calls == [(5, Path(tmp_path / "o"), True)]
    assert not (tmp_path / "o").exists()  # the local loop wrote nothing


def test_backends_without_launch_run_the_local_loop(plugins):
    from skyrl_core.config import config_from_dict
    from skyrl_core.default_plugins.trainer.train_command import backend_launcher

    assert backend_launcher(config_from_dict({"model": "smollm2-135m-instruct",
                                              "tasks": [{"name": "gsm8k"}]})) is None
