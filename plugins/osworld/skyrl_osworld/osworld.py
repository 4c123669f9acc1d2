"""The ``osworld`` runtime and its task configs (the task: :mod:`.tasks`), on real desktops through DesktopEnv.

DesktopEnv lives in its own environment (see :mod:`.desktop_server`); this runtime speaks the bridge's HTTP
endpoints, one desktop per trajectory, taken from ``runtime.options.servers`` (a list of ``http://127.0.0.1:PORT``
URLs, one per VM): a trajectory waits for a free desktop, so the number of servers is the runtime cap. Actions
reach the VM as canonical pyautogui code re-emitted from the parsed actions (:func:`.actions.to_pyautogui`),
never the agent's text. DesktopEnv's step reward is always 0: the reward is ``evaluate()``, called by the
``osworld_evaluate`` verifier.

Task configs follow OSWorld's format (``id``, ``instruction``, ``config[]`` setup steps, ``evaluator{func,
result, expected, options, conj, postconfig}``), validated by :data:`TASK_SCHEMA` when loaded.
"""

from __future__ import annotations

import asyncio
import base64
import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import jsonschema

from skyrl_core.errors import ConfigError
from skyrl_core.runtime import RuntimeSpec
from skyrl_core.tasks import DataSpec, Instance

from .actions import Action, to_pyautogui
from .browser import DesktopRuntime
from .observation import Observation

_STEP = {"type": "object", "required": ["type"],
         "properties": {"type": {"type": "string", "minLength": 1}, "parameters": {"type": "object"}}}
_ONE_OR_MANY = lambda item: {"oneOf": [item, {"type": "array", "items": item}]}  # noqa: E731
TASK_SCHEMA: dict = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "OSWorld task config",
    "type": "object",
    "required": ["id", "instruction", "evaluator"],
    "properties": {
        "id": {"type": "string", "minLength": 1},
        "instruction": {"type": "string", "minLength": 1},
        "snapshot": {"type": "string"},
        "source": {"type": "string"},
        "config": {"type": "array", "items": _STEP},
        "related_apps": {"type": "array", "items": {"type": "string"}},
        "trajectory": {"type": "string"},
        "evaluator": {
            "type": "object",
            "required": ["func"],
            "properties": {
                "func": _ONE_OR_MANY({"type": "string", "minLength": 1}),
                "result": _ONE_OR_MANY({"type": "object"}),
                "expected": _ONE_OR_MANY({"type": "object"}),
                "options": _ONE_OR_MANY({"type": "object"}),
                "conj": {"enum": ["and", "or"]},
                "postconfig": {"type": "array", "items": _STEP},
            },
        },
    },
}
_VALIDATOR = jsonschema.Draft202012Validator(TASK_SCHEMA)


def validate_task_config(config: Any, source: str = "task config") -> dict:
    """Return ``config`` when it is a valid OSWorld task config; raise ConfigError naming ``source``, the JSON
    path of the first problem and what is valid."""
    errors = sorted(_VALIDATOR.iter_errors(config), key=lambda e: list(e.absolute_path))
    if errors:
        err = errors[0]
        where = "/".join(str(p) for p in err.absolute_path) or "(root)"
        raise ConfigError(f"{source}: not an OSWorld task config at {where}: {err.message} (needs id, "
                          f"instruction and evaluator.func; config and postconfig are lists of "
                          f"{{type, parameters}})")
    return config


def load_task_configs(spec: DataSpec) -> list[Instance]:
    """Instances from ``data.path``: one task JSON file, a JSONL file of them, or a directory searched
    recursively for ``*.json`` (OSWorld's ``evaluation_examples/examples/<app>/<id>.json`` layout). Raises
    ConfigError for a missing path or an invalid config (naming the file)."""
    if not spec.path:
        raise ConfigError("the osworld task needs data.path: a task config JSON file, a JSONL file or a directory")
    path = Path(spec.path)
    if not path.exists():
        raise ConfigError(f"data.path {spec.path!r} does not exist")
    rows: list[tuple[str, Any]] = []
    files = sorted(path.rglob("*.json")) if path.is_dir() else [path]
    for f in files:
        text = f.read_text(encoding="utf-8")
        try:
            if f.suffix == ".jsonl":
                rows += [(f"{f}:{i + 1}", json.loads(line)) for i, line in enumerate(text.splitlines()) if line.strip()]
            else:
                rows.append((str(f), json.loads(text)))
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{f}: not JSON ({exc})") from None
    return [Instance(id=cfg["id"], data=validate_task_config(cfg, src)) for src, cfg in rows]


class _Desktops:
    """Free bridge URLs of one event loop: a trajectory takes one, waits when none is free."""

    def __init__(self, urls: list[str]) -> None:
        self.queue: asyncio.Queue[str] = asyncio.Queue()
        for url in urls:
            self.queue.put_nowait(url)


_DESKTOPS: dict[tuple, _Desktops] = {}


def _desktops(urls: list[str]) -> _Desktops:
    loop = asyncio.get_running_loop()
    for key in [k for k in _DESKTOPS if k[0] is not loop and k[0].is_closed()]:
        del _DESKTOPS[key]
    key = (loop, tuple(urls))
    if key not in _DESKTOPS:
        _DESKTOPS[key] = _Desktops(list(urls))
    return _DESKTOPS[key]


def linearize_a11y(xml_text: str | None, width: int, height: int) -> str:
    """OSWorld's accessibility-tree XML as the same text view the browser runtime gives: one line per named
    element with a position, ``[n] role "name" @(cx,cy) WxH`` (``screencoord``/``size`` attributes)."""
    if not xml_text:
        return ""
    try:
        root = ET.fromstring(xml_text)
    except ET.ParseError as exc:
        return f"(accessibility tree unreadable: {exc})"
    lines = []
    pair = re.compile(r"\(\s*(-?\d+)\s*,\s*(-?\d+)\s*\)")
    for el in root.iter():
        attrs = {k.rsplit("}", 1)[-1]: v for k, v in el.attrib.items()}
        name = (attrs.get("name") or (el.text or "")).strip()
        pos, size = pair.match(attrs.get("screencoord", "")), pair.match(attrs.get("size", ""))
        if not name or not pos or not size:
            continue
        x, y, w, h = int(pos[1]), int(pos[2]), int(size[1]), int(size[2])
        if w <= 0 or h <= 0 or x >= width or y >= height or x + w <= 0 or y + h <= 0:
            continue
        role = el.tag.rsplit("}", 1)[-1]
        lines.append(f'[{len(lines) + 1}] {role} "{name[:120]}" @({x + w // 2},{y + h // 2}) {w}x{h}')
    return "\n".join(lines)


class OSWorldRuntime(DesktopRuntime):
    """``runtime: {type: osworld, options: {servers: [http://127.0.0.1:5050, ...], pause_s: 0.5,
    screen: [1920, 1080], request_timeout_s: 600}}``: one DesktopEnv per trajectory through its bridge."""

    name = "osworld"
    isolation = "vm"

    def __init__(self, spec: RuntimeSpec | None = None, **kwargs: Any) -> None:
        super().__init__(spec or RuntimeSpec(type="osworld"), **kwargs)
        opts = self.checked_options({"servers", "pause_s", "screen", "request_timeout_s"})
        servers = opts.get("servers")
        if not servers or not isinstance(servers, list) or not all(isinstance(s, str) for s in servers):
            raise ConfigError("the osworld runtime needs runtime.options.servers: a list of DesktopEnv bridge URLs "
                              "(http://127.0.0.1:PORT, one per VM; see plugins/osworld/README.md)")
        self.servers = [s.rstrip("/") for s in servers]
        self.pause_s = float(opts.get("pause_s", 0.5))
        self.width, self.height = (int(v) for v in opts.get("screen", (1920, 1080)))
        self.timeout_s = float(opts.get("request_timeout_s", 600))
        self.url: str | None = None
        self.status: str | None = None
        self.dead: str | None = None
        self.instruction: str | None = None
        self.first_view: str | None = None
        self.sent: list[str] = []
        self._last: dict = {}
        self._pool: _Desktops | None = None

    async def _post(self, path: str, body: dict) -> dict:
        import urllib.error
        import urllib.request

        def go() -> dict:
            req = urllib.request.Request(f"{self.url}{path}", data=json.dumps(body).encode(), method="POST",
                                         headers={"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                    return json.loads(resp.read())
            except urllib.error.HTTPError as exc:
                detail = exc.read().decode("utf-8", "replace")[:500]
                raise RuntimeError(f"DesktopEnv bridge {self.url}{path}: HTTP {exc.code}: {detail}") from None

        from .browser import RuntimeDied

        try:
            return await asyncio.to_thread(go)
        except OSError as exc:  # refused, reset, timed out: the desktop is gone for this trajectory
            self.dead = f"DesktopEnv bridge {self.url} unreachable: {exc}"
            raise RuntimeDied(self.dead) from None

    async def start(self) -> None:
        self._pool = _desktops(self.servers)
        self.url = await self._pool.queue.get()

    async def prepare(self, instance: Any) -> None:
        obs = await self._post("/reset", {"task_config": instance.data})
        self._last = obs
        self.instruction = obs.get("instruction") or instance.data.get("instruction")
        self.first_view = linearize_a11y(obs.get("accessibility_tree"), self.width, self.height)
        from .miniwob import current_runtime

        current_runtime.set(self)

    async def act(self, actions: list[Action]) -> None:
        """Send the validated actions as one DesktopEnv step (specials as their own steps)."""
        from .browser import RuntimeDied

        if self.dead:
            raise RuntimeDied(self.dead)
        batch: list[Action] = []
        for act in actions + [Action("_end")]:
            if act.name == "_end" or act.special:
                if batch:
                    await self._step(to_pyautogui(batch))
                    batch = []
                if act.special:
                    if act.name in ("DONE", "FAIL"):
                        self.status = act.name
                    await self._step(act.name)
            else:
                batch.append(act)

    async def _step(self, code: str) -> None:
        self.sent.append(code)
        self._last = await self._post("/step", {"action": code, "pause": self.pause_s})

    async def observe(self, screenshot: bool = False) -> Observation:
        shot = self._last.get("screenshot_b64")
        return Observation(text=linearize_a11y(self._last.get("accessibility_tree"), self.width, self.height),
                           screenshot=base64.b64decode(shot) if (screenshot and shot) else None,
                           width=self.width, height=self.height)

    async def evaluate_task(self) -> float:
        """DesktopEnv.evaluate() for the task this desktop was reset to."""
        return float((await self._post("/evaluate", {}))["reward"])

    async def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self.url is not None and self._pool is not None:
            # the desktop is reset by the next trajectory's /reset; a dead one is not handed out again
            if not self.dead:
                self._pool.queue.put_nowait(self.url)
            self.url = None
