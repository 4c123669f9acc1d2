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
    assert listing["builtin:runtimes"]["capabilities"] == {"runtimes": ["sandbox", "local"]}
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
    (("tools", "run", "python", "not json"), "tool arguments must be a JSON object"),
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
