"""Tests for {{ cookiecutter.dist_name }}: the entry point is found and what it registers works."""

import json
import os
import subprocess
import sys

from skyrl_core import ToolContext, Trajectory


def test_listed_by_skyrl_plugins():
    env = {k: v for k, v in os.environ.items() if k != "SKYRL_LOAD_PLUGINS"}
    proc = subprocess.run([sys.executable, "-m", "skyrl_core.cli", "plugins", "--json"], capture_output=True,
                          text=True, env=env, check=True)
    plugin = {p["name"]: p for p in json.loads(proc.stdout)}["{{ cookiecutter.entry_point }}"]
    assert plugin["distribution"] == "{{ cookiecutter.dist_name }}"
    assert plugin["capabilities"]["tools"] == ["{{ cookiecutter.entry_point }}_count_letters"]
    assert plugin["capabilities"]["tasks"] == ["{{ cookiecutter.entry_point }}_count"]


async def test_tool_counts():
    from {{ cookiecutter.module_name }}.tools import count_letters_tool

    result = await count_letters_tool.call({"text": "banana", "letter": "a"}, ToolContext())
    assert result.output == "3"


def test_task_and_verifier():
    from {{ cookiecutter.module_name }}.tasks import count_task
    from {{ cookiecutter.module_name }}.verifiers import exact_count
    from skyrl_core import DataSpec

    instances = count_task.select(DataSpec(limit=2))
    assert [i.data["answer"] for i in instances] == [3, 4]
    traj = Trajectory(instance_id="0", sample_index=0, task=count_task.name, group_id="0", answer="3")
    assert exact_count(traj, None, instances[0]).reward == 1.0
