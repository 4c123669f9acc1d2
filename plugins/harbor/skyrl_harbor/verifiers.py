"""The ``harbor_tests`` verifier: the task's ``tests/test.sh`` in a fresh sandbox over a copy of the agent's
workspace, the reward read as Harbor reads it (``/logs/verifier/reward.json``: its ``reward``; else
``/logs/verifier/reward.txt``: one number).

Trust rules (as the swe verifier's, docs/plugins/harbor.md): the agent never sees the tests, the reward file or
the runner — ``tests/`` is copied from the task directory after the agent's turn and mounted read-only at
``/tests``; ``/logs/verifier`` is a fresh host directory that exists only in the verifier's sandbox (the agent's
sandbox has a read-only root, so it cannot make one, and a ``reward.txt`` it leaves in its workspace is just a
file there); the runner is that ``test.sh`` (its shebang's interpreter, from the read-only system), with ``HOME`` in
the sandbox's private ``/tmp``, not the workspace that was the agent's ``HOME`` (no ``~/.local`` user site, no
dotfiles of the agent's are read). Every process of the test run
dies with the run (its own pid namespace), so nothing rewrites the reward after ``test.sh`` exits. The reward file
is read without following links, as a regular file of at most 64 KiB: a link or anything else is tampering.
What is not defended (as in Harbor): code under test runs in the same sandbox as ``test.sh`` and could write the
reward file while the tests run; a task whose ``test.sh`` writes the reward after its tests overwrites that.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import shutil
import stat
import tempfile
from pathlib import Path
from typing import Any

import attrs

from skyrl_core import Instance, VerifierResult
from skyrl_core.runtime import RuntimeSpec

from .runtime import HarborSandbox
from .taskdir import load_task

MAX_REWARD_BYTES = 64 * 1024


class Forged(Exception):
    """The reward file is not what test.sh writes (a link, a device, too large)."""


def _read_plain(path: Path) -> str | None:
    """The text of a regular file, never following a link; None when absent. Raises Forged otherwise."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    except OSError as exc:  # ELOOP: a symbolic link
        raise Forged(f"{path.name} is not a regular file ({exc.strerror})") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise Forged(f"{path.name} is not a regular file")
        if info.st_size > MAX_REWARD_BYTES:
            raise Forged(f"{path.name} is {info.st_size} bytes (at most {MAX_REWARD_BYTES})")
        return os.read(fd, MAX_REWARD_BYTES).decode("utf-8", errors="replace")
    finally:
        os.close(fd)


def read_reward(logs: Path) -> tuple[float, dict[str, Any]]:
    """(reward, what was read) from a verifier logs directory, as harbor 0.25.0's verifier reads it:
    ``reward.json`` first — an object of finite numbers, the reward its ``reward`` (or its only value) — else
    ``reward.txt`` holding one finite number. A missing, empty or malformed reward is 0 with ``reward_problem``
    saying why (Harbor raises there: no reward). Raises Forged for a link or an oversized file."""
    text = _read_plain(logs / "reward.json")
    if text is not None:
        try:
            rewards = json.loads(text)
        except ValueError:
            return 0.0, {"reward_problem": "reward.json is not JSON"}
        if not isinstance(rewards, dict) or not rewards or not all(
                isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
                for v in rewards.values()):
            return 0.0, {"reward_problem": "reward.json is not a non-empty object of finite numbers"}
        if "reward" not in rewards and len(rewards) != 1:
            return 0.0, {"reward_problem": f"reward.json has no 'reward' among {sorted(rewards)[:8]}"}
        value = rewards.get("reward", next(iter(rewards.values())))
        return float(value), {"reward_file": "reward.json", "rewards": rewards}
    text = _read_plain(logs / "reward.txt")
    if text is None:
        return 0.0, {"reward_problem": "test.sh wrote neither /logs/verifier/reward.json nor reward.txt"}
    try:
        value = float(text.strip())
    except ValueError:
        return 0.0, {"reward_problem": f"reward.txt does not hold a number: {text.strip()[:80]!r}"}
    if not math.isfinite(value):
        return 0.0, {"reward_problem": f"reward.txt holds {value}, not a finite number"}
    return value, {"reward_file": "reward.txt"}


def _open_to(path: Path, drop: tuple[int, int] | None, mode: int) -> None:
    """Make ``path`` usable by the sandbox's host uid (``drop`` when the host process is root)."""
    os.chmod(path, mode)
    if drop is not None:
        os.chown(path, *drop)


async def run_tests(instance: Instance, workspace: Path | None, spec: RuntimeSpec | None = None) -> VerifierResult:
    """Run the task's tests on a copy of ``workspace`` (None: the task's untouched environment, the control) in a
    fresh ``harbor_sandbox``; ``reward`` as :func:`read_reward`, ``metrics`` with the exit code, the seconds the
    run took and the reward file read. Unverifiable when the sandbox cannot start; tampered when the reward file
    is forged."""
    if spec is not None and spec.type == "harbor_docker":
        return await run_tests_docker(instance, workspace, spec)
    task = await asyncio.to_thread(load_task, instance.data["path"])
    base = spec or RuntimeSpec(type=HarborSandbox.name)
    vspec = attrs.evolve(base, type=HarborSandbox.name, source=str(workspace) if workspace else None,
                         workspace=None, cpu_time_s=max(int(base.cpu_time_s), int(task.verifier_timeout_s)))
    private = Path(await asyncio.to_thread(tempfile.mkdtemp, prefix="skyrl-harbor-verify-"))
    runtime = HarborSandbox(vspec)
    try:
        try:
            await runtime.start()
            await runtime.prepare(instance, agent_deadline=False)
        except Exception as exc:  # noqa: BLE001 - the infrastructure, not the agent: no verdict
            return VerifierResult.unverifiable(f"the verifier's sandbox did not start: {exc}")
        tests, logs = await asyncio.to_thread(_private_tests, task, private)
        _open_to(logs, runtime._drop, 0o755)
        runtime.mounts = [(str(tests), "/tests", False), (str(logs), "/logs/verifier", True)]
        runtime.home = "/tmp"  # the agent's HOME was its workspace: its ~/.local, ~/.bashrc... stay unread
        # run as Harbor runs it: the script itself (its shebang picks the interpreter; bash when it has none)
        result = await runtime.exec("/tests/test.sh", timeout_s=task.verifier_timeout_s,
                                    env={"PYTHONNOUSERSITE": "1", **task.verifier_env})
        return await _verdict(result, logs)
    finally:
        await runtime.close()
        await asyncio.to_thread(shutil.rmtree, private, True)


def _private_tests(task: Any, private: Path) -> tuple[Path, Path]:
    """A private copy of the task's ``tests/`` (readable by the runtime's user; executables and ``.sh``
    runnable) and a fresh, empty reward directory: (tests, logs)."""
    tests, logs = private / "tests", private / "logs" / "verifier"
    shutil.copytree(task.tests_dir, tests, symlinks=False)
    logs.mkdir(parents=True)
    for root, dirs, files in os.walk(tests):
        for name in dirs + files:
            path = Path(root, name)
            runnable = name in dirs or name.endswith(".sh") or path.stat().st_mode & 0o111
            os.chmod(path, 0o755 if runnable else 0o644)
    os.chmod(tests, 0o755)
    return tests, logs


async def _verdict(result: Any, logs: Path, **extra: Any) -> VerifierResult:
    """The verifier's result from the test run's ExecResult and the reward directory (see :func:`read_reward`)."""
    metrics: dict[str, Any] = {"test_exit_code": result.exit_code, "test_timed_out": result.timed_out,
                               "test_seconds": round(result.duration_s, 2), "test_limits": list(result.limits),
                               **extra}
    try:
        reward, read = await asyncio.to_thread(read_reward, logs)
    except Forged as exc:
        return VerifierResult.tampered(f"the reward file was forged: {exc}", metrics)
    metrics.update(read)
    metrics["test_output_tail"] = result.output[-800:]
    return VerifierResult(reward=reward, metrics=metrics)


async def run_tests_docker(instance: Instance, workspace: Path | None, spec: RuntimeSpec,
                           carried: dict[str, str] | None = None) -> VerifierResult:
    """:func:`run_tests` on the docker path: a fresh ``harbor_docker`` container from the task's pristine image
    over a copy of ``workspace`` (None: the image's own WORKDIR, the control) and the directories ``carried`` out
    of the agent's container ({place: host copy}, mounted there), the tests read-only at ``/tests``,
    a fresh host directory at ``/logs/verifier``, ``/tests/test.sh`` run as root from the WORKDIR. Every process
    in the container is killed before the reward is read (nothing the tested code started rewrites it after
    ``test.sh`` exits). ``metrics["image_substitution"]`` names the local base that stood in for the task's."""
    from .runtime_docker import docker_runtime_class

    task = await asyncio.to_thread(load_task, instance.data["path"])
    vspec = attrs.evolve(spec, source=str(workspace) if workspace else None, workspace=None,
                         cpu_time_s=max(int(spec.cpu_time_s), int(task.verifier_timeout_s)))
    private = Path(await asyncio.to_thread(tempfile.mkdtemp, prefix="skyrl-harbor-verify-"))
    runtime = docker_runtime_class()(vspec)
    try:
        tests, logs = await asyncio.to_thread(_private_tests, task, private)
        runtime.mounts = [(str(tests), "/tests", False), (str(logs), "/logs/verifier", True),
                          *((host, place, True) for place, host in (carried or {}).items())]
        try:
            await runtime.start()
            await runtime.prepare(instance, agent_deadline=False)
        except Exception as exc:  # noqa: BLE001 - the infrastructure (engine, image build), not the agent
            return VerifierResult.unverifiable(f"the verifier's container did not start: {exc}",
                                               {"build_reason": getattr(exc, "reason", "engine-error")})
        # as Harbor runs it: by its shebang, bash when it has none
        runner = ["bash", "-c", 'if head -c2 /tests/test.sh | grep -q "#!"; then exec /tests/test.sh; '
                                'else exec bash /tests/test.sh; fi']
        result = await runtime.exec(runner, timeout_s=task.verifier_timeout_s,
                                    env={"PYTHONNOUSERSITE": "1", **task.verifier_env})
        await asyncio.to_thread(runtime.container.kill)  # nothing left running writes the reward after test.sh
        return await _verdict(result, logs, image_substitution=runtime.substitution,
                              carried=sorted(carried or {}))
    finally:
        await runtime.close()
        await asyncio.to_thread(shutil.rmtree, private, True)


async def harbor_tests(trajectory: Any, runtime: Any, instance: Instance) -> VerifierResult:
    """Verifier ``harbor_tests``: the task's tests on a copy of the trajectory's workspace (see the module doc).
    Unverifiable when the trajectory has no ``harbor_sandbox`` workspace to copy."""
    workspace = getattr(runtime, "workspace", None)
    if getattr(runtime, "name", None) == "harbor_docker" and workspace is not None:
        spec = attrs.evolve(runtime.spec, source=None, workspace=None)
        carried = await asyncio.to_thread(runtime.carry_out)
        return await run_tests_docker(instance, Path(workspace), spec, carried)
    if not isinstance(runtime, HarborSandbox) or workspace is None:
        return VerifierResult.unverifiable(f"harbor_tests needs the trajectory's harbor_sandbox runtime "
                                           f"(got {type(runtime).__name__})")
    spec = attrs.evolve(runtime.spec, source=None, workspace=None)
    return await run_tests(instance, Path(workspace), spec)
