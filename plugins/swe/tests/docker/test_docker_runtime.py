"""The docker runtime against a real engine: its trust boundary (the sandbox suite's attacks, repeated), its
limits, the patch computed inside the container, removal exactly once (also when cancelled) and a dead container
ending only its own trajectory. Runs on a busybox image (a few MB) except where Python is needed."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import threading
from http.server import HTTPServer, SimpleHTTPRequestHandler
from pathlib import Path

import pytest

from skyrl_core.runtime import RuntimeLost, RuntimeSpec
from skyrl_swe.docker_runtime import REMOVALS, DockerRuntime

pytestmark = pytest.mark.timeout(300)


def runtime(image: str, **spec) -> DockerRuntime:
    options = {"image": image, **spec.pop("options", {})}
    return DockerRuntime(RuntimeSpec(type="docker", options=options, **spec), instance={"instance_id": "t-1"})


async def sh(image: str, script: str, timeout_s: float = 30, **spec):
    async with runtime(image, **spec) as rt:
        return await rt.exec(["sh", "-c", script], timeout_s=timeout_s)


# -- who the agent is and what it can change ---------------------------------------------------------------------
async def test_no_capabilities_an_unprivileged_uid_and_no_new_privileges(busybox_image):
    res = await sh(busybox_image, "id -u; grep -E '^Cap(Eff|Prm|Bnd|Amb)|^NoNewPrivs' /proc/self/status")
    lines = res.output.split()
    assert lines[0] == "1000"
    assert lines[1:] == ["CapPrm:", "0000000000000000", "CapEff:", "0000000000000000", "CapBnd:",
                         "0000000000000000", "CapAmb:", "0000000000000000", "NoNewPrivs:", "1"]


async def test_the_root_is_read_only_and_the_workspace_and_tmp_are_writable(busybox_image):
    res = await sh(busybox_image, "touch /testbed/a && echo ws=ok; touch /bin/x /etc/x /x 2>&1 | grep -c 'Read-only'; "
                                  "touch /tmp/x && echo tmp=ok; mount -o remount,rw / ; echo rc=$?")
    assert "ws=ok" in res.output and "tmp=ok" in res.output
    assert "3" in [line.strip() for line in res.output.splitlines()]  # all three writes refused
    assert "rc=0" not in res.output


async def test_no_nested_namespace_or_setuid_to_regain_root(busybox_image):
    res = await sh(busybox_image, "unshare -U -r id -u; echo rc=$?; setpriv --reuid=0 id -u; echo rc=$?")
    assert res.output.count("rc=") == 2 and "rc=0" not in res.output


async def test_host_files_and_the_docker_socket_are_not_there(busybox_image, tmp_path):
    canary = Path("/root") / f".skyrl-canary-{tmp_path.name}"
    canary.write_text("SKYRL-CANARY-HOME")
    try:
        res = await sh(busybox_image, f"cat {canary}; cat /etc/shadow; ls /var/run/docker.sock /run/docker.sock "
                                      f"{Path.cwd()}; cat /proc/1/cmdline | tr '\\0' ' '")
    finally:
        canary.unlink()
    assert "SKYRL-CANARY" not in res.output
    assert res.output.count("No such file or directory") >= 4
    assert "sleep infinity" in res.output  # pid 1 is the container's own init, not the host's


async def test_a_server_on_host_localhost_and_the_internet_are_unreachable(busybox_image, tmp_path):
    import functools

    (tmp_path / "secret").write_text("SKYRL-HOST-SECRET")
    handler = functools.partial(SimpleHTTPRequestHandler, directory=str(tmp_path))
    server = HTTPServer(("0.0.0.0", 0), handler)
    port = server.server_address[1]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/secret", timeout=10) as resp:  # the host reaches it
        assert resp.read() == b"SKYRL-HOST-SECRET"
    bridge = subprocess.run(["sh", "-c", "ip -4 addr show docker0 | awk '/inet /{print $2}' | cut -d/ -f1"],
                            capture_output=True, text=True).stdout.strip() or "172.17.0.1"
    try:
        res = await sh(busybox_image, f"wget -q -T 3 -O - http://127.0.0.1:{port}/secret; echo rc=$?; "
                                      f"wget -q -T 3 -O - http://{bridge}:{port}/secret; echo rc=$?; "
                                      f"wget -q -T 3 -O - http://deb.debian.org/; echo rc=$?; echo links=$(ip -o link | wc -l)")
    finally:
        server.shutdown()
    assert "SKYRL-HOST-SECRET" not in res.output
    assert res.output.count("rc=") == 3 and "rc=0" not in res.output
    assert "links=1" in res.output, res.output  # loopback only


# -- exhausting the host ---------------------------------------------------------------------------------------------
async def test_a_fork_bomb_is_bounded_and_named(busybox_image, docker_engine):
    async with runtime(busybox_image, max_processes=32) as rt:
        bomb = asyncio.ensure_future(rt.exec(["sh", "-c", "for i in $(seq 100); do sleep 30 & done; wait"],
                                             timeout_s=10))
        most = 0
        while not bomb.done():  # counted by the engine, from outside, while the command runs
            most = max(most, len((await asyncio.to_thread(docker_engine.api.top, rt.container_name))["Processes"]))
            await asyncio.sleep(0.05)
        assert 10 < most <= 32
        res = await bomb
        assert "processes" in res.limits and "at most 32 processes" in res.output
        # what the command left behind ended with it: the container's init and its keeper remain
        assert len(docker_engine.api.top(rt.container_name)["Processes"]) == 2


async def test_file_size_disk_and_tmp_limits(busybox_image):
    async with runtime(busybox_image, max_file_mb=4, disk_mb=24, tmp_mb=2) as rt:
        big = await rt.exec(["sh", "-c", "head -c 20000000 /dev/zero > /testbed/one; ls -l /testbed/one"])
        assert "file_size" in big.limits
        assert (rt.workspace / "one").stat().st_size == 4 * 1024 * 1024
        many = await rt.exec(["sh", "-c", "for i in $(seq 40); do head -c 3000000 /dev/zero > /testbed/f$i; "
                                          "sleep 0.1; done; echo finished"], timeout_s=60)
        assert "disk" in many.limits and "finished" not in many.output and "over its 24 MiB" in many.output
        assert len(list(rt.workspace.glob("f*"))) < 40
        freed = await rt.exec(["sh", "-c", "rm /testbed/f* && echo freed"])
        assert freed.output.strip() == "freed" and not freed.limits  # deleting the excess is never killed
        tmp = await rt.exec(["sh", "-c", "head -c 3000000 /dev/zero > /tmp/fill; ls -l /tmp/fill"])
        assert "No space left on device" in tmp.output or "I/O error" in tmp.output  # busybox says the latter
        assert int(tmp.output.split()[-5]) <= 2 * 1024 * 1024
        assert rt.limit_hits["disk"] == 1 and rt.limit_hits["file_size"] == 1


async def test_memory_cpu_wall_time_and_output_limits_are_named(base_image):
    async with runtime(base_image, memory_mb=128, cpu_time_s=2, max_output_chars=2000,
                       options={"workdir": "/root"}) as rt:
        mem = await rt.exec(["python3", "-c", "x = bytearray(512 * 1024 * 1024); x[::4096] = b'a' * len(x[::4096])"])
        assert "memory" in mem.limits and mem.exit_code == 137, mem
        cpu = await rt.exec(["python3", "-c", "while True: pass"], timeout_s=20)
        assert "cpu_time" in cpu.limits and not cpu.timed_out, cpu
        wall = await rt.exec("sleep 30", timeout_s=2)
        assert wall.timed_out and wall.exit_code is None and wall.duration_s < 6
        out = await rt.exec("head -c 5000000 /dev/zero | tr '\\0' a", timeout_s=20)
        assert out.truncated and len(out.output) < 2400 and out.output_bytes == 5000000


async def test_many_empty_files_hit_the_file_count_limit(busybox_image):
    async with runtime(busybox_image, max_files=500) as rt:
        res = await rt.exec(["sh", "-c", "mkdir /testbed/spam && cd /testbed/spam && seq 1 3000 | xargs touch && "
                                         "sleep 5; echo finished"], timeout_s=30)
        assert "files" in res.limits and "finished" not in res.output and "over its 500" in res.output, res.output
        freed = await rt.exec(["sh", "-c", "rm -r /testbed/spam && echo freed"])
        assert freed.output.strip() == "freed" and not freed.limits


async def test_path_traversal_through_the_runtime_api(busybox_image, tmp_path):
    async with runtime(busybox_image) as rt:
        for bad in ("../x", "/etc/passwd", str(tmp_path / "x")):
            with pytest.raises(ValueError, match="leaves the workspace"):
                await rt.write_file(bad, "pwned")
        await rt.exec(["ln", "-s", "/etc", "/testbed/link"])  # a link the agent made points at host /etc there
        with pytest.raises(ValueError, match="leaves the workspace"):
            await rt.write_file("link/pwned", "x")
        assert not Path("/etc/pwned").exists()
        await rt.write_file("inside/ok.txt", "fine\n")
        res = await rt.exec(["sh", "-c", "cat /testbed/inside/ok.txt && echo more >> /testbed/inside/ok.txt && echo w"])
        assert res.output.split() == ["fine", "w"]  # files the host wrote are handed to the container's user


# -- the patch -------------------------------------------------------------------------------------------------------
async def test_the_patch_is_computed_inside_against_a_read_only_baseline(base_image, tmp_path):
    from skyrl_swe.images import image_archive  # noqa: F401  (the module the runtime copies the tree with)

    async with runtime(base_image, options={"workdir": "/etc/apt"}) as rt:
        await rt.exec("echo '# agent edit' >> sources.list.d/debian.sources 2>/dev/null || echo x > new.txt; "
                      "echo new > added.txt; rm -f /skyrl/base.git/HEAD; echo rc=$?")
        # hostile git settings in the work tree's own .git: never consulted for the patch
        await rt.exec(f"git config core.fsmonitor 'touch {tmp_path}/pwned'; echo '* diff=evil' > .gitattributes")
        patch = await rt.diff()
    assert "+new" in patch and "added.txt" in patch and ".gitattributes" in patch
    assert not (tmp_path / "pwned").exists()


async def test_the_patch_leaves_out_nested_repositories_survives_gitmodules_and_is_bounded(base_image, tmp_path):
    from skyrl_swe.git_safety import MAX_PATCH_BYTES, PatchTooLarge
    from skyrl_swe.verifiers import split_patch

    marker = tmp_path / "update-ran"
    async with runtime(base_image, options={"workdir": "/etc/apt"}) as rt:
        res = await rt.exec(
            "printf 'x\\n' > 'with space.txt' && : > empty.txt && mkdir -p nested/empty && git -C nested/empty init -q"
            f" && printf '[submodule \"s\"]\\n\\tpath = nested\\n\\turl = ./nested\\n\\tupdate = !touch {marker}\\n'"
            " > .gitmodules && echo ok")
        assert res.output.strip().endswith("ok"), res.output
        patch = await rt.diff()
        assert sorted(p for p, _ in split_patch(patch)) == [".gitmodules", "empty.txt", "with space.txt"], patch
        assert not marker.exists()
        await rt.exec(f"head -c {MAX_PATCH_BYTES + 4096} /dev/zero | tr '\\0' a | fold -w 100 > dump.txt")
        with pytest.raises(PatchTooLarge, match="over the patch bound"):
            await rt.diff()


async def test_the_workspace_history_holds_only_the_base_commit(base_image):
    async with runtime(base_image, options={"workdir": "/etc/apt"}) as rt:
        res = await rt.exec("git log --all --oneline | wc -l; git remote | wc -l")
    assert res.output.split() == ["1", "0"]


# -- life cycle ------------------------------------------------------------------------------------------------------
async def test_close_removes_the_container_exactly_once(busybox_image, docker_engine):
    rt = runtime(busybox_image)
    await rt.start()
    name = rt.container_name
    await asyncio.gather(rt.close(), rt.close(), rt.close())
    await rt.close()
    assert rt.removals == 1 and REMOVALS[name] == 1
    assert not docker_engine.containers.list(all=True, filters={"name": name})
    assert not Path(rt._tmp).exists()


@pytest.mark.parametrize("delay", [0.0, 0.2, 0.5])
async def test_a_cancelled_prepare_leaves_nothing_behind(busybox_image, docker_engine, delay):
    rt = runtime(busybox_image)
    task = asyncio.ensure_future(rt.start())
    await asyncio.sleep(delay)
    task.cancel()  # at 0 s before the copy, later during it or during `docker run` (or after, on a fast machine)
    try:
        await task
    except asyncio.CancelledError:
        pass
    closing = asyncio.ensure_future(rt.close())
    await asyncio.sleep(0)
    closing.cancel()  # a cancelled close still finishes the removal
    with pytest.raises(asyncio.CancelledError):
        await closing
    await rt.close()
    assert rt.removals <= 1 and REMOVALS.get(rt.container_name, 0) == rt.removals
    assert not docker_engine.containers.list(all=True, filters={"name": rt.container_name})


async def test_a_killed_container_raises_runtime_lost(busybox_image, docker_engine):
    async with runtime(busybox_image) as rt:
        docker_engine.api.kill(rt.container_name)
        with pytest.raises(RuntimeLost, match="not running"):
            await rt.exec(["true"])
    assert rt.removals == 1


async def test_no_engine_and_no_image_are_named_errors(monkeypatch, busybox_image):
    from skyrl_swe.data import RepoUnavailable

    with pytest.raises(RepoUnavailable, match="skyrl swe build-images"):
        async with runtime("skyrl-no-such-image:latest"):
            pass
    nowhere = DockerRuntime(RuntimeSpec(type="docker", options={"allow_clone": False}),
                            instance={"instance_id": "nowhere__x-1", "repo": "", "base_commit": ""})
    with pytest.raises(RepoUnavailable, match="building one failed: .*no repository source reachable"):
        async with nowhere:
            pass
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    with pytest.raises(RuntimeError, match="no Docker engine answers"):
        async with runtime(busybox_image):
            pass


def test_a_unix_socket_of_the_host_is_not_reachable(busybox_image, tmp_path):
    path = tmp_path / "host.sock"
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(path))
    s.listen(1)
    try:
        res = asyncio.run(sh(busybox_image, f"ls {path}; nc -U {path} </dev/null; echo rc=$?"))
    finally:
        s.close()
    assert "No such file or directory" in res.output and "rc=0" not in res.output


# -- background processes: the bash tool's promise, kept in a container ------------------------------------------
async def test_background_and_setsid_processes_end_with_their_command_and_leave_no_zombies(base_image,
                                                                                          docker_engine):
    from skyrl_core import ToolContext
    from skyrl_swe.tools import bash_tool

    async with runtime(base_image, max_processes=64, options={"workdir": "/root"}) as rt:
        ctx = ToolContext(runtime=rt)
        # 80 background processes over 20 commands: more than the 64-process budget if any stayed (as a zombie)
        for _ in range(20):
            res = await bash_tool.call({"command": "for i in 1 2 3 4; do sleep 300 & done; echo started"}, ctx)
            assert "started" in res.output and "processes" not in res.metadata["limits"], res.output
        res = await bash_tool.call({"command": "setsid sleep 301 & setsid -f sh -c 'sleep 302' ; echo detached"}, ctx)
        assert "detached" in res.output
        res = await bash_tool.call({"command": "ps -eo pid,ppid,stat,args | grep -v ' ps ' ; "
                                               "ls /proc | grep -c '^[0-9]'"}, ctx)
        # from outside: nothing but the container's init, its keeper and this last command's processes
        top = docker_engine.api.top(rt.container_name)["Processes"]
        assert not [p for p in top if "sleep 30" in " ".join(p)], top
        assert " Z" not in res.output and "defunct" not in res.output, res.output
