"""The browser runtime in real headless Chromium: a scripted policy solves MiniWoB++ tasks through osworld_action
with the page's own reward; hostile calls run nothing; a killed browser ends only the trajectories on it and the
pool starts a new one; pages are reused; the text view and screenshot agree with click coordinates."""

from __future__ import annotations

import asyncio
import io
import os
import signal

import pytest

from skyrl_core.multimodal import image_part
from skyrl_core.runtime import RuntimeSpec
from skyrl_core.tasks import DataSpec
from skyrl_core.tools import ToolContext
from skyrl_core.transitions import Trajectory
from skyrl_osworld.browser import BrowserRuntime, get_pool, find_chromium
from skyrl_osworld.miniwob import load_miniwob
from skyrl_osworld.scripted import decide, parse_view
from skyrl_osworld.tools import osworld_action_tool
from skyrl_osworld.verifiers import ERROR_RUNTIME, miniwob_reward


def instance(task: str, seed: int = 0):
    (inst,) = [i for i in load_miniwob(DataSpec(split="test", options={"tasks": [task], "seeds_per_task": seed + 1}))
               if i.data["seed"] == seed]
    return inst


async def started(task: str, seed: int = 0, **options):
    rt = BrowserRuntime(RuntimeSpec(type="browser", options=options))
    await rt.start()
    inst = instance(task, seed)
    await rt.prepare(inst)
    return rt, inst


def traj(inst) -> Trajectory:
    return Trajectory(instance_id=inst.id, sample_index=0, task="miniwob", group_id=inst.id)


async def solve(rt, inst, tokenizer=None, max_turns: int = 4):
    """The scripted policy, one osworld_action call per turn, as the agent loop would make them."""
    ctx = ToolContext(runtime=rt, instance=inst)
    view, results = rt.first_view, []
    for turn in range(max_turns):
        result = await osworld_action_tool.call({"code": decide(rt.instruction, view, turn)}, ctx)
        results.append(result)
        view = result.output.split("The page now:\n", 1)[-1]
        if result.finish:
            break
    return results


@pytest.mark.parametrize("task", ["click-button", "enter-text", "login-user"])
async def test_scripted_policy_solves_with_the_pages_own_reward(pools, task):
    for seed in (0, 1):
        rt, inst = await started(task, seed)
        try:
            results = await solve(rt, inst)
            assert results[-1].finish and results[-1].answer == "DONE"
            t = traj(inst)
            verdict = await miniwob_reward(t, rt, inst)
            assert verdict.reward == 1.0
            assert verdict.metrics["miniwob_raw_reward"] == 1.0 and verdict.metrics["miniwob_done"] is True
            assert verdict.metrics["miniwob_task"] == task
        finally:
            await rt.close()


async def test_an_unsolved_page_scores_zero_and_a_wrong_click_scores_zero(pools):
    rt, inst = await started("click-button", 0)
    try:
        assert (await miniwob_reward(traj(inst), rt, inst)).reward == 0.0      # nothing done yet
        els = parse_view(rt.first_view)
        target = rt.instruction.split('"')[1]
        wrong = next(e for e in els if e.role == "button" and e.name != target)
        await osworld_action_tool.call({"code": f"pyautogui.click({wrong.x}, {wrong.y})"},
                                       ToolContext(runtime=rt, instance=inst))
        verdict = await miniwob_reward(traj(inst), rt, inst)
        assert verdict.reward == 0.0 and verdict.metrics["miniwob_raw_reward"] == -1.0
    finally:
        await rt.close()


async def test_a_disallowed_call_is_refused_and_runs_nothing(pools, tmp_path):
    marker = tmp_path / "pwned"
    rt, inst = await started("enter-text", 0)
    try:
        ctx = ToolContext(runtime=rt, instance=inst)
        before = rt.first_view
        box = next(e for e in parse_view(before) if e.role == "textbox")
        for code in (f"__import__('os').system('touch {marker}')",
                     f"pyautogui.click({box.x}, {box.y})\n__import__('os').system('touch {marker}')",
                     f"pyautogui.typewrite(open('{marker}').read())"):
            result = await osworld_action_tool.call({"code": code}, ctx)
            assert result.error and not result.finish
            assert result.output.startswith("Refused, nothing was run")
            assert "pyautogui.click(...)" in result.output and "WAIT, DONE and FAIL" in result.output
        ran = await rt.exec(f"touch {marker}")            # the runtime has no command path at all
        assert ran.exit_code is None and "runs no commands" in ran.output
        assert not marker.exists()
        assert rt.actions_run == 0                       # the valid first line of a refused call did not run either
        assert (await rt.observe()).text == before
        both = await osworld_action_tool.call({"code": "DONE", "action": {"action_type": "DONE"}}, ctx)
        assert both.error and "exactly one of 'code'" in both.output
    finally:
        await rt.close()


async def test_the_page_cannot_reach_the_network(pools):
    rt, inst = await started("click-button", 0)
    try:
        blocked = await rt.evaluate("async () => { try { await fetch('http://127.0.0.1:9/'); return 'reached'; }"
                                    " catch (e) { return 'blocked'; } }")
        assert blocked == "blocked"
    finally:
        await rt.close()


async def test_a_killed_browser_ends_its_trajectories_and_the_pool_starts_a_new_one(pools):
    a, inst_a = await started("click-button", 0)
    b, inst_b = await started("enter-text", 0)
    pool = a.pool
    assert pool is b.pool and pool.launches == 1
    pid = await pool.browser_pid()
    assert pid and pid != os.getpid()
    os.kill(pid, signal.SIGKILL)
    for _ in range(100):
        if not a.lease.browser.is_connected():
            break
        await asyncio.sleep(0.05)
    result = await osworld_action_tool.call({"code": "pyautogui.click(10, 10)"}, ToolContext(runtime=a))
    assert result.finish and result.error and "runtime_died" in result.metadata
    # b's agent never acted after the kill: its verifier finds the browser gone by itself
    for rt, inst in ((a, inst_a), (b, inst_b)):
        t = traj(inst)
        verdict = await miniwob_reward(t, rt, inst)
        assert verdict.reward == 0.0
        assert t.finish_reason == ERROR_RUNTIME and t.masked and t.error.startswith(ERROR_RUNTIME)
        await rt.close()                                   # release never raises on a dead page
    c, inst_c = await started("login-user", 0)
    try:
        assert pool.launches == 2 and await pool.browser_pid() not in (None, pid)
        await solve(c, inst_c)
        assert (await miniwob_reward(traj(inst_c), c, inst_c)).reward == 1.0
    finally:
        await c.close()


async def test_a_crashed_page_ends_only_its_own_trajectory(pools):
    a, inst_a = await started("click-button", 0)
    b, inst_b = await started("enter-text", 0)
    try:
        cdp = await a.lease.context.new_cdp_session(a.page)
        try:
            await asyncio.wait_for(cdp.send("Page.crash"), 2)
        except Exception:
            pass                                           # the renderer dies mid-call: no answer comes
        for _ in range(200):
            if a.lease.crashed:
                break
            await asyncio.sleep(0.05)
        result = await osworld_action_tool.call({"code": "pyautogui.click(10, 10)"}, ToolContext(runtime=a))
        assert result.finish and "runtime_died" in result.metadata
        t = traj(inst_a)
        verdict = await miniwob_reward(t, a, inst_a)
        assert verdict.reward == 0.0 and t.finish_reason == ERROR_RUNTIME
        await solve(b, inst_b)                             # the other page on the same browser goes on
        assert (await miniwob_reward(traj(inst_b), b, inst_b)).reward == 1.0
    finally:
        await a.close()
        await b.close()


async def test_pages_are_reused_and_reset_between_trajectories(pools):
    first, inst = await started("enter-text", 0)
    await solve(first, inst)
    pool = first.pool
    await first.close()
    assert pool.pages_created == 1 and pool.in_use == 0
    second, inst2 = await started("enter-text", 1)
    try:
        assert pool.pages_created == 1                      # the same page, reset
        assert second.first_view and 'value="' not in second.first_view   # nothing typed carried over
        await solve(second, inst2)
        assert (await miniwob_reward(traj(inst2), second, inst2)).reward == 1.0
    finally:
        await second.close()


async def test_the_pool_keeps_no_more_pages_than_were_in_use_at_once(pools):
    runtimes = [(await started("focus-text", k))[0] for k in range(3)]
    pool = runtimes[0].pool
    assert pool.peak_in_use == 3 and pool.pages_created == 3
    for rt in runtimes:
        await rt.close()
    assert len(pool._idle) == 3
    again = [(await started("focus-text", k))[0] for k in range(3)]
    assert pool.pages_created == 3
    for rt in again:
        await rt.close()


async def test_screenshot_pixels_are_click_coordinates(pools):
    from PIL import Image

    rt, inst = await started("click-button", 0, observation="both")
    try:
        ctx = ToolContext(runtime=rt, instance=inst)
        result = await osworld_action_tool.call({"code": "pyautogui.moveTo(1, 1)"}, ctx)
        png = result.metadata["screenshot_png"]
        image = Image.open(io.BytesIO(png))
        assert image.size == (160, 210)                     # the MiniWoB++ area, one pixel per CSS pixel
        assert result.images == [image_part(png)]     # the screenshot as an image content part for the engine
        # the query bar is yellow (#FF0) and the area below it white: the view's boxes land on them
        query = next(e for e in parse_view(rt.first_view) if e.role == "text")
        assert image.convert("RGB").getpixel((2, query.y)) == (255, 255, 0)
        assert image.convert("RGB").getpixel((2, 200)) == (255, 255, 255)
    finally:
        await rt.close()


async def test_the_view_is_cut_to_the_token_budget(pools, tokenizer):
    rt, inst = await started("click-tab", 0, observation_tokens=40)
    try:
        result = await osworld_action_tool.call({"code": "WAIT(0)"}, ToolContext(runtime=rt, instance=inst,
                                                                                  engine=_Tok(tokenizer)))
        view = result.output.split("The page now:\n", 1)[1]
        assert result.metadata["view_cut"] and "more elements not shown" in view
        assert len(tokenizer(view)["input_ids"]) <= 40 + 30
    finally:
        await rt.close()


class _Tok:
    def __init__(self, tokenizer):
        self.tokenizer = tokenizer


def test_a_missing_chromium_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.delenv("SKYRL_CHROMIUM", raising=False)
    import skyrl_osworld.browser as browser

    monkeypatch.setattr(browser.os.path, "isfile", lambda p: False)
    with pytest.raises(FileNotFoundError, match="apt-get install chromium"):
        find_chromium("/no/such/chromium")


def test_unknown_runtime_options_are_named():
    from skyrl_core.errors import ConfigError

    with pytest.raises(ConfigError, match=r"\['colour'\].*valid: chromium"):
        BrowserRuntime(RuntimeSpec(type="browser", options={"colour": "blue"}))


async def test_get_pool_is_per_event_loop(pools):
    assert get_pool(pools) is get_pool(pools)
