"""The ``harbor_tests`` verifier: the reference solution scores 1 and doing nothing 0 on each sample task
(`skyrl harbor verify`), the reward read as Harbor defines it, and an agent that writes the reward file itself,
edits the tests, or leaves code that plants a link as the reward file gets nothing."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from skyrl_core import Instance, Trajectory
from skyrl_core.runtime import RuntimeSpec

from skyrl_harbor.runtime import HarborSandbox
from skyrl_harbor.tasks import sample_tasks
from skyrl_harbor.verifiers import Forged, harbor_tests, read_reward

SAMPLES = Path(sample_tasks())


def test_skyrl_harbor_verify_scores_solution_1_and_nothing_0():
    proc = subprocess.run([sys.executable, "-m", "skyrl_core.cli", "harbor", "verify", str(SAMPLES), "--json"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    rows = {r["task"]: r for r in json.loads(proc.stdout)}
    assert {name: (r["parses"], r["runs_here"], r["solution"], r["nothing"]) for name, r in rows.items()} == {
        "hello-file": (True, True, 1.0, 0.0), "skyrl/count-words": (True, True, 1.0, 0.0)}


def test_reward_is_read_as_harbor_defines_it(tmp_path):
    assert read_reward(tmp_path)[0] == 0.0 and "neither" in read_reward(tmp_path)[1]["reward_problem"]
    (tmp_path / "reward.txt").write_text("1\n")
    assert read_reward(tmp_path) == (1.0, {"reward_file": "reward.txt"})
    (tmp_path / "reward.json").write_text('{"reward": 0.5, "tests_passed": 3}')  # reward.json first
    assert read_reward(tmp_path) == (0.5, {"reward_file": "reward.json", "rewards": {"reward": 0.5,
                                                                                     "tests_passed": 3}})
    (tmp_path / "reward.json").write_text('{"reward": "1"}')
    assert read_reward(tmp_path)[0] == 0.0
    (tmp_path / "reward.json").unlink()
    (tmp_path / "reward.txt").write_text("nan")
    assert read_reward(tmp_path)[0] == 0.0
    (tmp_path / "reward.txt").unlink()
    (tmp_path / "reward.txt").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(Forged, match="not a regular file"):
        read_reward(tmp_path)


async def _agent_run(task_dir: Path, command: str) -> tuple[HarborSandbox, Instance]:
    instance = Instance(id=task_dir.name, data={"path": str(task_dir)})
    runtime = HarborSandbox(RuntimeSpec(type="harbor_sandbox"))
    await runtime.start()
    await runtime.prepare(instance)
    await runtime.exec(command, timeout_s=30)
    return runtime, instance


def _trajectory() -> Trajectory:
    return Trajectory(instance_id="t", sample_index=0, task="harbor", group_id="g", messages=[])


async def _verdict(task_dir: Path, command: str):
    runtime, instance = await _agent_run(task_dir, command)
    try:
        return await harbor_tests(_trajectory(), runtime, instance)
    finally:
        await runtime.close()


async def test_agent_doing_the_task_scores_1():
    verdict = await _verdict(SAMPLES / "hello-file", "echo 'Hello, world!' > hello.txt")
    assert (verdict.reward, verdict.outcome, verdict.metrics["reward_file"]) == (1.0, "scored", "reward.txt")


async def test_agent_writing_the_reward_file_itself_scores_0():
    attack = ("mkdir -p /logs/verifier; echo 1 > /logs/verifier/reward.txt; "  # read-only root: fails
              "mkdir -p logs/verifier && echo 1 > logs/verifier/reward.txt && echo 1 > reward.txt")
    verdict = await _verdict(SAMPLES / "hello-file", attack)
    assert (verdict.reward, verdict.outcome) == (0.0, "scored")


async def test_agent_editing_the_tests_scores_0_and_the_task_is_untouched():
    before = (SAMPLES / "hello-file" / "tests" / "test.sh").read_text()
    forged = "#!/bin/bash\\necho 1 > /logs/verifier/reward.txt\\n"
    attack = (f"mkdir -p /tests; printf '{forged}' > /tests/test.sh; "
              f"mkdir -p tests && printf '{forged}' > tests/test.sh; "
              f"printf '{forged}' > {SAMPLES / 'hello-file' / 'tests' / 'test.sh'}")
    verdict = await _verdict(SAMPLES / "hello-file", attack)
    assert (verdict.reward, verdict.outcome) == (0.0, "scored")
    assert (SAMPLES / "hello-file" / "tests" / "test.sh").read_text() == before


async def test_code_under_test_planting_a_link_as_the_reward_is_tampering(tmp_path):
    task_dir = Path(shutil.copytree(SAMPLES / "hello-file", tmp_path / "runs-agent-code"))
    (task_dir / "tests" / "test.sh").write_text(
        "#!/bin/bash\nbash /app/prog.sh\n[ -e /logs/verifier/reward.txt ] || echo 0 > /logs/verifier/reward.txt\n")
    secret = tmp_path / "host-secret"
    secret.write_text("1")
    os.chmod(tmp_path, 0o755)
    verdict = await _verdict(task_dir, f"echo 'ln -s {secret} /logs/verifier/reward.txt' > prog.sh")
    assert (verdict.reward, verdict.outcome) == (0.0, "tampered")
    assert "not a regular file" in verdict.reason


async def test_verifier_timeout_is_honoured(tmp_path):
    task_dir = Path(shutil.copytree(SAMPLES / "hello-file", tmp_path / "slow-tests"))
    toml = task_dir / "task.toml"
    toml.write_text(toml.read_text().replace("[verifier]\ntimeout_sec = 60.0", "[verifier]\ntimeout_sec = 1.0"))
    (task_dir / "tests" / "test.sh").write_text("#!/bin/bash\nsleep 20\necho 1 > /logs/verifier/reward.txt\n")
    verdict = await _verdict(task_dir, "echo 'Hello, world!' > hello.txt")
    assert (verdict.reward, verdict.metrics["test_timed_out"]) == (0.0, True)
    assert verdict.metrics["test_seconds"] < 15


async def test_code_planted_in_the_home_directory_does_not_run_in_the_verifier(tmp_path):
    """The agent's workspace is its HOME; the verifier's HOME is elsewhere, so a ``usercustomize`` the agent
    leaves in ``~/.local`` is not imported by the tests' Python and cannot write the reward."""
    task_dir = Path(shutil.copytree(SAMPLES / "hello-file", tmp_path / "python-tests"))
    (task_dir / "tests" / "test.sh").write_text(
        "#!/bin/bash\n/usr/bin/python3 -c 'print(\"checking\")'\n"
        "if [ \"$(cat /app/hello.txt 2>/dev/null)\" = 'Hello, world!' ]; then echo 1 > /logs/verifier/reward.txt; fi\n")
    site = ".local/lib/python3.11/site-packages"
    plant = f"mkdir -p ~/{site} && echo \"open('/logs/verifier/reward.txt', 'w').write('1')\" > ~/{site}/usercustomize.py"
    verdict = await _verdict(task_dir, plant)
    assert verdict.reward == 0.0 and verdict.metrics["reward_problem"].startswith("test.sh wrote neither")
