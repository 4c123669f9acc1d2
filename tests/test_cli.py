"""The skyrl CLI as a user runs it: a subprocess, real output, real exit codes."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest


def skyrl(*args: str, cwd=None) -> subprocess.CompletedProcess:
    env = dict(os.environ, SKYRL_LOAD_PLUGINS="", COLUMNS="200")
    return subprocess.run([sys.executable, "-m", "skyrl_core.cli", *args], capture_output=True, text=True, env=env,
                          cwd=cwd, timeout=120)


def test_version():
    proc = skyrl("--version")
    assert proc.returncode == 0 and proc.stdout.strip() == "skyrl 0.1.0"


def test_plugins_all_json_lists_builtins_with_capabilities():
    proc = skyrl("plugins", "--all", "--json")
    assert proc.returncode == 0, proc.stderr
    listing = {p["name"]: p for p in json.loads(proc.stdout)}
    tools = listing["builtin:generic_tools"]
    assert tools["builtin"] is True and tools["distribution"] == "skyrl-core"
    assert tools["hooks"] == ["register_tools"] and tools["capabilities"] == {"tools": ["python", "finish"]}
    assert listing["builtin:runtimes"]["capabilities"] == {"runtimes": ["sandbox", "local"], "placements": ["local"]}
    assert skyrl("plugins", "--json").stdout.strip() == "[]"


def test_plugins_table_for_people():
    proc = skyrl("plugins", "--all")
    assert proc.returncode == 0
    assert "builtin:generic_tools" in proc.stdout and "tools: python, finish" in proc.stdout


def test_tools_lists_schemas():
    proc = skyrl("tools", "--json")
    tools = {t["name"]: t for t in json.loads(proc.stdout)}
    assert tools["python"]["parameters"]["required"] == ["code"]
    assert tools["finish"]["plugin"] == "builtin:generic_tools"
    table = skyrl("tools").stdout
    assert "code: string" in table and "answer: string|number" in table


def test_tools_run_reads_arguments_from_a_file_or_stdin(tmp_path):
    """A long argument (a whole issue text) does not fit a command line: @FILE and - read it."""
    (tmp_path / "args.json").write_text(json.dumps({"code": "print(len('" + "x" * 300_000 + "'))"}))
    proc = skyrl("tools", "run", "python", f"@{tmp_path / 'args.json'}", "--workspace", str(tmp_path))
    assert proc.returncode == 0 and proc.stdout.strip() == "300000", proc.stderr
    piped = subprocess.run([sys.executable, "-c", "from skyrl_core.cli import main; main()", "tools", "run", "python",
                            "-", "--workspace", str(tmp_path)], input='{"code": "print(6*7)"}', capture_output=True,
                           text=True, timeout=300)
    assert piped.returncode == 0 and piped.stdout.strip() == "42", piped.stderr


def test_tools_run_python_in_the_sandbox(tmp_path):
    proc = skyrl("tools", "run", "python", json.dumps({"code": "open('made.txt','w').write('x'); print(6*7)"}),
                 "--workspace", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "42"
    assert (tmp_path / "made.txt").read_text() == "x"
    proc = skyrl("tools", "run", "finish", '{"answer": 7}', "--json")
    result = json.loads(proc.stdout)
    assert result["finish"] is True and result["answer"] == 7


@pytest.mark.parametrize("args, message", [
    (("tools", "run", "pyhton", "{}"), "no tool named 'pyhton' is registered; registered: finish, python"),
    (("tools", "run", "python", '{"cod": 1}'), "arguments of 'python': 'code' is a required property"),
    (("tools", "run", "python", "not json"), 'tool arguments must be a JSON object: Expecting value: line 1 column 1 '
     '(char 0); e.g. {"code": "'),
    (("tools", "run", "python", '{"code": "1"}', "--workspace", "/nonexistent/ws"),
     "--workspace /nonexistent/ws is not a directory"),
    (("tools", "run", "python", "@/nonexistent/args.json"), "tool arguments file '/nonexistent/args.json' cannot be read"),
    (("tools", "run", "python", '{"code": "1"}', "--runtime", "dokker"), "no runtime named 'dokker'"),
])
def test_bad_input_is_one_clear_line_without_traceback(args, message):
    proc = skyrl(*args)
    assert proc.returncode == 2
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr


def test_debug_shows_the_traceback():
    proc = skyrl("--debug", "tools", "run", "pyhton", "{}")
    assert proc.returncode != 0 and "Traceback" in proc.stderr and "UnknownComponentError" in proc.stderr


def test_tasks_lists_registered_tasks():
    proc = skyrl("tasks", "--json")
    assert proc.returncode == 0
    for task in json.loads(proc.stdout):
        assert task["verifier"] and task["tools"] and task["plugin"]


def test_cli_start_up_imports_no_heavy_module():
    """The light core: building the CLI (every built-in plugin loaded) must not import torch or transformers."""
    code = ("import sys; from skyrl_core.cli import build_cli; build_cli(); "
            "from skyrl_core.plugins import get_registry; get_registry(); "
            "heavy = sorted(m for m in ('torch', 'transformers', 'numpy', 'matplotlib', 'peft') if m in sys.modules); "
            "print(','.join(heavy))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=dict(os.environ, SKYRL_LOAD_PLUGINS=""), timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == ""


def _long_name_plugin():
    from skyrl_core import Tool, ToolResult, hookimpl

    class LongNames:
        @hookimpl
        def register_tools(self, register):
            register(Tool(name="str_replace_editor_with_a_long_name", description="Edit files. " * 12,
                          parameters={"type": "object", "properties": {"path": {"type": "string"}}},
                          handler=lambda a, c: ToolResult(output="")))

    return LongNames()


def test_piped_tables_are_plain_lines_with_whole_names(plugins):
    """`skyrl tools | grep NAME` must find the name: not on a terminal, every row is one tab-separated line."""
    from click.testing import CliRunner

    from skyrl_core.cli import build_cli

    plugins.register_plugin(_long_name_plugin(), "long_names")
    out = CliRunner().invoke(build_cli(), ["tools"]).output
    lines = out.splitlines()
    assert lines[0] == "# tool\tplugin\tparameters\tdescription"
    row = next(line for line in lines if line.startswith("str_replace_editor_with_a_long_name\t"))
    assert row.split("\t")[1:3] == ["long_names", "path?: string"] and row.endswith("Edit files. ")
    tasks = CliRunner().invoke(build_cli(), ["tasks"]).output.splitlines()
    assert any(line.startswith("gsm8k_steps\tbuiltin:gsm8k\tpython, finish\t") for line in tasks)
    listing = CliRunner().invoke(build_cli(), ["plugins"]).output
    assert "long_names\t-\t-\ttools: str_replace_editor_with_a_long_name\tok" in listing


def test_terminal_table_keeps_names_whole(plugins, monkeypatch):
    import io

    from rich.console import Console

    from skyrl_core.default_plugins.catalog import commands, tables

    plugins.register_plugin(_long_name_plugin(), "long_names")
    buffer = io.StringIO()
    monkeypatch.setattr(tables, "console", Console(file=buffer, force_terminal=True, width=80, color_system=None))
    commands.tools_list(type("Ctx", (), {"invoked_subcommand": None})(), as_json=False)
    assert "str_replace_editor_with_a_long_name" in buffer.getvalue()  # one piece, though the table is 80 wide


def test_piped_training_prints_progress_at_a_steady_interval():
    import io
    import time

    from rich.console import Console

    from skyrl_core.default_plugins.trainer.train_command import PipeProgress

    buffer = io.StringIO()
    progress = PipeProgress(Console(file=buffer, width=200), interval=0.1).start()
    try:
        progress.update("rollouts", 0, 32)
        progress.update("rollouts", 5, 32)
        time.sleep(0.35)
        progress.update("rollouts", 32, 32)  # phase over: silence until the next one
        quiet_from = len(buffer.getvalue())
        time.sleep(0.25)
    finally:
        progress.stop()
    lines = buffer.getvalue().splitlines()
    assert len(lines) >= 2 and all(line.startswith("rollouts: 5/32 trajectories, ") for line in lines)
    assert len(buffer.getvalue()) == quiet_from


def test_plugins_hook_filter_takes_comma_lists_and_never_claims_nothing_is_installed(plugins):
    """A filter that excludes every plugin says so (not "No third-party plugins installed"); an unknown hook is
    an error naming the valid ones; ``--hook a,b`` is the same as ``--hook a --hook b``; "policy losses"."""
    from click.testing import CliRunner

    from skyrl_core.cli import build_cli

    plugins.register_plugin(_long_name_plugin(), "long_names")
    runner = CliRunner()
    none = runner.invoke(build_cli(), ["plugins", "--hook", "register_policy_losses"])
    assert none.exit_code == 0
    assert "No third-party plugins installed" not in none.output
    assert "None of the 1 third-party plugins installed implements register_policy_losses" in none.output
    both = runner.invoke(build_cli(), ["plugins", "--all", "--hook", "register_tools,register_policy_losses"])
    names = [line.split("\t")[0] for line in both.output.splitlines()[1:]]
    assert "long_names" in names and "builtin:trainer" in names and "builtin:runtimes" not in names
    assert "policy losses: ppo_clip" in both.output and "losss" not in both.output
    bad = skyrl("plugins", "--hook", "nonsense")
    assert bad.returncode == 2 and "--hook nonsense: no such hook" in bad.stderr
    assert "register_tools" in bad.stderr and "Traceback" not in bad.stderr


def test_piped_progress_names_the_phase_and_estimates_the_time_left():
    import io
    import time

    from rich.console import Console

    from skyrl_core.default_plugins.trainer.train_command import PipeProgress, timeouts

    progress = PipeProgress(Console(file=io.StringIO(), width=200), interval=60)
    progress.update("eval before training", 0, 10)
    assert progress.line().startswith("eval before training: 0/10 trajectories, ")
    assert "left" not in progress.line()  # nothing finished: no estimate yet
    time.sleep(0.2)
    progress.update("eval before training", 5, 10)
    line = progress.line()
    head, eta = line.split(", about ")
    assert head.startswith("eval before training: 5/10 trajectories, ") and eta.endswith(" s left")
    assert timeouts({"finish/timeout": 0.11}, 100).startswith("; 11 of 100 trajectories ended on an engine timeout")
    assert timeouts({"finish/timeout": 0.0}, 100) == "" and timeouts({}, None) == ""


def test_model_loading_draws_no_progress_bar_into_a_pipe(tiny_chat_model_dir):
    """transformers' tqdm bars (weight loading, the one-time GGUF conversion) wrote dozens of carriage-return
    updates onto one line of a piped log; off a terminal they are off."""
    code = f"from skyrl_core.default_plugins.engines.models import load_causal_lm; load_causal_lm({tiny_chat_model_dir!r})"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, SKYRL_LOAD_PLUGINS=""))
    assert proc.returncode == 0, proc.stderr
    assert "\r" not in proc.stderr and "it/s" not in proc.stderr and "Loading" not in proc.stderr, proc.stderr
