"""skyrl-harbor: found through its entry point; task directories parsed, bad ones refused naming the file; the
Dockerfile rule for the sandbox; the runtime laid out as the task's image, with the task's limits."""

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from skyrl_core import DataSpec, Instance, ToolContext
from skyrl_core.runtime import RuntimeSpec

from skyrl_harbor.environment import HarborEnvironmentError, sandbox_plan
from skyrl_harbor.runtime import HarborSandbox
from skyrl_harbor.taskdir import HarborTaskError, load_task
from skyrl_harbor.tasks import build_instructions, harbor_task, sample_tasks
from skyrl_harbor.tools import terminal_tool

SAMPLES = Path(sample_tasks())


def test_listed_by_skyrl_plugins_with_its_capabilities():
    proc = subprocess.run([sys.executable, "-m", "skyrl_core.cli", "plugins", "--json"], capture_output=True,
                          text=True, check=True)
    plugin = {p["name"]: p for p in json.loads(proc.stdout)}["harbor"]
    assert plugin["distribution"] == "skyrl-harbor"
    assert not plugin.get("error"), plugin.get("error")
    caps = plugin["capabilities"]
    assert caps["tools"] == ["terminal"]
    assert caps["tasks"] == ["harbor", "harbor_docker"]
    assert caps["verifiers"] == ["harbor_tests"]
    # the docker runtime is skyrl-swe's, laid out for Harbor: registered where skyrl-swe is installed
    docker = ["harbor_docker"] if importlib.util.find_spec("skyrl_swe") else []
    assert caps["runtimes"] == ["harbor_sandbox", *docker]


def test_sample_tasks_parse_with_their_timeouts_and_limits():
    instances = harbor_task.select(DataSpec())
    assert [i.id for i in instances] == ["skyrl/count-words", "hello-file"]
    count = load_task(instances[0].data["path"])
    assert (count.agent_timeout_s, count.verifier_timeout_s, count.memory_mb, count.network_mode) == \
        (120.0, 60.0, 1024, "no-network")
    messages = build_instructions(instances[1], harbor_task)
    assert messages[1] == {"role": "user", "content": "Create a file named `hello.txt` in `/app` whose only "
                                                      "content is the line `Hello, world!`."}
    plan = sandbox_plan(count)
    assert (plan.base, plan.workdir, plan.env) == ("debian:bookworm-slim", "/app", {"LC_ALL": "C.UTF-8"})
    assert [rel for _, rel in plan.copies] == ["data"]


def _copy(tmp_path, name="hello-file") -> Path:
    return Path(shutil.copytree(SAMPLES / name, tmp_path / name))


@pytest.mark.parametrize("damage, culprit, says", [
    (lambda d: shutil.rmtree(d / "tests"), "tests/test.sh", "cannot be scored"),
    (lambda d: (d / "task.toml").write_text("[verifier\ntimeout_sec = 1\n"), "task.toml", "not valid TOML"),
    (lambda d: (d / "instruction.md").unlink(), "instruction.md", "missing"),
    (lambda d: (d / "task.toml").write_text("[agent]\ntimeout_sec = -5\n"), "task.toml", "positive number"),
    (lambda d: (d / "environment" / "Dockerfile").unlink(), "environment/Dockerfile", "missing"),
])
def test_bad_task_directory_is_one_error_naming_the_file(tmp_path, damage, culprit, says):
    task_dir = _copy(tmp_path)
    damage(task_dir)
    with pytest.raises(HarborTaskError, match=says) as info:
        harbor_task.select(DataSpec(path=str(tmp_path)))
    assert str(task_dir / culprit) in str(info.value)


@pytest.mark.parametrize("dockerfile, line, why", [
    ("FROM python:3.12\nWORKDIR /app\nRUN pip install numpy\n", 3, "a RUN step"),
    ("FROM ghcr.io/laude-institute/t-bench/python-3-13:20250620\n", 1, "not a plain"),
    ("FROM node:20\n", 1, "not a plain"),
    ("FROM python:3.12 AS build\n", 1, "not a plain"),
    ("FROM ubuntu:24.04\nCOPY ../../secret /app/\n", 2, "not a file under environment/"),
    ("FROM ubuntu:24.04\nWORKDIR /app\nCOPY --from=build /x /app/\n", 3, "another stage"),
])
def test_dockerfile_the_sandbox_cannot_stand_in_for_is_refused_naming_the_line(tmp_path, dockerfile, line, why):
    task_dir = _copy(tmp_path)
    (task_dir / "environment" / "Dockerfile").write_text(dockerfile)
    with pytest.raises(HarborEnvironmentError, match=why) as info:
        harbor_task.select(DataSpec(path=str(task_dir)))
    assert f"{task_dir / 'environment' / 'Dockerfile'}:{line}:" in str(info.value)
    assert harbor_task.select(DataSpec(path=str(task_dir), options={"skip_unrunnable": True})) == []


async def test_runtime_is_laid_out_as_the_image_and_refuses_after_the_agent_timeout(tmp_path):
    task_dir = _copy(tmp_path, "count-words")
    toml = task_dir / "task.toml"
    toml.write_text(toml.read_text().replace("[agent]\ntimeout_sec = 120.0", "[agent]\ntimeout_sec = 3.0"))
    runtime = HarborSandbox(RuntimeSpec(type="harbor_sandbox", memory_mb=4096, network=True))
    await runtime.start()
    try:
        await runtime.prepare(Instance(id="t", data={"path": str(task_dir)}))
        assert runtime.spec.memory_mb == 1024  # the task's limit is smaller than the config's
        assert runtime.spec.network is False  # network_mode = "no-network" (allow_internet = false)
        ctx = ToolContext(runtime=runtime)
        out = await terminal_tool.call({"command": "pwd; echo $LC_ALL; wc -w < /app/data/words.txt; "
                                                   "touch /made-here"}, ctx)
        assert out.output.splitlines()[:3] == ["/app", "C.UTF-8", "15"]
        assert out.error and "Read-only file system" in out.output  # the root is not the agent's
        late = await terminal_tool.call({"command": "sleep 10; echo done"}, ctx)
        assert late.error and late.metadata["timed_out"]  # bounded by what was left of the 3 s
        refused = await terminal_tool.call({"command": "echo again"}, ctx)
        assert refused.metadata["limits"] == ["agent_timeout"] and "timeout_sec of 3 s" in refused.output
    finally:
        await runtime.close()


def test_harbor_template_task_parses_as_harbor_does_and_the_sandbox_refuses_it():
    example = Path(__file__).parent / "fixtures" / "harbor-examples" / "hello-world"
    task = load_task(example)
    assert (task.name, task.agent_timeout_s, task.verifier_timeout_s, task.network_mode, task.memory_mb) == \
        ("ivanleomk/hello-world", 600.0, 600.0, "public", None)
    assert task.instruction == "Create a file at `/app/hello.txt` containing exactly:\n\n```text\nHello, world!\n```"
    with pytest.raises(HarborEnvironmentError, match="a RUN step") as info:
        sandbox_plan(task)
    assert f"{example / 'environment' / 'Dockerfile'}:4:" in str(info.value)


def test_tests_that_install_their_tools_are_refused_naming_the_line(tmp_path):
    task_dir = _copy(tmp_path)
    (task_dir / "tests" / "test.sh").write_text("#!/bin/bash\n# set up\napt-get update\nuvx pytest /tests\n")
    with pytest.raises(HarborEnvironmentError, match="install their tools") as info:
        sandbox_plan(load_task(task_dir))
    assert f"{task_dir / 'tests' / 'test.sh'}:3:" in str(info.value)
