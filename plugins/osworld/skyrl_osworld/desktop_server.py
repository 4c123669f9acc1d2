"""A one-desktop HTTP bridge to OSWorld's ``DesktopEnv``, run inside OSWorld's own environment.

``desktop-env`` cannot be installed next to skyrl's (it pins gymnasium 0.28, numpy<2 and torch 2.5), so the
``osworld`` runtime never imports it: this file runs in a separate venv that has ``desktop-env``, imports it
lazily, and serves one DesktopEnv (one VM) on 127.0.0.1. It imports only the standard library, so it runs as a
plain script there::

    python desktop_server.py --port 5050 --provider docker [--path-to-vm PATH] [--headless]
                             [--screen 1920x1080] [--a11y] [--env-kwargs '{"os_type": "Ubuntu"}']

Endpoints (JSON in and out; screenshots base64 PNG):

- ``GET /health`` -> ``{"ok": true}``
- ``POST /reset {"task_config": {...}}`` -> ``{"instruction", "screenshot_b64", "accessibility_tree"}``
- ``POST /step {"action": "<pyautogui code | WAIT | DONE | FAIL>", "pause": s}`` -> the observation plus
  ``reward`` (DesktopEnv's step reward, 0 always), ``done``, ``info``
- ``POST /evaluate {}`` -> ``{"reward": float}`` (DesktopEnv.evaluate(): the task's evaluator)
- ``POST /close {}`` -> ``{"ok": true}``

Errors are ``{"error": "..."}`` with status 400 (bad request) or 500 (the environment raised).
"""

from __future__ import annotations

import argparse
import base64
import json
import threading
import traceback
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

MAX_BODY = 16 * 1024 * 1024


def _obs_json(obs: Any) -> dict:
    obs = obs or {}
    shot = obs.get("screenshot")
    return {"instruction": obs.get("instruction"),
            "screenshot_b64": base64.b64encode(shot).decode("ascii") if isinstance(shot, (bytes, bytearray))
            else None,
            "accessibility_tree": obs.get("accessibility_tree")}


class DesktopBridge:
    """One environment behind a lock (DesktopEnv is not thread-safe); ``env_factory()`` builds it lazily."""

    def __init__(self, env_factory: Callable[[], Any]) -> None:
        self.env_factory = env_factory
        self.env: Any = None
        self.lock = threading.Lock()

    def handle(self, path: str, body: dict) -> dict:
        with self.lock:
            if path == "/close":
                if self.env is not None:
                    self.env.close()
                    self.env = None
                return {"ok": True}
            if self.env is None:
                self.env = self.env_factory()
            if path == "/reset":
                config = body.get("task_config")
                if not isinstance(config, dict):
                    raise ValueError("reset needs 'task_config', an OSWorld task config object")
                return _obs_json(self.env.reset(task_config=config))
            if path == "/step":
                action = body.get("action")
                if not isinstance(action, str):
                    raise ValueError("step needs 'action', a pyautogui code string or WAIT/DONE/FAIL")
                obs, reward, done, info = self.env.step(action, float(body.get("pause", 0.5)))
                out = _obs_json(obs)
                out.update(reward=float(reward or 0.0), done=bool(done),
                           info=json.loads(json.dumps(info or {}, default=str)))
                return out
            if path == "/evaluate":
                return {"reward": float(self.env.evaluate())}
        raise KeyError(path)


def make_server(bridge: DesktopBridge, host: str = "127.0.0.1", port: int = 0) -> ThreadingHTTPServer:
    """An HTTP server for ``bridge`` (``port`` 0 picks a free one: ``server.server_address[1]``)."""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, fmt: str, *args: Any) -> None:  # quiet: the runtime logs what matters
            pass

        def _send(self, status: int, payload: dict) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path == "/health":
                self._send(200, {"ok": True})
            else:
                self._send(404, {"error": f"no endpoint GET {self.path}"})

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            if length > MAX_BODY:
                self._send(400, {"error": f"request body over {MAX_BODY} bytes"})
                return
            try:
                body = json.loads(self.rfile.read(length) or b"{}")
                if not isinstance(body, dict):
                    raise ValueError("the body must be a JSON object")
            except ValueError as exc:
                self._send(400, {"error": f"bad JSON: {exc}"})
                return
            try:
                self._send(200, bridge.handle(self.path, body))
            except KeyError:
                self._send(404, {"error": f"no endpoint POST {self.path}; valid: /reset /step /evaluate /close"})
            except ValueError as exc:
                self._send(400, {"error": str(exc)})
            except Exception as exc:  # the environment failed: report it, keep serving
                self._send(500, {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()[-2000:]})

    return ThreadingHTTPServer((host, port), Handler)


def desktop_env_factory(args: argparse.Namespace) -> Callable[[], Any]:
    def build() -> Any:
        from desktop_env.desktop_env import DesktopEnv  # lazy: only in OSWorld's own environment

        width, height = (int(v) for v in args.screen.lower().split("x"))
        kwargs = dict(provider_name=args.provider, action_space="pyautogui", screen_size=(width, height),
                      headless=args.headless, require_a11y_tree=args.a11y)
        if args.path_to_vm:
            kwargs["path_to_vm"] = args.path_to_vm
        kwargs.update(json.loads(args.env_kwargs or "{}"))
        return DesktopEnv(**kwargs)

    return build


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="Serve one OSWorld DesktopEnv over HTTP for skyrl's osworld runtime.")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=5050)
    ap.add_argument("--provider", default="docker", help="DesktopEnv provider_name: docker, vmware, virtualbox, aws")
    ap.add_argument("--path-to-vm", default=None)
    ap.add_argument("--screen", default="1920x1080")
    ap.add_argument("--headless", action="store_true")
    ap.add_argument("--a11y", action="store_true", help="ask DesktopEnv for the accessibility tree")
    ap.add_argument("--env-kwargs", default=None, help="more DesktopEnv keyword arguments, as JSON")
    args = ap.parse_args(argv)
    server = make_server(DesktopBridge(desktop_env_factory(args)), args.host, args.port)
    print(f"DesktopEnv bridge on http://{args.host}:{server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
