"""The docker path: a Harbor task whose Dockerfile has RUN steps and an ``ubuntu`` base builds on the local Debian
base (the substitution named), the agent's commands run only inside its container, the task's solution scores 1
and doing nothing 0 — and the attacks next to them: an agent that writes the reward file or the tests in its
container, replaces the tools the tests run, or leaves code that rewrites the reward after ``test.sh`` exits,
gets nothing."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

from skyrl_core import Instance, Trajectory
from skyrl_core.runtime import RuntimeSpec

from skyrl_harbor.cli import verify_tasks
from skyrl_harbor.runtime_docker import docker_runtime_class
from skyrl_harbor.verifiers import harbor_tests

SPEC = RuntimeSpec(type="harbor_docker")


async def _agent(task_dir: Path, *commands: str):
    instance = Instance(id=task_dir.name, data={"path": str(task_dir)})
    runtime = docker_runtime_class()(SPEC)
    await runtime.start()
    await runtime.prepare(instance)
    outputs = [await runtime.exec(c, timeout_s=60) for c in commands]
    return runtime, instance, outputs


def _trajectory() -> Trajectory:
    return Trajectory(instance_id="t", sample_index=0, task="harbor_docker", group_id="g", messages=[])


async def test_verify_docker_builds_with_the_base_named_and_scores_solution_1_nothing_0(sort_task):
    [row] = await verify_tasks(sort_task, SPEC)
    assert (row["build"], row["runs_here"], row["solution"], row["nothing"]) == (True, True, 1.0, 0.0), row
    assert row["substitution"].startswith("ubuntu:24.04 -> skyrl-harbor-base:bookworm (Debian 12")
    assert "not the upstream image" in row["substitution"]


async def test_agent_commands_run_in_the_container_and_its_work_scores_1(sort_task):
    runtime, instance, (where, solve) = await _agent(
        sort_task, "echo $SORT_TASK $(pwd) $(id -u); hostname; grep ^ID= /etc/os-release; ls /app/data",
        "sort -n data/numbers.txt > sorted.txt")
    try:
        lines = where.output.split("\n")
        assert lines[0] == "1 /app 0"  # the Dockerfile's ENV and WORKDIR; root inside the container
        assert lines[1] != socket.gethostname() and lines[2] == "ID=debian" and "numbers.txt" in lines[3]
        assert solve.exit_code == 0
        assert (runtime.workspace / "sorted.txt").read_text().split() == ["4", "5", "26", "31", "159"]
        verdict = await harbor_tests(_trajectory(), runtime, instance)
        assert (verdict.outcome, verdict.reward) == ("scored", 1.0), verdict
        assert verdict.metrics["image_substitution"].startswith("ubuntu:24.04 -> skyrl-harbor-base:bookworm")
    finally:
        await runtime.close()


async def test_agent_writing_the_reward_or_the_tests_or_the_tools_in_its_container_gets_0(sort_task):
    runtime, instance, outputs = await _agent(
        sort_task,
        "mkdir -p /logs/verifier /tests && echo 1 > /logs/verifier/reward.txt && "
        "printf '#!/bin/bash\\necho 1 > /logs/verifier/reward.txt\\n' > /tests/test.sh",
        # the tests' own tools, replaced in the agent's container: sort then prints what the agent wrote
        "printf '#!/bin/sh\\ncat /app/sorted.txt\\n' > /usr/bin/sort && chmod +x /usr/bin/sort",
        "echo 1 > reward.txt; echo wrong > sorted.txt")
    try:
        assert [o.exit_code for o in outputs] == [0, 0, 0]  # all allowed in the agent's own container...
        verdict = await harbor_tests(_trajectory(), runtime, instance)
        assert (verdict.outcome, verdict.reward) == ("scored", 0.0), verdict  # ...and none reaches the verifier
        assert verdict.metrics["reward_file"] == "reward.txt"
    finally:
        await runtime.close()


async def test_code_under_test_rewriting_the_reward_after_test_sh_is_killed_first(sort_task):
    # a task whose tests run a hook from the workspace (code under test), then write the reward; the hook leaves a
    # process that would rewrite it 3 s later. It dies with the container (skyrl-swe's stray reaping, then the
    # verifier's kill); the 3 s outlast the reward's read even without those, so this holds the outcome, not the
    # kill's timing. (A process that rewrites the reward while test.sh runs is not defended, as in Harbor.)
    test_sh = sort_task / "tests" / "test.sh"
    hook = "mkdir -p /logs/verifier\n[ -f /app/hook.sh ] && bash /app/hook.sh\n"
    test_sh.write_text(test_sh.read_text().replace("mkdir -p /logs/verifier\n", hook))
    runtime, instance, outputs = await _agent(
        sort_task, "printf '(sleep 3; echo 1 > /logs/verifier/reward.txt) </dev/null >/dev/null 2>&1 &\\n' > hook.sh")
    try:
        verdict = await harbor_tests(_trajectory(), runtime, instance)
        assert (verdict.outcome, verdict.reward) == ("scored", 0.0), verdict
    finally:
        await runtime.close()


async def test_the_agent_container_has_no_network_by_default_and_honours_the_agent_timeout(sort_task):
    toml = sort_task / "task.toml"
    toml.write_text(toml.read_text().replace("[agent]\ntimeout_sec = 120.0", "[agent]\ntimeout_sec = 2.0"))
    runtime, _, (net, slow, late) = await _agent(
        sort_task, "python3 -c 'import socket; socket.create_connection((\"deb.debian.org\", 80), 3)'",
        "sleep 10", "echo late")
    try:
        assert net.exit_code != 0
        assert "agent_timeout" in late.limits and late.exit_code is None
        assert slow.duration_s < 9
    finally:
        await runtime.close()


async def test_what_the_agent_writes_outside_the_system_reaches_the_verifier_and_the_system_does_not(sort_task):
    # a task whose tests read the answer from /output (outside the WORKDIR), as some Harbor tasks do
    test_sh = sort_task / "tests" / "test.sh"
    test_sh.write_text(test_sh.read_text().replace("/app/sorted.txt", "/output/sorted.txt"))
    runtime, instance, outputs = await _agent(
        sort_task, "mkdir -p /output && sort -n data/numbers.txt > /output/sorted.txt",
        "mkdir -p /opt/evil && echo x > /opt/evil/x && echo 'echo hacked' > /etc/profile.d/z.sh")
    try:
        assert [o.exit_code for o in outputs] == [0, 0]
        assert await asyncio.to_thread(runtime.carry_out) == {"/output": f"{runtime._tmp}/carried/output"}
        verdict = await harbor_tests(_trajectory(), runtime, instance)
        assert (verdict.outcome, verdict.reward, verdict.metrics["carried"]) == ("scored", 1.0, ["/output"]), verdict
    finally:
        await runtime.close()


async def test_a_workdir_of_tmp_is_the_workspace_and_home_moves_out_of_it(sort_task):
    # some Terminal-Bench tasks set WORKDIR /tmp: no tmpfs over it (the engine refused the duplicate mount), and
    # HOME is not the workspace the verifier mounts there
    dockerfile = sort_task / "environment" / "Dockerfile"
    dockerfile.write_text(dockerfile.read_text().replace("WORKDIR /app", "WORKDIR /tmp"))
    runtime, instance, (where, solve) = await _agent(sort_task, "pwd; echo $HOME",
                                                     "sort -n /app/data/numbers.txt > /app/sorted.txt")
    try:
        assert where.output.split() == ["/tmp", "/root"] and solve.exit_code == 0
        verdict = await harbor_tests(_trajectory(), runtime, instance)
        assert (verdict.outcome, verdict.reward, verdict.metrics["carried"]) == ("scored", 1.0, ["/app"]), verdict
    finally:
        await runtime.close()
