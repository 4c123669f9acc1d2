"""Launcher for the open Tinker-compatible server (the ``skyrl`` 0.4.0 distribution's ``skyrl.tinker.api``).

Runs inside the server's own venv (built by ``setup-venv.sh``), never in skyrl-core's: it imports only the
standard library, the server and psutil. Two roles:

- ``python launch.py api --base-model NAME --port P ...``: the HTTP API (FastAPI under uvicorn). The upstream
  ``__main__`` starts its engine child with ``uv run ...`` recovered from the parent's command line; here the
  child is this same file in the ``engine`` role under this venv's python, so neither uv nor a project checkout
  is needed.
- ``python launch.py engine ...``: the engine child (``skyrl.tinker.engine.main``) that trains and samples.

skyrl 0.4.0 declares Python >= 3.12. On 3.11 its pydantic models fail on ``typing.TypedDict`` (pydantic asks for
``typing_extensions.TypedDict`` before 3.12), so both roles swap that name before the server is imported.

A watchdog thread sums the resident memory of the API process and its children each second and keeps the
peak in MiB in ``peak_rss_mb.txt`` in the working directory. ``--max-rss-mb N`` (api role, also ``$SKYRL_TINKER_SERVER_MAX_RSS_MB``)
makes it a cap: past N MiB it logs the figure and kills the engine and itself (exit code 137), so a runaway
server cannot take a shared CI machine down.

Both roles die with the process that started them: a thread notices when this process's parent is gone (it was
re-parented) and kills this process's children, then exits; the API also kills its children when uvicorn stops
(SIGTERM, Ctrl-C). So `kill` of ``skyrl tinker serve-local`` (or of a training run that started the server), even
``kill -9``, leaves no API or engine process behind.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time

log = logging.getLogger("skyrl_tinker.server")


def _typing_shim() -> None:
    if sys.version_info < (3, 12):
        import typing

        import typing_extensions

        typing.TypedDict = typing_extensions.TypedDict  # type: ignore[misc]


def _engine_command(_parent_cmd: list[str], engine_config) -> list[str]:
    from skyrl.tinker.config import config_to_argv

    return [sys.executable, os.path.abspath(__file__), "engine", *config_to_argv(engine_config)]


PEAK_MB = [0]
PEAK_FILE = "peak_rss_mb.txt"


def _watch_memory(limit_mb: int, interval_s: float = 1.0) -> None:
    import psutil

    me = psutil.Process()
    while True:
        total = 0
        for proc in [me, *me.children(recursive=True)]:
            try:
                total += proc.memory_info().rss
            except psutil.Error:
                continue
        mb = total // (1 << 20)
        if mb > PEAK_MB[0]:
            PEAK_MB[0] = mb
            with open(PEAK_FILE, "w") as f:  # in the working directory (the server's workdir)
                f.write(f"{mb}\n")
        if 0 < limit_mb < mb:
            log.error("tinker server uses %d MiB, over its cap of %d MiB: stopping it", mb, limit_mb)
            for child in me.children(recursive=True):
                try:
                    child.kill()
                except psutil.Error:
                    pass
            os._exit(137)
        time.sleep(interval_s)


def kill_children() -> None:
    """SIGKILL every descendant of this process (psutil; nothing when it is missing)."""
    try:
        import psutil
    except ImportError:
        return
    for child in psutil.Process().children(recursive=True):
        try:
            child.kill()
        except psutil.Error:
            pass


def die_with_parent(interval_s: float = 0.5) -> threading.Thread:
    """Start a daemon thread that, once this process's parent has exited (``os.getppid()`` changes: the process
    was re-parented), kills this process's children and exits with 143. Returns the thread."""
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(interval_s)
        log.warning("the process that started this one (pid %d) is gone: stopping", parent)
        kill_children()
        os._exit(143)

    thread = threading.Thread(target=watch, daemon=True, name="parent-watch")
    thread.start()
    return thread


def run_api(argv: list[str]) -> None:
    import argparse

    import uvicorn

    from skyrl.tinker import api
    from skyrl.tinker.config import EngineConfig, add_model

    parser = argparse.ArgumentParser(prog="launch.py api", description="Tinker-compatible API server")
    add_model(parser, EngineConfig)
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default: loopback only)")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--max-rss-mb", type=int, default=int(os.environ.get("SKYRL_TINKER_SERVER_MAX_RSS_MB", 0)),
                        help="memory cap for the server and its engine in MiB (0: none)")
    args = parser.parse_args(argv)
    api._build_uv_run_cmd_engine = _engine_command  # start the engine child with this venv's python
    api.app.state.engine_config = EngineConfig.model_validate(
        {k: v for k, v in vars(args).items() if k in EngineConfig.model_fields})
    threading.Thread(target=_watch_memory, args=(args.max_rss_mb,), daemon=True, name="rss-watch").start()
    try:
        uvicorn.run(api.app, host=args.host, port=args.port, log_level="warning")  # returns on SIGTERM/SIGINT
    finally:
        kill_children()


def run_engine(argv: list[str]) -> None:
    from skyrl.tinker import engine

    sys.argv = ["skyrl.tinker.engine", *argv]
    engine.main()


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    if len(sys.argv) < 2 or sys.argv[1] not in ("api", "engine"):
        sys.exit("usage: launch.py api|engine [options]  (see launch.py api --help)")
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    _typing_shim()
    die_with_parent()
    role, rest = sys.argv[1], sys.argv[2:]
    run_api(rest) if role == "api" else run_engine(rest)


if __name__ == "__main__":
    main()
