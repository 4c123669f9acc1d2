"""Attacks on the sandbox runtime itself: privilege, what it can see and reach, and exhausting the host."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest

from skyrl_core.default_plugins.runtimes import sandbox as rt_mod
from skyrl_core.default_plugins.runtimes.sandbox import LocalSandbox, SandboxUnavailable
from skyrl_core.runtime import RuntimeSpec


async def run(cmd: str, spec: RuntimeSpec | None = None, timeout_s: float = 30.0):
    async with LocalSandbox(spec or RuntimeSpec()) as rt:
        return await rt.exec(cmd, timeout_s=timeout_s)


# -- privilege ---------------------------------------------------------------------------------------------------
async def test_no_capabilities_and_an_unprivileged_uid():
    res = await run("id -u; grep -E '^Cap(Eff|Prm|Bnd|Amb)' /proc/self/status")
    lines = res.output.split()
    assert lines[0] == "1000"
    assert [v for k, v in zip(lines[1::2], lines[2::2])] == ["0000000000000000"] * 4


async def test_remounting_root_read_write_fails(outside):
    res = await run("mount -o remount,bind,rw / ; echo rc=$?; mount -o remount,rw /usr; echo rc=$?; "
                    "echo x > /usr/skyrl-escape; echo rc=$?")
    assert res.output.count("rc=0") == 0 and res.output.count("rc=") == 3
    assert not Path("/usr/skyrl-escape").exists()


async def test_no_nested_user_namespace_to_regain_capabilities():
    res = await run("unshare --user --map-root-user id -u; echo rc=$?")
    assert "rc=0" not in res.output


async def test_host_processes_are_invisible_and_cannot_be_traced():
    victim = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        ptrace = ("import ctypes, sys; libc = ctypes.CDLL(None, use_errno=True); "
                  f"r = libc.ptrace(16, {victim.pid}, 0, 0); print('attach', r, ctypes.get_errno())")
        res = await run(f"ls /proc/{victim.pid} >/dev/null 2>&1; echo proc=$?; kill -0 {victim.pid}; echo kill=$?; "
                        f"python3 -c \"{ptrace}\"")
        assert "proc=2" in res.output and "kill=1" in res.output
        assert "attach -1 3" in res.output  # ESRCH: no such process in the sandbox's pid namespace
        assert victim.poll() is None
    finally:
        victim.kill()


# -- what it can see ---------------------------------------------------------------------------------------------
async def test_home_directory_and_other_host_files_are_not_mounted(outside, monkeypatch):
    fake_home = outside / "home"
    canary = fake_home / ".ssh" / "id_ed25519"
    canary.parent.mkdir(parents=True)
    canary.write_text("SKYRL-CANARY-KEY")
    for p in (fake_home, canary.parent):
        p.chmod(0o755)
    canary.chmod(0o644)  # readable by anyone who can see it: only the mount list keeps it out
    monkeypatch.setenv("HOME", str(fake_home))
    real_home = Path(os.path.expanduser("~root" if os.geteuid() == 0 else "~")) / f".skyrl-canary-{outside.name}"
    real_home.write_text("SKYRL-CANARY-HOME")
    try:
        res = await run(f"cat {canary}; cat {real_home}; cat ~/.ssh/id_ed25519; ls /var /run /srv /mnt /opt; "
                        f"ls {Path(__file__).resolve().parents[2]}; cat /etc/shadow /etc/hostname; echo done")
    finally:
        real_home.unlink()
    assert "SKYRL-CANARY" not in res.output
    # the checkout shows at most the skeleton leading to a venv inside it, never its files
    assert "README.md" not in res.output and "pyproject.toml" not in res.output
    assert res.output.count("No such file or directory") >= 10, res.output


async def test_the_workspace_is_the_only_writable_place():
    res = await run("touch a && echo ws=ok; touch /usr/x /etc/x /x 2>&1 | wc -l; touch /tmp/x && echo tmp=ok")
    assert "ws=ok" in res.output and "tmp=ok" in res.output
    assert res.output.splitlines()[1].strip() == "3"


# -- what it can reach -------------------------------------------------------------------------------------------
async def test_a_server_on_host_localhost_is_unreachable():
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"SKYRL-HOST-SECRET")

        def log_message(self, *args):
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    port = server.server_address[1]
    try:
        import urllib.request

        assert urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5).read() == b"SKYRL-HOST-SECRET"
        probe = (f"import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:{port}/', "
                 f"timeout=3).read())")
        res = await run(f"python3 -c \"{probe}\"")
        assert res.exit_code != 0 and "SKYRL-HOST-SECRET" not in res.output
        assert "Connection refused" in res.output
    finally:
        server.shutdown()


async def test_host_unix_sockets_are_unreachable(outside):
    path = outside / "host.sock"
    listeners = []
    for address in (str(path), "\0skyrl-abstract-" + outside.name):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.bind(address)
        s.listen(1)
        listeners.append(s)
    path.chmod(0o777)
    try:
        probe = ("import socket, sys\nfor a in sys.argv[1:]:\n    s = socket.socket(socket.AF_UNIX)\n"
                 "    try:\n        s.connect(a.replace('@', chr(0)))\n        print('connected')\n"
                 "    except OSError as e:\n        print(type(e).__name__)\n")
        async with LocalSandbox() as rt:
            await rt.write_file("probe.py", probe)
            res = await rt.exec(["python3", "probe.py", str(path), "@skyrl-abstract-" + outside.name])
        assert "connected" not in res.output
        assert res.output.split() == ["FileNotFoundError", "ConnectionRefusedError"]
    finally:
        for s in listeners:
            s.close()


async def test_no_network_interfaces_but_loopback():
    res = await run("python3 -c \"import socket; print([n for _, n in socket.if_nameindex()])\"")
    assert res.output.strip() == "['lo']"


# -- exhausting the host -----------------------------------------------------------------------------------------
async def test_a_fork_bomb_is_bounded_and_leaves_nothing_behind():
    counter = ("import os, time\nn = 0\nwhile True:\n    try:\n        pid = os.fork()\n    except OSError:\n"
               "        break\n    if pid == 0:\n        time.sleep(30)\n        os._exit(0)\n    n += 1\nprint('forked', n)\n")
    spec = RuntimeSpec(max_processes=64)
    async with LocalSandbox(spec) as rt:
        await rt.write_file("count.py", counter)
        res = await rt.exec(["python3", "count.py"], timeout_s=30)
        forked = int(res.output.split("forked")[1].split()[0])
        assert 10 < forked < 64
        bomb = await rt.exec("bomb() { bomb | bomb & }; bomb", timeout_s=5)
        assert bomb.duration_s < 20
    await asyncio.sleep(0.5)
    left = subprocess.run(["pgrep", "-f", "count.py"], capture_output=True, text=True).stdout.split()
    assert left == []


async def test_filling_the_workspace_is_stopped_and_named():
    spec = RuntimeSpec(max_file_mb=16, disk_mb=48)
    async with LocalSandbox(spec) as rt:
        big = await rt.exec("head -c 100M /dev/zero > one; ls -l one", timeout_s=30)
        assert "file_size" in big.limits and "file size limit" in big.output
        assert (rt.workspace / "one").stat().st_size == 16 * 1024 * 1024
        many = await rt.exec("for i in $(seq 40); do head -c 15M /dev/zero > f$i; sleep 0.05; done; echo finished",
                             timeout_s=60)
        assert "disk" in many.limits and "finished" not in many.output
        assert "over its 48 MiB" in many.output
        assert len(list(rt.workspace.glob("f*"))) < 40
        assert rt.limit_hits["disk"] == 1 and rt.limit_hits["file_size"] == 1


async def test_filling_the_private_tmp_is_bounded():
    res = await run("head -c 200M /dev/zero > /tmp/fill; ls -l /tmp/fill | awk '{print $5}'",
                    RuntimeSpec(tmp_mb=16))
    assert "No space left on device" in res.output
    assert int(res.output.split()[-1]) <= 16 * 1024 * 1024


async def test_memory_and_cpu_limits_are_named():
    async with LocalSandbox(RuntimeSpec(cpu_time_s=1, memory_mb=256)) as rt:
        mem = await rt.exec(["python3", "-c", "x = bytearray(1024 * 1024 * 1024)"])
        assert "memory" in mem.limits
        cpu = await rt.exec(["python3", "-c", "while True: pass"], timeout_s=20)
        assert not cpu.timed_out and "cpu_time" in cpu.limits


# -- the Runtime API ---------------------------------------------------------------------------------------------
async def test_path_traversal_through_the_runtime_api(outside):
    async with LocalSandbox() as rt:
        sibling = Path(str(rt.workspace) + "-evil")
        for bad in ("../x", f"../{rt.workspace.name}-evil/x", str(outside / "x"), "/etc/passwd"):
            with pytest.raises(ValueError, match="leaves the workspace"):
                await rt.write_file(bad, "pwned")
        await rt.exec(f"ln -s {outside} link")
        with pytest.raises(ValueError, match="leaves the workspace"):
            await rt.write_file("link/x", "pwned")
        with pytest.raises(ValueError, match="leaves the workspace"):
            await rt.read_file("link/../../etc/passwd")
        await rt.write_file("inside/ok.txt", "fine")
        assert (rt.workspace / "inside" / "ok.txt").read_text() == "fine"
    assert not sibling.exists() and not (outside / "x").exists()


# -- isolation is explicit ---------------------------------------------------------------------------------------
async def test_without_bubblewrap_the_sandbox_refuses_to_start(monkeypatch):
    monkeypatch.setattr(rt_mod, "_PROBE", {})
    real_which = rt_mod.shutil.which
    monkeypatch.setattr(rt_mod.shutil, "which", lambda name: None if name == "bwrap" else real_which(name))
    with pytest.raises(SandboxUnavailable) as err:
        await LocalSandbox().start()
    assert "apt-get install bubblewrap" in str(err.value) and "runtime.isolation: none" in str(err.value)


async def test_isolation_none_is_logged_once_per_run(monkeypatch, caplog):
    monkeypatch.setattr(rt_mod, "_LOGGED_ONCE", set())
    caplog.set_level(logging.WARNING, logger="skyrl_core.default_plugins.runtimes.sandbox")
    for _ in range(3):
        async with LocalSandbox(RuntimeSpec(isolation="none")) as rt:
            assert rt.isolation == "none"
            assert (await rt.exec("echo plain")).output.strip() == "plain"
    assert sum("PLAIN HOST SUBPROCESSES" in r.getMessage() for r in caplog.records) == 1


def test_an_unknown_isolation_is_refused():
    with pytest.raises(Exception, match="runtime.isolation 'docker' is not valid"):
        LocalSandbox(RuntimeSpec(isolation="docker"))
