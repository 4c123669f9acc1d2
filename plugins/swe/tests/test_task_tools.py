"""The swe tasks offer ``localize`` (first in their tool list and named in the instruction), and the tool answers a
real call through the same path as ``skyrl tools run`` on a tiny project written here."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from skyrl_core import Instance
from skyrl_core.plugins import get_plugins, reset_plugins

TINY = {
    "billing/__init__.py": '"""Billing."""\nfrom .invoice import total_due\n',
    "billing/invoice.py": 'def total_due(lines, discount_rate):\n    """Sum the invoice lines, minus the discount."""\n'
                          '    subtotal = sum(line.amount for line in lines)\n'
                          '    return subtotal - subtotal * discount_rate\n',
    "billing/export.py": 'import csv\n\ndef write_csv(rows, path):\n    with open(path, "w") as fh:\n'
                         '        csv.writer(fh).writerows(rows)\n',
}
ISSUE = ("total_due() ignores the discount when discount_rate is given as a percentage\n"
         'Traceback (most recent call last):\n  File "/srv/app/billing/invoice.py", line 4, in total_due\n'
         "ValueError: negative total")


def test_swe_tasks_offer_localize_first_and_the_instruction_names_it():
    reset_plugins()
    try:
        reg = get_plugins().registry
        assert "localize" in reg.names("tools") and reg.entries["tools"]["localize"].plugin == "swe"
        for name in ("swe", "r2e_gym"):
            task = reg.get("tasks", name)
            assert task.tools[0] == "localize" and {"search", "bash", "submit"} <= set(task.tools), task.tools
        builder = reg.get("instruction_builders", "swe")
        messages = builder(Instance(id="x-1", data={"problem_statement": ISSUE, "repo": "acme/billing"}),
                           reg.get("tasks", "swe"))
        assert "`localize` first" in messages[0]["content"] and "(`localize` with the" in messages[1]["content"]
    finally:
        reset_plugins()


def test_example_config_lists_localize():
    from pathlib import Path

    import yaml

    cfg = yaml.safe_load((Path(__file__).resolve().parents[1] / "skyrl_swe" / "examples" / "generated.yaml").read_text())
    assert cfg["tasks"][0]["tools"][0] == "localize"


def test_skyrl_tools_run_localize_on_a_tiny_workspace(tmp_path):
    """`skyrl tools run localize` goes through the registered tool, its argument check and the workspace runtime;
    the traceback's file and function come first; nothing is written into the workspace."""
    for rel, text in TINY.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    before = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*"))
    env = {**os.environ, "SKYRL_LOAD_PLUGINS": "skyrl-swe", "COLUMNS": "100"}
    cmd = [sys.executable, "-c", "from skyrl_core.cli import main; main()", "tools", "run", "localize",
           json.dumps({"issue": ISSUE, "max_results": 3}), "--workspace", str(tmp_path)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "  1. billing/invoice.py  " in out and "[traceback" in out, out
    assert "  1. billing/invoice.py:total_due  function  lines 1-4" in out, out
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")) == before
    bad = subprocess.run([*cmd[:6], json.dumps({"issue": ""}), "--workspace", str(tmp_path)], capture_output=True,
                         text=True, env=env, timeout=120)
    assert bad.returncode != 0 and "issue" in (bad.stdout + bad.stderr)
