"""The ``osworld_action`` tool: one desktop step, as OSWorld's ``step()`` (SkyRL-Agent, arXiv 2511.16108, wraps
it as one tool).

Arguments: ``code`` — pyautogui-style code (parsed with ``ast``, never executed; see :mod:`.actions`) — or
``action`` — a ``computer_13`` dict (or a list of them). The runtime (``browser``, ``xvfb`` or ``osworld``)
performs the parsed actions and returns the new observation: the accessibility-tree text view, cut to
``runtime.options.observation_tokens`` tokens (default 1024) with the engine's tokenizer, and — where
``runtime.options.observation`` is ``screenshot`` or ``both`` — the screenshot, as an OpenAI image content part in
``ToolResult.images`` (its PNG bytes also under ``metadata["screenshot_png"]``). The core sends it to engines that
accept images and replaces it with a text stand-in for text-only ones (:mod:`skyrl_core.multimodal`).

A refused action is a corrective observation naming the allowed actions; nothing runs. ``DONE``/``FAIL`` end
the trajectory (``answer`` is the word). A runtime that died (killed browser, lost desktop) ends the
trajectory; its verifier then marks it ``error_runtime``.
"""

from __future__ import annotations

from typing import Any

from skyrl_core.multimodal import image_part
from skyrl_core.tools import Tool, ToolContext, ToolResult

from .actions import ActionError, parse_computer13, parse_pyautogui
from .observation import fit_to_budget

DEFAULT_OBSERVATION_TOKENS = 1024


def _refusal(exc: Exception) -> ToolResult:
    return ToolResult(output=f"Refused, nothing was run: {exc}", error=True, metadata={"refused": True})


async def osworld_action(args: dict, ctx: ToolContext) -> ToolResult:
    from .browser import RuntimeDied

    runtime = ctx.runtime
    if runtime is None or not hasattr(runtime, "act"):
        raise RuntimeError("osworld_action needs a desktop runtime (browser, xvfb or osworld); got "
                           f"{type(runtime).__name__}")
    code, action = args.get("code"), args.get("action")
    if (code is None) == (action is None):
        return _refusal(ActionError("give exactly one of 'code' (pyautogui code) or 'action' (a computer_13 "
                                    "dict)"))
    try:
        actions = parse_pyautogui(code) if code is not None else parse_computer13(action)
    except ActionError as exc:
        return _refusal(exc)
    spec = getattr(runtime, "spec", None)
    options = dict(getattr(spec, "options", None) or {})
    mode = options.get("observation", "text")
    budget = int(options.get("observation_tokens", DEFAULT_OBSERVATION_TOKENS))
    try:
        await runtime.act(actions)
        obs = await runtime.observe(screenshot=mode in ("screenshot", "both"))
    except RuntimeDied as exc:
        return ToolResult(output=f"The desktop is gone: {exc}. This trajectory ends.", error=True, finish=True,
                          metadata={"runtime_died": str(exc)})
    status = getattr(runtime, "status", None)
    tokenizer = getattr(ctx.engine, "tokenizer", None)
    text, cut = fit_to_budget(obs.text, budget, tokenizer) if mode != "screenshot" else ("", False)
    done = [a.name for a in actions if a.name in ("DONE", "FAIL")]
    header = f"Ran {len(actions)} action{'s' if len(actions) != 1 else ''}."
    output = f"{header}\nThe page now:\n{text}" if text else header
    metadata: dict[str, Any] = {"actions": [a.name for a in actions], "view_cut": cut}
    images = []
    if obs.screenshot is not None:
        metadata["screenshot_png"] = obs.screenshot
        images.append(image_part(obs.screenshot))
    if done or status in ("DONE", "FAIL"):
        word = done[-1] if done else status
        return ToolResult(output=output, finish=True, answer=word, metadata=metadata, images=images)
    return ToolResult(output=output, metadata=metadata, images=images)


osworld_action_tool = Tool(
    name="osworld_action",
    description=("Act on the screen with pyautogui calls, one per line, e.g. pyautogui.click(52, 133) or "
                 "pyautogui.typewrite('hi'); pyautogui.press('enter'). Allowed: click, doubleClick, tripleClick, "
                 "rightClick, moveTo, dragTo, mouseDown, mouseUp, scroll, typewrite, write, press, keyDown, keyUp, "
                 "hotkey, WAIT, DONE, FAIL. Returns the screen's elements with their centres @(x,y)."),
    parameters={
        "type": "object",
        "properties": {
            "code": {"type": "string", "description": "pyautogui code, one call per line"},
            "action": {"type": ["object", "array"],
                       "description": "a computer_13 action {action_type, parameters} or a list of them"},
        },
        "required": [],
        "additionalProperties": False,
    },
    handler=osworld_action,
    timeout_s=60.0,
)
