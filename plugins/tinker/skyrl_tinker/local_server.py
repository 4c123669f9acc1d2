"""A local Tinker-compatible server on 127.0.0.1, for users without a Tinker account and for CI.

The server is the open ``skyrl`` 0.4.0 distribution's Tinker API (``skyrl.tinker.api``) with its JAX backend on
the CPU, run from its own venv (``setup-venv.sh`` builds it; ``skyrl tinker setup-server`` calls that) by this
plugin's launcher (``server/launch.py``). :class:`LocalTinkerServer` starts it for a local model directory,
waits for ``/api/v1/healthz``, and stops the whole process group.

Files under ``workdir``: ``server.log`` (API and engine output), ``peak_rss_mb.txt``, ``tinker.db`` (the server's SQLite database:
sessions, futures, checkpoint records) and ``checkpoints/`` (saved states and sampler weights).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from skyrl_core.errors import SkyrlError

log = logging.getLogger(__name__)

SERVER_DIR = Path(__file__).parent / "server"
LAUNCHER = SERVER_DIR / "launch.py"
SETUP_SCRIPT = SERVER_DIR / "setup-venv.sh"
LOCAL_API_KEY = "tml-local"


def default_venv() -> Path:
    """``$SKYRL_TINKER_SERVER_VENV``, else ``<skyrl cache dir>/tinker-server-venv``."""
    env = os.environ.get("SKYRL_TINKER_SERVER_VENV")
    if env:
        return Path(env)
    from skyrl_core.default_plugins.engines.models import cache_dir

    return cache_dir() / "tinker-server-venv"


def setup_venv(venv: str | os.PathLike | None = None) -> Path:
    """Build (or update) the server venv with ``setup-venv.sh``; returns its path. Raises SkyrlError with the
    script's exit code when it fails. Several minutes on a fresh machine (torch, jax, transformers)."""
    venv = Path(venv or default_venv())
    proc = subprocess.run(["bash", str(SETUP_SCRIPT), str(venv)])
    if proc.returncode != 0:
        raise SkyrlError(f"{SETUP_SCRIPT} {venv} failed with exit code {proc.returncode}")
    return venv


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LocalTinkerServer:
    """The open Tinker server for ``model`` (a bundled name or a local HF directory) on ``host:port``.

    ``base_model`` is the name clients use (default: :func:`skyrl_tinker.client.default_base_model`), the
    weights come from the resolved local directory. ``max_lora_adapters`` must be >= 2 (slot 0 is the server's);
    ``max_lora_rank`` bounds the rank a client may ask for; ``train_micro_batch_size`` and
    ``sample_max_num_sequences`` bound what the JAX backend computes at once and ``loss_chunk_size`` the tokens
whose [tokens, vocab] logits exist at once (memory: a 49k vocabulary makes these the largest arrays); ``max_rss_mb`` caps the
    server's resident memory (0: no cap). Use as a context manager or call :meth:`start` / :meth:`stop`.
    """

    def __init__(self, model: str, workdir: str | os.PathLike, venv: str | os.PathLike | None = None,
                 host: str = "127.0.0.1", port: int = 0, base_model: str | None = None,
                 max_lora_adapters: int = 4, max_lora_rank: int = 32, train_micro_batch_size: int = 2,
                 sample_max_num_sequences: int = 8, loss_chunk_size: int = 256, max_rss_mb: int = 0,
                 startup_timeout_s: float = 300.0) -> None:
        from .client import default_base_model

        if max_lora_adapters < 2:
            raise SkyrlError(f"max_lora_adapters must be at least 2 (slot 0 is reserved), got {max_lora_adapters}")
        self.model = model
        self.base_model = base_model or default_base_model(model)
        self.workdir = Path(workdir).absolute()
        self.venv = Path(venv or default_venv()).absolute()  # the server runs with cwd=workdir
        self.host = host
        self.port = port or free_port()
        self.backend_config = {"max_lora_adapters": max_lora_adapters, "max_lora_rank": max_lora_rank,
                               "train_micro_batch_size": train_micro_batch_size,
                               "sample_max_num_sequences": sample_max_num_sequences,
                               "loss_chunk_size": loss_chunk_size}
        self.max_rss_mb = max_rss_mb
        self.startup_timeout_s = startup_timeout_s
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.workdir / "server.log"

    def command(self) -> list[str]:
        from skyrl_core.default_plugins.engines.models import resolve_model

        python = self.venv / "bin" / "python"
        if not python.is_file():
            raise SkyrlError(f"no Tinker server venv at {self.venv}: build it with `skyrl tinker setup-server "
                             f"--venv {self.venv}` (or bash {SETUP_SCRIPT} {self.venv})")
        weights = resolve_model(self.model)
        return [str(python), str(LAUNCHER), "api", "--base-model", self.base_model,
                "--base-model-checkpoint-path", str(weights), "--backend", "jax",
                "--backend-config", json.dumps(self.backend_config), "--host", self.host, "--port", str(self.port),
                "--database-url", f"sqlite:///{self.workdir / 'tinker.db'}",
                "--checkpoints-base", str(self.workdir / "checkpoints"), "--max-rss-mb", str(self.max_rss_mb)]

    def start(self) -> "LocalTinkerServer":
        """Start the server and wait until it answers ``/api/v1/healthz``. Raises SkyrlError with the end of
        ``server.log`` when it exits or does not answer within ``startup_timeout_s``."""
        cmd = self.command()
        self.workdir.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "JAX_PLATFORMS": "cpu", "HF_HUB_OFFLINE": "1", "TINKER_TELEMETRY": "0",
               "TOKENIZERS_PARALLELISM": "false", "PYTHONUNBUFFERED": "1"}
        env.pop("VIRTUAL_ENV", None)
        log.info("starting the local Tinker server: %s", " ".join(cmd))
        with self.log_path.open("ab") as out:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         env=env, cwd=self.workdir, start_new_session=True)
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                tail = self.log_tail()
                self.proc = None
                raise SkyrlError(f"the local Tinker server exited while starting; end of {self.log_path}:\n{tail}")
            if self.healthy():
                log.info("local Tinker server up at %s", self.url)
                return self
            time.sleep(0.5)
        self.stop()
        raise SkyrlError(f"the local Tinker server did not answer {self.url}/api/v1/healthz within "
                         f"{self.startup_timeout_s:.0f} s; end of {self.log_path}:\n{self.log_tail()}")

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/api/v1/healthz", timeout=2) as r:
                return r.status == 200
        except OSError:
            return False

    def peak_rss_mb(self) -> int | None:
        """The server's peak resident memory so far (API + engine, MiB, sampled each second), or None."""
        try:
            return int((self.workdir / "peak_rss_mb.txt").read_text())
        except (OSError, ValueError):
            return None

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self, timeout_s: float = 15.0) -> None:
        """SIGTERM the server's process group (API and engine), SIGKILL what is left after ``timeout_s``."""
        if self.proc is None:
            return
        pgid = self.proc.pid
        for sig, wait in ((signal.SIGTERM, timeout_s), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(pgid, sig)
            except ProcessLookupError:
                break
            try:
                self.proc.wait(wait)
                # the engine child may outlive the API process by a moment
                os.killpg(pgid, 0)
            except ProcessLookupError:
                break
            except subprocess.TimeoutExpired:
                continue
            time.sleep(0.5)
        self.proc = None

    def env(self) -> dict[str, str]:
        """The environment a client needs: ``TINKER_BASE_URL``, ``TINKER_API_KEY`` (any ``tml-`` key works
        locally), ``TINKER_TELEMETRY=0``."""
        return {"TINKER_BASE_URL": self.url, "TINKER_API_KEY": LOCAL_API_KEY, "TINKER_TELEMETRY": "0"}

    def __enter__(self) -> "LocalTinkerServer":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def main_serve(server: LocalTinkerServer) -> None:
    """Run ``server`` in the foreground until Ctrl-C or SIGTERM (``skyrl tinker serve-local``); either stops the
    server's API and engine before returning (``kill`` of this process leaves none behind)."""

    def terminate(signum, _frame):
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, terminate)
    signal.signal(signal.SIGHUP, terminate)
    try:
        server.start()
        exports = " ".join(f"{k}={v}" for k, v in server.env().items())
        print(f"local Tinker server for {server.base_model} at {server.url} (log: {server.log_path})\n"
              f"use it with: export {exports}", file=sys.stderr, flush=True)
        while server.proc is not None and server.proc.poll() is None:
            time.sleep(1.0)
        print(f"the server exited; end of {server.log_path}:\n{server.log_tail()}", file=sys.stderr)
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
