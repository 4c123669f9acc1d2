"""The ``xvfb`` runtime: a headed Chromium on its own virtual X display, driven by the real pyautogui — the
closest local stand-in for an OSWorld desktop (real X events, a real screen grab).

Per trajectory: ``Xvfb :N`` (a free display number, ``-nolisten tcp``, an empty ``XAUTHORITY`` file because
python-xlib insists on one), a headed Chromium window filling the screen (the text view's centres are shifted by
the window's toolbar, so they are screen coordinates, as on a real desktop), and a pyautogui worker process bound to that display (:mod:`.pyautogui_worker`): pyautogui keeps
one display per process, and the worker receives only the parsed, validated actions as JSON. Screenshots are
``PIL.ImageGrab.grab(xdisplay=":N")``; the text view is the page's accessibility tree, as in the browser
runtime. Needs ``apt-get install xvfb`` and ``pip install 'skyrl-osworld[xvfb]'``.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import attrs

from skyrl_core.runtime import RuntimeSpec

from .actions import Action
from .browser import CHROMIUM_FLAGS, BrowserRuntime, RuntimeDied, _Lease, find_chromium
from .observation import Observation


def _free_display() -> int:
    for n in range(90, 400):
        if not os.path.exists(f"/tmp/.X11-unix/X{n}") and not os.path.exists(f"/tmp/.X{n}-lock"):
            return n
    raise RuntimeError("no free X display number in :90-:399")


class XvfbRuntime(BrowserRuntime):
    """``runtime: {type: xvfb, options: {width, height, chromium, observation, observation_tokens}}``."""

    name = "xvfb"
    isolation = "xvfb+chromium"

    def __init__(self, spec: RuntimeSpec | None = None, **kwargs: Any) -> None:
        super().__init__(spec or RuntimeSpec(type="xvfb"), **kwargs)
        self.display: str | None = None
        self._xvfb: asyncio.subprocess.Process | None = None
        self._worker: asyncio.subprocess.Process | None = None
        self._pw: Any = None
        self._tmp: str | None = None

    async def start(self) -> None:
        xvfb = shutil.which("Xvfb")
        if not xvfb:
            raise FileNotFoundError("Xvfb not found: apt-get install xvfb (the xvfb runtime needs a virtual display)")
        exe = find_chromium(self.options.get("chromium"))
        self._tmp = tempfile.mkdtemp(prefix="skyrl-xvfb-")
        auth = Path(self._tmp) / "Xauthority"
        auth.touch()
        n = _free_display()
        self.display = f":{n}"
        self._xvfb = await asyncio.create_subprocess_exec(
            xvfb, self.display, "-screen", "0", f"{self.width}x{self.height}x24", "-nolisten", "tcp",
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL, start_new_session=True)
        for _ in range(100):
            if os.path.exists(f"/tmp/.X11-unix/X{n}"):
                break
            if self._xvfb.returncode is not None:
                raise RuntimeError(f"Xvfb {self.display} exited with {self._xvfb.returncode}")
            await asyncio.sleep(0.05)
        env = {**os.environ, "DISPLAY": self.display, "XAUTHORITY": str(auth)}
        from playwright.async_api import async_playwright

        self._pw = await async_playwright().start()
        browser = await self._pw.chromium.launch(
            executable_path=exe, headless=False, env=env,
            args=[*CHROMIUM_FLAGS, "--force-device-scale-factor=1", "--window-position=0,0",
                  f"--window-size={self.width},{self.height}"])
        context = await browser.new_context(no_viewport=True)
        page = await context.new_page()
        self.lease = _Lease(context, page, browser)
        self._worker = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "skyrl_osworld.pyautogui_worker", env=env, stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL, start_new_session=True)
        ready = await self._read_line(lambda line: line.startswith(b"ready"), 60)
        if ready is None:
            raise RuntimeError(f"pyautogui worker on {self.display} did not start")

    async def _read_line(self, wanted: Any, timeout_s: float) -> bytes | None:
        """The worker's next line that ``wanted`` accepts (python-xlib prints warnings on stdout too)."""
        async def read() -> bytes | None:
            while True:
                line = await self._worker.stdout.readline()
                if not line:
                    return None
                if wanted(line):
                    return line

        return await asyncio.wait_for(read(), timeout_s)

    async def goto(self, url: str, width: int | None = None, height: int | None = None) -> None:
        await self.page.goto(url, wait_until="load")  # the screen, not the task, sets the size here
        # the page sits below the window's tab strip and toolbar: the view gives screen pixels, as clicks need
        x, y, chrome_w, chrome_h = await self.page.evaluate(
            "() => [window.screenX, window.screenY, window.outerWidth - window.innerWidth, "
            "window.outerHeight - window.innerHeight]")
        self.offset = (int(x + chrome_w // 2), int(y + chrome_h))

    async def act(self, actions: list[Action]) -> None:
        self._check_alive()
        if self._worker is None or self._worker.returncode is not None:
            self.dead = "the pyautogui worker exited"
            raise RuntimeDied(self.dead)
        for act in actions:
            if act.special:
                await super()._one(act)  # WAIT sleeps, DONE/FAIL set the status
                continue
            self._worker.stdin.write((json.dumps(attrs.asdict(act)) + "\n").encode())
            await self._worker.stdin.drain()
            line = await self._read_line(lambda text: text.startswith(b"{"), 60)
            reply = json.loads(line) if line else {"error": "the worker exited"}
            if reply.get("error"):
                raise RuntimeError(f"pyautogui: {reply['error']}")
            self.actions_run += 1

    async def observe(self, screenshot: bool = False) -> Observation:
        obs = await super().observe(screenshot=False)
        if screenshot:
            from PIL import ImageGrab

            image = await asyncio.to_thread(ImageGrab.grab, xdisplay=self.display)
            buf = io.BytesIO()
            image.save(buf, format="PNG")
            obs.screenshot, obs.width, obs.height = buf.getvalue(), image.width, image.height
        return obs

    async def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        for step in (self._close_worker, self._close_browser, self._close_xvfb):
            try:
                await step()
            except Exception:
                pass
        if self._tmp:
            shutil.rmtree(self._tmp, ignore_errors=True)

    async def _close_worker(self) -> None:
        if self._worker is not None and self._worker.returncode is None:
            self._worker.kill()
            await self._worker.wait()

    async def _close_browser(self) -> None:
        if self.lease is not None:
            await self.lease.browser.close()
            self.lease = None
        if self._pw is not None:
            await self._pw.stop()
            self._pw = None

    async def _close_xvfb(self) -> None:
        if self._xvfb is not None and self._xvfb.returncode is None:
            self._xvfb.terminate()
            await self._xvfb.wait()
