"""The sandbox runtime: isolation, limits, timeouts, output caps, cleanup."""

from __future__ import annotations

import asyncio
import os
import shutil
import time

import pytest

from skyrl_core.default_plugins.runtimes.sandbox import LocalRuntime, LocalSandbox
from skyrl_core.runtime import RuntimeSpec, truncate_output

needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap (bwrap) is not installed")


async def test_workspace_is_writable_and_removed_on_close():
    rt = LocalSandbox()
    await rt.start()
    res = await rt.exec("echo hi > out.txt && cat out.txt && pwd")
    assert res.exit_code == 0
    assert res.output.splitlines() == ["hi", str(rt.workspace)]
    ws = rt.workspace
    await rt.close()
    assert not ws.exists()
    await rt.close()  # twice is fine


@needs_bwrap
async def test_sandbox_has_no_network_and_read_only_system():
    import tempfile
    from pathlib import Path

    outside_dir = Path(tempfile.mkdtemp(dir="/var/tmp"))  # outside the sandbox's private /tmp
    outside = outside_dir / "outside.txt"
    async with LocalSandbox() as rt:
        assert rt.isolation == "bubblewrap"
        res = await rt.exec(f"echo x > {outside}; echo rc=$?")
        assert "rc=1" in res.output and "No such file or directory" in res.output  # not mounted at all
        assert not outside.exists()
        res = await rt.exec("echo x > /usr/skyrl-probe; echo rc=$?")
        assert "rc=1" in res.output and "Read-only file system" in res.output
        res = await rt.exec(["python3", "-c", "import socket; s=socket.create_connection(('1.1.1.1', 80), timeout=2)"])
        assert res.exit_code != 0 and "Network is unreachable" in res.output
        res = await rt.exec(["python3", "-c", "import socket; print([n for _, n in socket.if_nameindex()])"])
        assert res.output.strip() == "['lo']"
    shutil.rmtree(outside_dir)


async def test_timeout_kills_and_reports():
    async with LocalSandbox() as rt:
        t0 = time.monotonic()
        res = await rt.exec("echo start; sleep 30; echo never", timeout_s=1.0)
        assert time.monotonic() - t0 < 10
        assert res.timed_out and res.exit_code is None
        assert res.output.startswith("start") and "never" not in res.output
        assert "timed out after 1 s" in res.output


async def test_huge_output_is_truncated_with_a_note():
    async with LocalSandbox(RuntimeSpec(max_output_chars=1000)) as rt:
        res = await rt.exec(["python3", "-c", "print('a' * 10_000_000)"])
        assert res.exit_code == 0 and res.truncated
        assert len(res.output) < 1200 and "output truncated" in res.output


async def test_background_processes_do_not_outlive_the_command(tmp_path):
    marker = "skyrl_bg_marker_7731"
    async with LocalRuntime() as rt:
        res = await rt.exec(f"(exec -a {marker} sleep 60) & echo started", timeout_s=5)
        assert res.output.strip() == "started"
        await asyncio.sleep(0.2)
    ps = os.popen("ps -eo args").read()
    assert marker not in ps


async def test_cpu_and_memory_limits():
    async with LocalSandbox(RuntimeSpec(cpu_time_s=1, memory_mb=200)) as rt:
        res = await rt.exec(["python3", "-c", "x = bytearray(400 * 1024 * 1024)"])
        assert res.exit_code != 0 and "MemoryError" in res.output
        res = await rt.exec(["python3", "-c", "while True: pass"], timeout_s=20)
        assert not res.timed_out and res.exit_code != 0  # killed by RLIMIT_CPU, not by the timeout


@pytest.mark.parametrize("isolation", ["bubblewrap", "none"])
async def test_limits_are_the_specs_inside_the_command_and_nothing_runs_between_fork_and_exec(isolation, monkeypatch):
    if isolation == "bubblewrap" and shutil.which("bwrap") is None:
        pytest.skip("bubblewrap (bwrap) is not installed")
    # the limits reach the command exactly (read back with prlimit inside it), set by a shell in front of the
    # command: no preexec_fn, which ran Python between fork and exec and once hung a training run's event loop
    # on a lock another thread held at the fork
    import subprocess

    seen = []
    real = subprocess.Popen.__init__

    def spy(self, *args, **kwargs):
        seen.append(kwargs.get("preexec_fn"))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(subprocess.Popen, "__init__", spy)
    spec = RuntimeSpec(cpu_time_s=7, memory_mb=300, max_file_mb=3, isolation=isolation)
    async with LocalSandbox(spec) as rt:
        res = await rt.exec("prlimit --noheadings --output RESOURCE,SOFT,HARD --cpu --as --fsize --core")
    assert res.exit_code == 0, res.output
    limits = {line.split()[0]: line.split()[1:] for line in res.output.splitlines()}
    assert limits == {"CPU": ["7", "8"], "AS": [str(300 << 20)] * 2, "FSIZE": [str(3 << 20)] * 2, "CORE": ["0", "0"]}
    assert seen and seen[-1] is None


HOLD = ("import sys, time\nblock = b'x' * ({mib} << 20)\nprint('holding', flush=True)\ntime.sleep(30)\n")


@needs_bwrap
async def test_attack_memory_spread_over_processes_is_bounded_in_sum():
    # each process stays under the per-process cap (RLIMIT_AS); together they hold twice the sandbox's memory
    async with LocalSandbox(RuntimeSpec(memory_mb=400, cpu_time_s=60)) as rt:
        await rt.write_file("hold.py", HOLD.format(mib=200))
        start = time.monotonic()
        res = await rt.exec("for i in 1 2 3 4; do python3 hold.py & done; wait", timeout_s=25)
        assert "memory" in res.limits and res.exit_code is None and not res.timed_out, res.output
        assert "[limit memory: the command's processes held" in res.output and "over the sandbox's 400 MiB" in res.output
        assert time.monotonic() - start < 20  # killed by the watcher, not by the 30 s sleep or the timeout
        alone = await rt.exec(["python3", "-c", "b = b'x' * (200 << 20); print(len(b) >> 20)"], timeout_s=25)
        assert alone.exit_code == 0 and alone.output.strip() == "200" and not alone.limits


@needs_bwrap
async def test_attack_many_empty_files_hit_the_file_count_limit():
    async with LocalSandbox(RuntimeSpec(max_files=2000)) as rt:
        await rt.exec("mkdir -p given && touch given/f{1..500}")  # under the limit
        res = await rt.exec("mkdir spam && cd spam && for i in $(seq 30); do touch $(seq -f \"f$i-%g\" 200); done",
                            timeout_s=60)
        assert "files" in res.limits and "[limit files: the workspace holds" in res.output, res.output
        again = await rt.exec("echo still here")
        assert "files" in again.limits and again.exit_code is None
        cleanup = await rt.exec("cd spam && for f in *; do rm \"$f\"; done; cd .. && rmdir spam && echo removed",
                                timeout_s=60)  # slow on purpose: polled many times while still over the limit
        assert cleanup.output.startswith("removed"), cleanup.output
        ok = await rt.exec("echo fine")
        assert ok.exit_code == 0 and not ok.limits


async def test_in_place_workspace_is_kept(tmp_path):
    (tmp_path / "a.txt").write_text("hello")
    async with LocalSandbox(RuntimeSpec(workspace=str(tmp_path))) as rt:
        assert (await rt.exec("cat a.txt")).output == "hello"
        await rt.write_file("sub/b.txt", "bee")
    assert (tmp_path / "sub" / "b.txt").read_text() == "bee"
    async with LocalSandbox(RuntimeSpec(workspace=str(tmp_path))) as rt:
        with pytest.raises(ValueError, match="leaves the workspace"):
            await rt.write_file("../escape.txt", "no")
    assert not (tmp_path.parent / "escape.txt").exists()


async def test_source_is_copied_into_a_fresh_workspace(tmp_path):
    (tmp_path / "repo").mkdir()
    (tmp_path / "repo" / "f.py").write_text("print(3)")
    async with LocalSandbox(RuntimeSpec(source=str(tmp_path / "repo"))) as rt:
        assert rt.workspace != tmp_path / "repo"
        assert (await rt.exec("python3 f.py")).output.strip() == "3"


def test_truncate_output_keeps_head_and_tail():
    text = "".join(str(i % 10) for i in range(100))
    out, cut = truncate_output(text, 30)
    assert cut and out.startswith(text[:20]) and out.endswith(text[-10:]) and "70 characters omitted of 100" in out
    assert truncate_output("short", 30) == ("short", False)


def test_a_second_cut_keeps_the_first_notes_true_size():
    """Issue #32 fault 4: a cut of an already cut output counted the characters of the excerpt."""
    written = "".join(chr(97 + i % 26) for i in range(50_000_000 // 1000)) * 1000  # what a command wrote: 50 MB
    first, _ = truncate_output(written[:64_000], 16_000, produced_bytes=len(written))
    second, cut = truncate_output(first, 4096)
    assert cut and "[... output truncated: the command wrote 50000000 bytes; its first 2730 and last 1366 " in second
    assert second.startswith(written[:2730] + "\n[") and second.endswith("]\n" + written[64_000 - 1366:64_000])
    chars, _ = truncate_output("x" * 100_000, 16_000)
    assert "96000 characters omitted of 100000" in truncate_output(chars, 4000)[0]


@needs_bwrap
async def test_sandbox_identity_files_come_back_after_a_cleanup_removed_them():
    """The per-process /etc/passwd and /etc/group the sandbox mounts are made again when a temp-dir cleanup (a
    test's, a benchmark's) deleted them; before, every later sandbox in the process failed to start."""
    from skyrl_core.default_plugins.runtimes import sandbox

    shutil.rmtree(sandbox._identity_dir())
    async with LocalSandbox() as rt:
        res = await rt.exec(["sh", "-c", "id -un; grep -c . /etc/passwd"])
    assert res.exit_code == 0 and res.output.split() == ["sandbox", "2"]


@needs_bwrap
async def test_attack_the_sandbox_identity_files_are_read_only_inside():
    """Agent code cannot rewrite the passwd/group files every later sandbox in the process mounts (giving itself
    another user name, or a shell for a second account)."""
    from pathlib import Path

    from skyrl_core.default_plugins.runtimes import sandbox

    host_passwd = Path(sandbox._identity_dir(), "passwd")
    before = host_passwd.read_text()
    async with LocalSandbox() as rt:
        res = await rt.exec(["sh", "-c", "echo 'root2:x:0:0::/:/bin/sh' 2>/dev/null >> /etc/passwd; echo $?; "
                                         "rm -f /etc/group 2>/dev/null; echo $?; id -un"])
    codes = res.output.split()
    assert codes[0] != "0" and codes[1] != "0" and codes[2] == "sandbox"
    assert host_passwd.read_text() == before

