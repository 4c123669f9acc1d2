"""The plugin's tasks and their instruction builders: ``miniwob`` (MiniWoB++ pages in the browser runtime,
:mod:`.miniwob` loads the instances) and ``osworld`` (OSWorld task configs on DesktopEnv desktops, :mod:`.osworld`
loads and validates them). Both builders read the runtime that ``prepare`` just started
(:data:`.miniwob.current_runtime`) for the page's instruction and first accessibility view."""

from __future__ import annotations

from skyrl_core.tasks import DataSpec, Instance, Task

from .miniwob import current_runtime, load_miniwob
from .osworld import load_task_configs

SYSTEM = """You control a web page with the mouse and keyboard through the tool osworld_action.
Its argument "code" holds pyautogui calls, one per line, for example:
pyautogui.click(52, 133)
pyautogui.typewrite("hello")
pyautogui.press("enter")
Allowed: click, doubleClick, tripleClick, rightClick, moveTo, dragTo, mouseDown, mouseUp, scroll, typewrite,
write, press, keyDown, keyUp, hotkey, and the words WAIT, DONE, FAIL. Coordinates are screen pixels: each element
of the page is listed as [n] role "name" @(x,y) WxH, where (x,y) is its centre. Call DONE when the task is done."""


def build_miniwob_instructions(instance: Instance, task: Task) -> list[dict]:
    """System prompt, then the page's instruction and its first accessibility view. Reads the runtime that
    ``prepare`` just started (``current_runtime``); raises RuntimeError outside an init stage."""
    runtime = current_runtime.get()
    if runtime is None or getattr(runtime, "instruction", None) is None:
        raise RuntimeError("build_miniwob_instructions runs in the init stage, after the browser runtime's "
                           "prepare() started the episode")
    first = getattr(runtime, "first_view", None) or ""
    return [{"role": "system", "content": SYSTEM},
            {"role": "user", "content": f"Task: {runtime.instruction}\n\nThe page now:\n{first}"}]


miniwob_task = Task(
    name="miniwob",
    description="MiniWoB++ web tasks (miniwob package pages, offline, seeded) solved with osworld_action in "
                "headless Chromium; reward from the page's own WOB_RAW_REWARD_GLOBAL",
    load=load_miniwob,
    instruction_builder="miniwob",
    tools=("osworld_action",),
    verifier="miniwob_reward",
    runtime="browser",
    default_data=DataSpec(split="test"),
)


def build_osworld_instructions(instance: Instance, task: Task) -> list[dict]:
    """System prompt, the task config's instruction and the desktop's first accessibility view."""
    runtime = current_runtime.get()
    view = getattr(runtime, "first_view", "") or ""
    instruction = getattr(runtime, "instruction", None) or instance.data["instruction"]
    return [{"role": "system", "content": SYSTEM.replace("a web page", "a computer desktop")},
            {"role": "user", "content": f"Task: {instruction}\n\nThe page now:\n{view}"}]


osworld_task = Task(
    name="osworld",
    description="OSWorld task configs (data.path: JSON/JSONL/dir) on real desktops through DesktopEnv bridges; "
                "reward from DesktopEnv.evaluate()",
    load=load_task_configs,
    instruction_builder="osworld",
    tools=("osworld_action",),
    verifier="osworld_evaluate",
    runtime="osworld",
)
