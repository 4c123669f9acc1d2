"""Start and stop a real vLLM OpenAI-compatible server on 127.0.0.1, for the vllm engine's served mode.

The server is ``python -m vllm.entrypoints.openai.api_server`` run by the python of a venv that has vLLM (built by
``scripts/vllm-env``; the ``vllm serve`` console script of the CPU wheel fails on a package-metadata lookup). It
gets the settings a CPU host needs (``CPU_ENV``): a 1 GiB KV cache (vLLM's CPU backend otherwise reserves a share
of all RAM), no hub access, no usage reports, and ``--enforce-eager`` (compiling the graph costs 100-200 s at every
start and its cache is not reused). ``VLLM_SERVER_DEV_MODE=1`` turns on the server's ``/collective_rpc`` and
``/reset_prefix_cache`` routes, which the served engine uses to reload weights (see ``skyrl_core.default_plugins.engines.vllm``);
those routes let any client that reaches the port run worker methods, so the server binds loopback only.

Command line (what ``scripts/vllm-serve`` runs)::

    python -m skyrl_core.default_plugins.engines.vllm_server [--model smollm2-135m-instruct] [--port 8000] [--max-batch 16]
                                               [--dtype float32] [--max-model-len 2048] [--kv-cache-gib 1]

It prints ``vllm server: model M listening on http://HOST:PORT`` once ``GET /health`` answers, and stops the
server (its whole process group) on Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import deque
from pathlib import Path
from typing import Any

from skyrl_core.errors import ConfigError
from skyrl_core.inference.base import EngineError

log = logging.getLogger(__name__)

# What vLLM needs on a CPU host; GPU hosts ignore the KV-cache variable.
CPU_ENV = {
    "VLLM_CPU_KVCACHE_SPACE": "1",      # GiB of KV cache
    "HF_HUB_OFFLINE": "1",              # models are local directories; never reach a hub
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
    "TOKENIZERS_PARALLELISM": "false",
}


def vllm_env(kv_cache_gib: float = 1, dev_mode: bool = True, base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment for a vLLM process: ``base`` (default: ``os.environ``) plus ``CPU_ENV`` where unset,
    ``VLLM_CPU_KVCACHE_SPACE`` = ``kv_cache_gib`` and, with ``dev_mode``, ``VLLM_SERVER_DEV_MODE=1``."""
    env = dict(os.environ if base is None else base)
    for key, value in CPU_ENV.items():
        env.setdefault(key, value)
    env["VLLM_CPU_KVCACHE_SPACE"] = f"{kv_cache_gib:g}"
    if dev_mode:
        env["VLLM_SERVER_DEV_MODE"] = "1"
    return env


def server_command(model_dir: str, *, python: str | None = None, host: str = "127.0.0.1", port: int = 8000,
                   served_name: str | None = None, max_batch: int = 16, dtype: str = "float32",
                   max_model_len: int = 2048, enforce_eager: bool = True, extra_args: tuple[str, ...] = ()
                   ) -> list[str]:
    """The argv that starts vLLM's OpenAI-compatible server on ``model_dir`` (a local HF directory)."""
    cmd = [python or sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model_dir),
           "--host", host, "--port", str(port), "--dtype", dtype, "--max-model-len", str(max_model_len),
           "--max-num-seqs", str(max_batch), "--disable-log-stats"]
    if served_name:
        cmd += ["--served-model-name", served_name]
    if enforce_eager:
        cmd.append("--enforce-eager")
    return cmd + list(extra_args)


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on right now (vLLM cannot bind port 0 and report it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


class VLLMServer:
    """A vLLM server subprocess on this machine; a context manager that always stops it.

    Args:
        model: bundled model name or local HF directory (converted once by ``skyrl_core.default_plugins.engines.models``).
        python: interpreter of a venv with vLLM (default: this one; ``scripts/vllm-env`` prints one).
        host: address to bind; keep it loopback (dev-mode routes run worker methods).
        port: TCP port; 0 picks a free one.
        served_name: the ``model`` name clients send (default: ``model``).
        max_batch: ``--max-num-seqs``.
        dtype: ``float32`` (default: matches the hf engine on the CPU bit for bit more often) | ``bfloat16`` | ...
        max_model_len: context window in tokens.
        kv_cache_gib: ``VLLM_CPU_KVCACHE_SPACE`` in GiB.
        log_path: where the server's stdout and stderr go (default: a temp file; its tail is in errors).

    ``start(timeout_s)`` raises EngineError with the log's tail when the process exits or ``/health`` does not
    answer within ``timeout_s`` seconds. ``stop()`` sends SIGTERM to the process group, SIGKILL after 30 s.
    """

    def __init__(self, model: str = "smollm2-135m-instruct", *, python: str | None = None, host: str = "127.0.0.1",
                 port: int = 0, served_name: str | None = None, max_batch: int = 16, dtype: str = "float32",
                 max_model_len: int = 2048, kv_cache_gib: float = 1, log_path: str | os.PathLike | None = None,
                 extra_args: tuple[str, ...] = ()) -> None:
        from skyrl_core.default_plugins.engines.models import resolve_model

        if host not in ("127.0.0.1", "localhost", "::1"):
            raise ConfigError(f"vllm server host {host!r}: bind loopback only (127.0.0.1, localhost or ::1); its "
                              f"dev-mode routes let any client run worker methods")
        self.model = model
        self.model_dir = str(resolve_model(model))
        self.host = host
        self.port = port or free_port(host)
        self.served_name = served_name or model
        self.url = f"http://{host}:{self.port}"
        self.cmd = server_command(self.model_dir, python=python, host=host, port=self.port,
                                  served_name=self.served_name, max_batch=max_batch, dtype=dtype,
                                  max_model_len=max_model_len, extra_args=extra_args)
        self.env = vllm_env(kv_cache_gib)
        if log_path is None:
            fd, log_path = tempfile.mkstemp(prefix="skyrl-vllm-server-", suffix=".log")
            os.close(fd)
        self.log_path = Path(log_path)
        self.proc: subprocess.Popen | None = None
        self.ready_s: float | None = None

    def start(self, timeout_s: float = 300.0) -> VLLMServer:
        """Start the server and wait until ``GET /health`` answers 200. Returns self."""
        import httpx

        t0 = time.monotonic()
        with open(self.log_path, "ab") as out:
            # its own session: stop() can end the API server and its engine-core child together
            self.proc = subprocess.Popen(self.cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                         env=self.env, start_new_session=True)
        while True:
            if self.proc.poll() is not None:
                raise EngineError(f"vllm server exited with status {self.proc.returncode} before it was ready "
                                  f"({' '.join(self.cmd)}); log {self.log_path}:\n{self.log_tail()}")
            try:
                if httpx.get(self.url + "/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() - t0 > timeout_s:
                self.stop()
                raise EngineError(f"vllm server did not answer {self.url}/health within {timeout_s:g} s; log "
                                  f"{self.log_path}:\n{self.log_tail()}")
            time.sleep(0.5)
        self.ready_s = time.monotonic() - t0
        log.info("vllm server ready at %s after %.1f s", self.url, self.ready_s)
        return self

    def log_tail(self, lines: int = 40) -> str:
        try:
            with open(self.log_path, errors="replace") as fh:
                return "".join(deque(fh, maxlen=lines))
        except OSError:
            return ""

    def stop(self, grace_s: float = 30.0) -> None:
        """Stop the server and everything it started. Safe to call twice."""
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        except ProcessLookupError:
            pass

    def __enter__(self) -> VLLMServer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m skyrl_core.default_plugins.engines.vllm_server",
                                     description="Run vLLM's OpenAI-compatible server on a skyrl model, on "
                                                 "127.0.0.1, with the CPU settings (see docs/engines.md).")
    parser.add_argument("--model", default="smollm2-135m-instruct", help="bundled model name or local HF dir")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000, help="TCP port (0: a free one)")
    parser.add_argument("--served-model-name", default=None)
    parser.add_argument("--max-batch", type=int, default=16, help="--max-num-seqs")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--max-model-len", type=int, default=2048)
    parser.add_argument("--kv-cache-gib", type=float, default=1)
    parser.add_argument("--timeout", type=float, default=600, help="seconds to wait for /health")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    server = VLLMServer(args.model, host=args.host, port=args.port, served_name=args.served_model_name,
                        max_batch=args.max_batch, dtype=args.dtype, max_model_len=args.max_model_len,
                        kv_cache_gib=args.kv_cache_gib)
    signal.signal(signal.SIGTERM, lambda *_: (server.stop(), sys.exit(0)))
    try:
        server.start(args.timeout)
        print(f"vllm server: model {server.served_name} listening on {server.url} (ready in {server.ready_s:.0f} s;"
              f" log {server.log_path})", file=sys.stderr, flush=True)
        while server.proc is not None and server.proc.poll() is None:
            time.sleep(1)
        print(f"vllm server exited; log {server.log_path}:\n{server.log_tail()}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0
    except EngineError as exc:
        print(exc, file=sys.stderr)
        return 1
    finally:
        server.stop()


if __name__ == "__main__":
    sys.exit(main())
