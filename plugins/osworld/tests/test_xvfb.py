"""The xvfb runtime: headed Chromium on a virtual X display, real pyautogui X events from the worker process,
screenshots grabbed from the display. Skipped where Xvfb is not installed (ci.sh installs it)."""

from __future__ import annotations

import io
import os
import shutil

import pytest

from skyrl_core.runtime import RuntimeSpec
from skyrl_core.tasks import DataSpec
from skyrl_core.tools import ToolContext
from skyrl_core.transitions import Trajectory
from skyrl_osworld.miniwob import load_miniwob
from skyrl_osworld.scripted import decide, parse_view
from skyrl_osworld.tools import osworld_action_tool
from skyrl_osworld.verifiers import miniwob_reward
from skyrl_osworld.xvfb import XvfbRuntime

needs_xvfb = pytest.mark.skipif(not shutil.which("Xvfb") and os.environ.get("SKYRL_REQUIRE_CHROMIUM") != "1",
                                reason="Xvfb not installed (apt-get install xvfb)")


@needs_xvfb
async def test_real_pyautogui_on_a_virtual_display_solves_login_user(chromium, tmp_path):
    from PIL import Image

    (inst,) = load_miniwob(DataSpec(split="test", options={"tasks": ["login-user"], "seeds_per_task": 1}))
    rt = XvfbRuntime(RuntimeSpec(type="xvfb", options={"width": 400, "height": 300, "observation": "both"}))
    await rt.start()
    try:
        await rt.prepare(inst)
        ctx = ToolContext(runtime=rt, instance=inst)
        first = await rt.observe(screenshot=True)
        view = rt.first_view
        for turn in range(3):
            result = await osworld_action_tool.call({"code": decide(rt.instruction, view, turn)}, ctx)
            view = result.output.split("The page now:\n", 1)[-1]
            if result.finish:
                break
        assert rt.actions_run >= 5                                  # clicks and typing went through X
        verdict = await miniwob_reward(Trajectory(instance_id=inst.id, sample_index=0, task="miniwob",
                                                  group_id=inst.id), rt, inst)
        assert verdict.reward == 1.0, verdict.metrics
        assert Image.open(io.BytesIO(result.metadata["screenshot_png"])).size == (400, 300)   # the whole screen
        # the view's centres are screen pixels: the query text sits on MiniWoB's yellow bar in the screen grab
        image = Image.open(io.BytesIO(first.screenshot)).convert("RGB")
        query = next(e for e in parse_view(first.text) if e.role == "text")
        assert rt.offset[1] > 0 and query.y > rt.offset[1]            # below the window's toolbar
        assert image.getpixel((rt.offset[0] + 2, query.y)) == (255, 255, 0)
        refused = await osworld_action_tool.call({"code": f"__import__('os').system('touch {tmp_path}/x')"}, ctx)
        assert refused.error and not (tmp_path / "x").exists()
    finally:
        await rt.close()
