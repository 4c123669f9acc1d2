"""Stopping ``skyrl tinker serve-local`` stops its server (#37): ``kill`` (SIGTERM) of the foreground process
stops the API and its engine child, and even ``kill -9`` leaves none behind, since both roles of ``launch.py``
exit once the process that started them is gone. The server's two processes are stood in for by processes that
run ``launch.py``'s own ``die_with_parent`` (the real server needs its JAX venv; the slow tests use it)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from skyrl_tinker.local_server import LAUNCHER

# one role of launch.py: the parent watch, then (for the API) an engine child that runs it too, then idle
ROLE = textwrap.dedent(f"""
    import runpy, subprocess, sys, time
    from pathlib import Path
    launch = runpy.run_path({str(LAUNCHER)!r})
    launch["die_with_parent"](0.1)
    workdir, role = Path(sys.argv[1]), sys.argv[2]
    if role == "api":
        subprocess.Popen([sys.executable, "-c", sys.argv[3],
                          str(workdir), "engine", ""])
    (workdir / f"{{role}}.pid").write_text(str(__import__("os").getpid()))
    time.sleep(600)
""")

SERVE = textwrap.dedent("""
    import sys
    from pathlib import Path
    from skyrl_tinker.local_server import LocalTinkerServer, main_serve

    class Stub(LocalTinkerServer):
        def command(self):
            return [sys.executable, "-c", ROLE, str(self.workdir), "api", ROLE]

        def healthy(self):
            return (self.workdir / "engine.pid").exists()

    main_serve(Stub("smollm2-135m-instruct", Path(sys.argv[1]), venv=sys.executable, port=1, startup_timeout_s=120))
""")


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _serve(tmp_path):
    env = dict(os.environ, SKYRL_LOAD_PLUGINS="tinker")
    proc = subprocess.Popen([sys.executable, "-c", f"ROLE = {ROLE!r}\n" + SERVE, str(tmp_path)], env=env,
                            stderr=subprocess.PIPE, text=True)
    line = proc.stderr.readline()  # "local Tinker server for ... at ..." once the server answers
    assert "local Tinker server" in line, line + proc.stderr.read()
    pids = [int((tmp_path / f"{role}.pid").read_text()) for role in ("api", "engine")]
    assert all(_alive(p) for p in pids)
    return proc, pids


def _gone_within(pids: list[int], seconds: float) -> list[int]:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and any(_alive(p) for p in pids):
        time.sleep(0.1)
    return [p for p in pids if _alive(p)]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["kill", "kill-9"])
def test_stopping_serve_local_stops_the_api_and_its_engine(tmp_path, sig):
    proc, pids = _serve(tmp_path)
    try:
        os.kill(proc.pid, sig)
        proc.wait(60)
        left = _gone_within(pids, 30)  # the parent watch polls every 0.1 s here
        assert not left, f"{signal.Signals(sig).name} of serve-local left processes {left} running"
        if sig == signal.SIGTERM:
            assert proc.returncode == 0  # a clean stop, not death by the signal
    finally:
        for pid in pids:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
