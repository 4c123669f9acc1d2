"""The xvfb runtime's worker: applies validated actions with the real pyautogui on ``$DISPLAY``.

Reads one JSON action per line on stdin (``{"name": "click", "args": {"x": 10, "y": 20}}``, as produced by
:func:`skyrl_osworld.actions.parse_pyautogui`), re-validates it with :func:`~skyrl_osworld.actions.make_action`
and answers ``{"ok": true}`` or ``{"error": "..."}`` per line. It never evaluates text: only the named
pyautogui functions, with the validated arguments, are called.
"""

from __future__ import annotations

import json
import sys
import time


def apply(pyautogui, name: str, a: dict) -> None:
    xy = (a["x"], a["y"]) if "x" in a else ()
    if name == "click":
        pyautogui.click(*xy, clicks=a.get("clicks", 1), button=a.get("button", "left"))
    elif name in ("doubleClick", "tripleClick"):
        getattr(pyautogui, name)(*xy, button=a.get("button", "left"))
    elif name in ("rightClick", "middleClick", "moveTo"):
        getattr(pyautogui, name)(*xy)
    elif name == "dragTo":
        pyautogui.dragTo(*xy, duration=0.2, button=a.get("button", "left"))
    elif name in ("mouseDown", "mouseUp"):
        getattr(pyautogui, name)(*xy, button=a.get("button", "left"))
    elif name in ("scroll", "hscroll"):
        getattr(pyautogui, name)(int(a["clicks"]), *xy)
    elif name == "typewrite":
        pyautogui.typewrite(a["message"] if isinstance(a["message"], str) else list(a["message"]))
    elif name == "press":
        pyautogui.press(list(a["keys"]), presses=a["presses"])
    elif name in ("keyDown", "keyUp"):
        getattr(pyautogui, name)(a["key"])
    elif name == "hotkey":
        pyautogui.hotkey(*a["keys"])
    elif name == "sleep":
        time.sleep(a["seconds"])
    else:
        raise ValueError(f"unknown action {name!r}")


def main() -> None:
    import pyautogui

    from skyrl_osworld.actions import ActionError, make_action

    pyautogui.FAILSAFE = False  # the corner of a virtual screen is a valid target
    pyautogui.PAUSE = 0.02
    print("ready", flush=True)
    for line in sys.stdin:
        try:
            msg = json.loads(line)
            act = make_action(msg["name"], (), {k: (tuple(v) if isinstance(v, list) else v)
                                                for k, v in (msg.get("args") or {}).items()})
            apply(pyautogui, act.name, act.args)
            print(json.dumps({"ok": True}), flush=True)
        except (ActionError, ValueError, KeyError, TypeError) as exc:
            print(json.dumps({"error": f"{type(exc).__name__}: {exc}"}), flush=True)
        except Exception as exc:  # pyautogui/Xlib failure: report, keep serving
            print(json.dumps({"error": f"{type(exc).__name__}: {exc}"}), flush=True)


if __name__ == "__main__":
    main()
