"""The ``browser`` runtime: system Chromium driven by Playwright, offline, one browser per worker process and a
page per trajectory.

Chromium is never downloaded (no ``playwright install``): the binary comes from ``runtime.options.chromium``,
else ``$SKYRL_CHROMIUM``, else Debian's ``/usr/lib/chromium/chromium`` (the real binary behind the
``/usr/bin/chromium`` wrapper), else ``chromium``/``chromium-browser``/``google-chrome`` on PATH. It runs
headless with the flags that keep it off the network (no background networking, component updates, sync or
QUIC), and every http(s)/ws request a page makes is aborted: tasks are local ``file://`` pages.

:class:`BrowserPool` holds one browser per event loop and reuses pages: a released page is reset (about:blank,
cookies and storage cleared) and kept for the next trajectory. It never holds more pages than were in use at
once, so its size follows the dispatcher's runtime cap (``dispatcher.max_parallel_agents`` /
``max_runtimes``). When the browser process dies, the trajectories on it end (``error_runtime``) and the next
``acquire`` starts a new one.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import shutil
import time
from typing import Any

from skyrl_core.runtime import ExecResult, Runtime, RuntimeSpec

from .actions import Action
from .observation import Observation, ax_text, layout_boxes

log = logging.getLogger(__name__)

CHROMIUM_FLAGS = ("--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--disable-default-apps", "--disable-extensions", "--metrics-recording-only",
                  "--no-default-browser-check", "--mute-audio", "--disable-breakpad",
                  "--disable-domain-reliability", "--disable-features=Translate,OptimizationHints,MediaRouter")
_ONLINE = re.compile(r"^(https?|wss?|ftp)://")
# pyautogui key names -> Playwright's (single characters pass through)
KEYS = {"enter": "Enter", "return": "Enter", "tab": "Tab", "space": "Space", "backspace": "Backspace",
        "delete": "Delete", "del": "Delete", "esc": "Escape", "escape": "Escape", "up": "ArrowUp",
        "down": "ArrowDown", "left": "ArrowLeft", "right": "ArrowRight", "home": "Home", "end": "End",
        "pageup": "PageUp", "pagedown": "PageDown", "pgup": "PageUp", "pgdn": "PageDown", "insert": "Insert",
        "ctrl": "Control", "control": "Control", "ctrlleft": "Control", "ctrlright": "Control", "shift": "Shift",
        "shiftleft": "Shift", "shiftright": "Shift", "alt": "Alt", "altleft": "Alt", "altright": "Alt",
        "option": "Alt", "win": "Meta", "winleft": "Meta", "command": "Meta", "cmd": "Meta", "meta": "Meta",
        "capslock": "CapsLock", **{f"f{i}": f"F{i}" for i in range(1, 13)}}


class RuntimeDied(RuntimeError):
    """The browser (or desktop) behind a trajectory is gone; the trajectory ends with ``error_runtime``."""


def find_chromium(configured: str | None = None) -> str:
    """The Chromium binary to launch. Raises FileNotFoundError naming what was tried and how to install it."""
    tried = []
    for candidate in (configured, os.environ.get("SKYRL_CHROMIUM"), "/usr/lib/chromium/chromium"):
        if candidate:
            tried.append(candidate)
            if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
                return candidate
    for name in ("chromium", "chromium-browser", "google-chrome"):
        tried.append(name)
        path = shutil.which(name)
        if path:
            return path
    raise FileNotFoundError(f"no Chromium found (tried {', '.join(tried)}); install Debian's: "
                            f"apt-get install chromium, or set runtime.options.chromium / $SKYRL_CHROMIUM")


class _Lease:
    """A page lent to one trajectory, with its context and CDP session."""

    def __init__(self, context: Any, page: Any, browser: Any) -> None:
        self.context = context
        self.page = page
        self.browser = browser
        self.cdp: Any = None
        self.crashed = False
        page.on("crash", self._on_crash)

    def _on_crash(self, *_: Any) -> None:
        self.crashed = True


class BrowserPool:
    """One headless Chromium and its reusable pages. ``acquire`` / ``release`` are the only entry points."""

    def __init__(self, executable: str, headless: bool = True, extra_args: tuple[str, ...] = ()) -> None:
        self.executable = executable
        self.headless = headless
        self.extra_args = tuple(extra_args)
        self._pw: Any = None
        self._browser: Any = None
        self._idle: list[_Lease] = []
        self._lock = asyncio.Lock()
        self.in_use = 0
        self.peak_in_use = 0
        self.launches = 0
        self.pages_created = 0

    async def browser_pid(self) -> int | None:
        """The browser process id (CDP SystemInfo), or None before launch or after it died."""
        if self._browser is None or not self._browser.is_connected():
            return None
        session = await self._browser.new_browser_cdp_session()
        try:
            info = await session.send("SystemInfo.getProcessInfo")
        finally:
            await session.detach()
        return next((p["id"] for p in info.get("processInfo", []) if p.get("type") == "browser"), None)

    async def _ensure_browser(self) -> Any:
        async with self._lock:
            if self._browser is not None and self._browser.is_connected():
                return self._browser
            self._idle.clear()
            if self._pw is None:
                from playwright.async_api import async_playwright

                self._pw = await async_playwright().start()
            t0 = time.perf_counter()
            # Playwright gives each launch a new empty profile directory (and deletes it at close)
            self._browser = await self._pw.chromium.launch(
                executable_path=self.executable, headless=self.headless, args=[*CHROMIUM_FLAGS, *self.extra_args])
            self.launches += 1
            log.info("launched %s (launch %d) in %.2f s", self.executable, self.launches, time.perf_counter() - t0)
            return self._browser

    async def acquire(self, width: int, height: int) -> _Lease:
        """A reset page with a ``width`` x ``height`` viewport (CSS pixels at device scale 1, so screenshot
        pixels are click coordinates). Launches (or relaunches) the browser when needed."""
        browser = await self._ensure_browser()
        lease = None
        while self._idle:
            cand = self._idle.pop()
            if cand.browser is browser and not cand.page.is_closed() and not cand.crashed:
                lease = cand
                break
        if lease is None:
            context = await browser.new_context(viewport={"width": width, "height": height},
                                                device_scale_factor=1, service_workers="block",
                                                accept_downloads=False)
            await context.route(_ONLINE, lambda route: route.abort())
            page = await context.new_page()
            lease = _Lease(context, page, browser)
            self.pages_created += 1
        else:
            await lease.page.set_viewport_size({"width": width, "height": height})
        self.in_use += 1
        self.peak_in_use = max(self.peak_in_use, self.in_use)
        return lease

    async def release(self, lease: _Lease) -> None:
        """Reset the page and keep it for the next trajectory (at most as many as were in use at once)."""
        self.in_use -= 1
        try:
            if lease.browser is not self._browser or not lease.browser.is_connected() or lease.page.is_closed():
                return
            if lease.crashed:  # its renderer is gone: drop the context, never lend the page again
                await _bounded(lease.context.close())
                return
            await asyncio.wait_for(lease.page.goto("about:blank"), RELEASE_TIMEOUT_S)
            await asyncio.wait_for(lease.context.clear_cookies(), RELEASE_TIMEOUT_S)
            if len(self._idle) < self.peak_in_use:
                self._idle.append(lease)
                return
            await _bounded(lease.context.close())
        except Exception as exc:  # a page that cannot be reset is dropped
            log.info("browser page not reusable (%s: %s); dropped", type(exc).__name__, exc)
            await _bounded(lease.context.close())

    async def close(self) -> None:
        """Close the browser and the Playwright driver. Safe to call twice."""
        self._idle.clear()
        if self._browser is not None:
            await _bounded(self._browser.close())
        if self._pw is not None:
            await _bounded(self._pw.stop())
        self._browser = self._pw = None


RELEASE_TIMEOUT_S = 10.0


async def _bounded(awaitable: Any, timeout_s: float = RELEASE_TIMEOUT_S) -> None:
    """Await a clean-up step for at most ``timeout_s`` seconds, swallowing its failure: a dead browser's
    channels may never answer, and release must not hang."""
    try:
        await asyncio.wait_for(awaitable, timeout_s)
    except Exception as exc:
        log.debug("clean-up step failed: %s: %s", type(exc).__name__, exc)


_POOLS: dict[tuple, BrowserPool] = {}


def get_pool(executable: str, headless: bool = True, extra_args: tuple[str, ...] = ()) -> BrowserPool:
    """The pool of the running event loop for this browser (Playwright objects belong to one loop)."""
    loop = asyncio.get_running_loop()
    for key in [k for k in _POOLS if k[0] is not loop and k[0].is_closed()]:
        del _POOLS[key]  # its loop is gone; its driver went with the loop's subprocess transports
    key = (loop, executable, headless, tuple(extra_args))
    if key not in _POOLS:
        _POOLS[key] = BrowserPool(executable, headless, extra_args)
    return _POOLS[key]


async def close_pools() -> None:
    """Close every pool of the running event loop (tests call this; a CLI run ends with its process)."""
    loop = asyncio.get_running_loop()
    for key in [k for k in _POOLS if k[0] is loop]:
        await _POOLS.pop(key).close()


class DesktopRuntime(Runtime):
    """A runtime acted on through ``act(actions)`` / ``observe()``, never through shell commands."""

    def checked_options(self, valid: set[str]) -> dict[str, Any]:
        """``spec.options``, or ConfigError naming the unknown keys and the valid ones (``valid`` plus the
        tool's ``observation`` and ``observation_tokens``)."""
        from skyrl_core.errors import ConfigError

        opts = dict(self.spec.options or {})
        valid = set(valid) | {"observation", "observation_tokens"}
        unknown = sorted(set(opts) - valid)
        if unknown:
            raise ConfigError(f"runtime.options {unknown} are not understood by the '{self.name}' runtime; "
                              f"valid: {', '.join(sorted(valid))}")
        return opts

    async def exec(self, command: str | list[str], timeout_s: float = 30.0, stdin: str | None = None,
                   env: dict[str, str] | None = None) -> ExecResult:
        """Runs nothing: desktop runtimes take mouse and keyboard actions only (osworld_action)."""
        return ExecResult(exit_code=None, output=f"the {self.name} runtime runs no commands; act through "
                                                  f"osworld_action")


class BrowserRuntime(DesktopRuntime):
    """``runtime: {type: browser, options: {...}}``: a Chromium page for one trajectory.

    Options: ``chromium`` (binary path), ``width``/``height`` (viewport in pixels; MiniWoB++ instances set
    their own 160 x 210), ``headless`` (default true). Actions are mouse and keyboard events (:meth:`act`);
    nothing is evaluated in the page on the agent's behalf. ``exec`` runs no commands.
    """

    name = "browser"
    isolation = "chromium"

    def __init__(self, spec: RuntimeSpec | None = None, **kwargs: Any) -> None:
        super().__init__(spec or RuntimeSpec(type="browser"), **kwargs)
        opts = self.checked_options({"chromium", "width", "height", "headless", "episode_max_time_s"})
        self.options = opts
        self.width = int(opts.get("width", 1280))
        self.height = int(opts.get("height", 720))
        self.pool: BrowserPool | None = None
        self.lease: _Lease | None = None
        self.pointer = (0.0, 0.0)
        self.offset = (0, 0)  # the viewport's top-left in screen pixels (the xvfb runtime's window chrome)
        self.status: str | None = None   # DONE / FAIL once the agent said so
        self.dead: str | None = None     # why the browser went away, once it did
        self.actions_run = 0
        self.instruction: str | None = None
        self.first_view: str | None = None

    async def start(self) -> None:
        exe = find_chromium(self.options.get("chromium"))
        self.pool = get_pool(exe, bool(self.options.get("headless", True)))
        self.lease = await self.pool.acquire(self.width, self.height)

    async def prepare(self, instance: Any) -> None:
        data = getattr(instance, "data", {}) or {}
        if data.get("kind") == "miniwob":
            from .miniwob import start_episode

            await start_episode(self, data)
            self.first_view = (await self.observe()).text
        elif data.get("url"):
            await self.goto(str(data["url"]))

    @property
    def page(self) -> Any:
        if self.lease is None:
            raise RuntimeError("browser runtime is not started")
        return self.lease.page

    async def goto(self, url: str, width: int | None = None, height: int | None = None) -> None:
        if width and height and (width, height) != (self.width, self.height):
            self.width, self.height = width, height
            await self.page.set_viewport_size({"width": width, "height": height})
        await self.page.goto(url, wait_until="load")

    def _check_alive(self) -> None:
        if self.dead:
            raise RuntimeDied(self.dead)
        if self.lease is None or not self.lease.browser.is_connected() or self.lease.page.is_closed():
            self.dead = "the browser process exited (killed or crashed)"
            raise RuntimeDied(self.dead)
        if self.lease.crashed:
            self.dead = "the page's renderer process crashed"
            raise RuntimeDied(self.dead)

    async def evaluate(self, script: str) -> Any:
        """Run the task's own JavaScript (episode control, reward read-out): never agent text. Raises
        RuntimeDied when the browser or the page's renderer has gone."""
        self._check_alive()
        try:
            return await self.page.evaluate(script)
        except Exception as exc:
            if "crash" in str(exc).lower() or "closed" in str(exc).lower():
                self.lease.crashed = True
            self._check_alive()
            raise RuntimeError(f"page script failed: {exc}") from exc

    async def act(self, actions: list[Action]) -> None:
        """Execute validated actions as Playwright mouse/keyboard events. Raises RuntimeDied when the browser
        has gone."""
        self._check_alive()
        try:
            for act in actions:
                await self._one(act)
                self.actions_run += 1
        except RuntimeDied:
            raise
        except Exception as exc:
            self._check_alive()
            raise RuntimeError(f"action failed: {type(exc).__name__}: {exc}") from exc

    async def _one(self, act: Action) -> None:
        mouse, keyboard = self.page.mouse, self.page.keyboard
        a = act.args
        if act.special:
            if act.name == "WAIT":
                await asyncio.sleep(a.get("seconds", 1.0))
            else:
                self.status = act.name
            return
        if act.name == "sleep":
            await asyncio.sleep(a["seconds"])
            return
        if "x" in a:
            self.pointer = (a["x"], a["y"])
        x, y = self.pointer
        button = a.get("button", "left")
        if act.name in ("click", "doubleClick", "tripleClick", "rightClick", "middleClick"):
            count = {"doubleClick": 2, "tripleClick": 3}.get(act.name, a.get("clicks", 1))
            button = {"rightClick": "right", "middleClick": "middle"}.get(act.name, button)
            await mouse.click(x, y, button=button, click_count=count)
        elif act.name == "moveTo":
            await mouse.move(x, y)
        elif act.name == "dragTo":
            await mouse.down(button=button)
            await mouse.move(x, y, steps=5)
            await mouse.up(button=button)
        elif act.name in ("mouseDown", "mouseUp"):
            if "x" in a:
                await mouse.move(x, y)
            await (mouse.down if act.name == "mouseDown" else mouse.up)(button=button)
        elif act.name in ("scroll", "hscroll"):
            if "x" in a:
                await mouse.move(x, y)
            # pyautogui: positive clicks scroll up (vertical) / right (horizontal); one click ~ 100 px here
            delta = -a["clicks"] * 100 if act.name == "scroll" else a["clicks"] * 100
            await mouse.wheel(0, delta) if act.name == "scroll" else await mouse.wheel(delta, 0)
        elif act.name == "typewrite":
            msg = a["message"]
            if isinstance(msg, str):
                await keyboard.type(msg)
            else:
                for key in msg:
                    await keyboard.press(pw_key(key))
        elif act.name == "press":
            for _ in range(a["presses"]):
                for key in a["keys"]:
                    await keyboard.press(pw_key(key))
        elif act.name in ("keyDown", "keyUp"):
            await (keyboard.down if act.name == "keyDown" else keyboard.up)(pw_key(a["key"]))
        elif act.name == "hotkey":
            keys = [pw_key(k) for k in a["keys"]]
            for key in keys:
                await keyboard.down(key)
            for key in reversed(keys):
                await keyboard.up(key)
        else:  # parse_pyautogui admits nothing else
            raise ValueError(f"unknown action {act.name!r}")

    async def observe(self, screenshot: bool = False) -> Observation:
        """The accessibility-tree view (and a PNG screenshot when asked) of the page as it is now."""
        self._check_alive()
        try:
            lease = self.lease
            if lease.cdp is None:
                lease.cdp = await lease.context.new_cdp_session(lease.page)
            tree = await lease.cdp.send("Accessibility.getFullAXTree")
            snap = await lease.cdp.send("DOMSnapshot.captureSnapshot", {"computedStyles": []})
            text = ax_text(tree.get("nodes", []), layout_boxes(snap), self.width, self.height, self.offset)
            png = await lease.page.screenshot(type="png") if screenshot else None
            return Observation(text=text, screenshot=png, width=self.width, height=self.height,
                               url=lease.page.url, title=await lease.page.title())
        except Exception as exc:
            self._check_alive()
            raise RuntimeError(f"observation failed: {type(exc).__name__}: {exc}") from exc

    async def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self.lease is not None and self.pool is not None:
            lease, self.lease = self.lease, None
            if lease.cdp is not None:
                if not lease.crashed:  # a crashed page's session never answers
                    await _bounded(lease.cdp.detach())
                lease.cdp = None
            await self.pool.release(lease)


def pw_key(key: str) -> str:
    """Playwright's name for a pyautogui key name (``'enter'`` -> ``'Enter'``); single characters unchanged."""
    return KEYS.get(key.lower(), key) if len(key) > 1 else key


def chromium_version(executable: str) -> str:
    """``chromium --version`` of the binary, for reports."""
    import subprocess

    try:
        out = subprocess.run([executable, "--version"], capture_output=True, text=True, timeout=20)
        return out.stdout.strip() or out.stderr.strip()
    except Exception as exc:  # only used in reports
        return f"unknown ({exc})"


__all__ = ["BrowserPool", "BrowserRuntime", "RuntimeDied", "find_chromium", "get_pool", "close_pools",
           "CHROMIUM_FLAGS"]
