"""Desktop actions: pyautogui-style code and OSWorld's ``computer_13`` dicts, parsed into :class:`Action` values.

Agent code is hostile, so it is never executed. :func:`parse_pyautogui` reads it with :mod:`ast` and accepts only
calls of the allowed actions (``pyautogui.click(10, 20)`` or bare ``click(10, 20)``) whose arguments are
literals (numbers, strings, booleans, None, lists/tuples of those), plus ``time.sleep(s)``, ``import pyautogui`` /
``import time`` (ignored) and the bare special actions ``WAIT``, ``DONE`` and ``FAIL``. Anything else — another
function, an attribute chain, a variable, a loop, ``__import__('os')`` — raises :class:`ActionError`, whose
message names what was refused and lists the allowed actions; the tool returns it as a corrective observation.

Coordinates are screen pixels (the screenshot's pixels: ``x`` to the right, ``y`` down from the top-left).
Runtimes execute the parsed list; the OSWorld runtime re-emits it as canonical pyautogui code
(:func:`to_pyautogui`), so even the VM receives only validated calls.
"""

from __future__ import annotations

import ast
from typing import Any

import attrs

MAX_ACTIONS = 32          # actions in one tool call
MAX_TEXT_CHARS = 2000     # characters one typewrite may type
MAX_PRESSES = 50          # repeats of one key press / clicks of one click
MAX_SLEEP_S = 5.0         # one time.sleep / WAIT
MAX_SCROLL = 50           # scroll clicks

BUTTONS = ("left", "right", "middle")
SPECIAL = ("WAIT", "DONE", "FAIL")

# action name -> (positional parameter names in pyautogui's order, defaults)
SIGNATURES: dict[str, tuple[tuple[str, ...], dict[str, Any]]] = {
    "click": (("x", "y", "clicks", "interval", "button"), {"clicks": 1, "interval": 0.0, "button": "left"}),
    "doubleClick": (("x", "y", "interval", "button"), {"interval": 0.0, "button": "left"}),
    "tripleClick": (("x", "y", "interval", "button"), {"interval": 0.0, "button": "left"}),
    "rightClick": (("x", "y"), {}),
    "middleClick": (("x", "y"), {}),
    "moveTo": (("x", "y", "duration"), {"duration": 0.0}),
    "dragTo": (("x", "y", "duration", "button"), {"duration": 0.0, "button": "left"}),
    "mouseDown": (("x", "y", "button"), {"button": "left"}),
    "mouseUp": (("x", "y", "button"), {"button": "left"}),
    "scroll": (("clicks", "x", "y"), {}),
    "hscroll": (("clicks", "x", "y"), {}),
    "typewrite": (("message", "interval"), {"interval": 0.0}),
    "write": (("message", "interval"), {"interval": 0.0}),
    "press": (("keys", "presses", "interval"), {"presses": 1, "interval": 0.0}),
    "keyDown": (("key",), {}),
    "keyUp": (("key",), {}),
    "hotkey": ((), {}),  # *keys
    "sleep": (("seconds",), {}),
}
ALLOWED = tuple(n for n in SIGNATURES if n != "sleep")
ALLOWED_TEXT = (", ".join(f"pyautogui.{n}(...)" for n in ALLOWED) + ", time.sleep(seconds), and the bare "
                "special actions WAIT, DONE and FAIL")
# mouseDown/mouseUp/keyDown/keyUp without a position are valid; clicks without one act where the pointer is
_NEEDS_XY = {"moveTo", "dragTo"}
_KWARGS_IGNORED = {"duration", "interval", "tween", "logScreenshot", "_pause"}

# OSWorld's computer_13 action types -> our names
COMPUTER_13 = {"MOVE_TO": "moveTo", "CLICK": "click", "MOUSE_DOWN": "mouseDown", "MOUSE_UP": "mouseUp",
               "RIGHT_CLICK": "rightClick", "DOUBLE_CLICK": "doubleClick", "DRAG_TO": "dragTo",
               "SCROLL": "scroll", "TYPING": "typewrite", "PRESS": "press", "KEY_DOWN": "keyDown",
               "KEY_UP": "keyUp", "HOTKEY": "hotkey", "WAIT": "WAIT", "FAIL": "FAIL", "DONE": "DONE"}


class ActionError(ValueError):
    """Refused action code: the message names the culprit and lists the allowed actions."""


@attrs.define(frozen=True)
class Action:
    """One validated action. ``name`` is an allowed pyautogui function, ``sleep`` or a special (WAIT/DONE/FAIL);
    ``args`` holds its normalised keyword arguments (``x``/``y`` in screen pixels, ``keys`` a tuple of key
    names for press/hotkey, ``message`` a str or a tuple of key names for typewrite)."""

    name: str
    args: dict[str, Any] = attrs.field(factory=dict, hash=False)

    @property
    def special(self) -> bool:
        return self.name in SPECIAL


def _refuse(what: str) -> ActionError:
    return ActionError(f"{what}. Only these calls with literal arguments run: {ALLOWED_TEXT}. "
                       f"Example: pyautogui.click(120, 80); pyautogui.typewrite('hello'); pyautogui.press('enter')")


def _literal(node: ast.AST, where: str) -> Any:
    try:
        value = ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        raise _refuse(f"argument {where} is not a literal ({ast.unparse(node)[:80]!r}); variables, expressions "
                      f"and calls are not evaluated") from None
    if isinstance(value, (dict, set, bytes, complex)):
        raise _refuse(f"argument {where} is a {type(value).__name__}; use numbers, strings or lists")
    return value


def _call_name(func: ast.AST) -> str | None:
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
        if func.value.id == "pyautogui" and func.attr in SIGNATURES and func.attr != "sleep":
            return func.attr
        if func.value.id == "time" and func.attr == "sleep":
            return "sleep"
    return None


def parse_pyautogui(code: str) -> list[Action]:
    """Parse pyautogui-style ``code`` into actions, executing nothing. Raises ActionError on syntax errors,
    disallowed statements or calls, non-literal or out-of-range arguments, or more than MAX_ACTIONS actions."""
    if not isinstance(code, str) or not code.strip():
        raise _refuse("the code is empty")
    code = code.strip()
    if code.startswith("```"):  # a fenced block: take its body
        code = code.strip("`").split("\n", 1)[-1] if "\n" in code else code.strip("`")
    try:
        tree = ast.parse(code, mode="exec")
    except SyntaxError as exc:
        raise _refuse(f"the code is not valid Python (line {exc.lineno}: {exc.msg})") from None
    actions: list[Action] = []
    for stmt in tree.body:
        if isinstance(stmt, ast.Import) and all(a.name in ("pyautogui", "time") and a.asname is None
                                                for a in stmt.names):
            continue
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Name) and stmt.value.id in SPECIAL:
            actions.append(make_action(stmt.value.id))
            continue
        if not (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call)):
            raise _refuse(f"line {stmt.lineno} is a {type(stmt).__name__} statement ({ast.unparse(stmt)[:80]!r})")
        call = stmt.value
        name = _call_name(call.func)
        if name is None or (name not in SIGNATURES and name not in SPECIAL):
            raise _refuse(f"line {stmt.lineno} calls {ast.unparse(call.func)[:80]!r}, which is not an allowed "
                          f"action")
        if any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords):
            raise _refuse(f"line {stmt.lineno}: *args and **kwargs are not allowed")
        args = [_literal(a, f"{i + 1} of {name}") for i, a in enumerate(call.args)]
        kwargs = {k.arg: _literal(k.value, f"{k.arg!r} of {name}") for k in call.keywords}
        actions.append(make_action(name, args, kwargs))
        if len(actions) > MAX_ACTIONS:
            raise _refuse(f"more than {MAX_ACTIONS} actions in one call")
    if not actions:
        raise _refuse("the code contains no action")
    return actions


def make_action(name: str, args: list[Any] | tuple = (), kwargs: dict[str, Any] | None = None) -> Action:
    """Bind positional and keyword arguments to ``name``'s parameters and validate them. Raises ActionError."""
    kwargs = dict(kwargs or {})
    if name in SPECIAL:
        if name == "WAIT":
            seconds = kwargs.pop("seconds", args[0] if args else 1.0)
            return Action("WAIT", {"seconds": _seconds(seconds, name)})
        return Action(name)
    params, defaults = SIGNATURES[name]
    if name == "hotkey":
        keys = list(args) + ([kwargs.pop("keys")] if "keys" in kwargs else [])
        for ignored in _KWARGS_IGNORED:
            kwargs.pop(ignored, None)
        if kwargs:
            raise _refuse(f"hotkey got unknown keyword arguments {sorted(kwargs)}")
        flat = [k for key in keys for k in (key if isinstance(key, (list, tuple)) else [key])]
        return Action("hotkey", {"keys": _keys(flat, name)})
    if len(args) > len(params):
        raise _refuse(f"{name} takes at most {len(params)} positional arguments ({', '.join(params)}), got "
                      f"{len(args)}")
    bound = dict(defaults)
    bound.update(zip(params, args))
    for key, value in kwargs.items():
        if key in _KWARGS_IGNORED:
            continue
        if key not in params:
            raise _refuse(f"{name} got an unknown keyword argument {key!r} (valid: {', '.join(params) or 'none'})")
        bound[key] = value
    for ignored in ("duration", "interval"):
        bound.pop(ignored, None)
    # pyautogui.click((x, y)) passes a point as the first argument
    if isinstance(bound.get("x"), (list, tuple)) and len(bound["x"]) == 2 and bound.get("y") is None:
        bound["x"], bound["y"] = bound["x"]
    return Action("typewrite" if name == "write" else name, _validate(name, bound))


def _number(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        raise _refuse(f"{what} must be a number, got {value!r}")
    return value


def _seconds(value: Any, name: str) -> float:
    s = float(_number(value, f"{name}'s seconds"))
    if s < 0:
        raise _refuse(f"{name}'s seconds must be >= 0, got {s}")
    return min(s, MAX_SLEEP_S)


def _keys(keys: list[Any], name: str) -> tuple[str, ...]:
    if not keys:
        raise _refuse(f"{name} needs at least one key name")
    if len(keys) > MAX_PRESSES:
        raise _refuse(f"{name} got {len(keys)} keys; at most {MAX_PRESSES}")
    for key in keys:
        if not isinstance(key, str) or not key or len(key) > 20:
            raise _refuse(f"{name}: a key must be a key name such as 'enter', 'ctrl' or 'a', got {key!r}")
    return tuple(keys)


def _validate(name: str, a: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if "x" in SIGNATURES[name][0]:
        x, y = a.get("x"), a.get("y")
        if (x is None) != (y is None):
            raise _refuse(f"{name} needs both x and y (or neither, to act where the pointer is)")
        if x is None and (name in _NEEDS_XY):
            raise _refuse(f"{name} needs x and y")
        if x is not None:
            x, y = _number(x, f"{name}'s x"), _number(y, f"{name}'s y")
            if x < 0 or y < 0 or x > 100000 or y > 100000:
                raise _refuse(f"{name}'s position ({x}, {y}) is off the screen")
            out["x"], out["y"] = x, y
    if "button" in a:
        if a["button"] not in BUTTONS:
            raise _refuse(f"{name}'s button must be one of {', '.join(BUTTONS)}, got {a['button']!r}")
        out["button"] = a["button"]
    if name == "click":
        clicks = a.get("clicks", 1)
        if isinstance(clicks, bool) or not isinstance(clicks, int) or not 1 <= clicks <= 3:
            raise _refuse(f"click's clicks must be 1, 2 or 3, got {clicks!r}")
        out["clicks"] = clicks
    elif name in ("scroll", "hscroll"):
        clicks = _number(a.get("clicks"), f"{name}'s clicks")
        if abs(clicks) > MAX_SCROLL:
            raise _refuse(f"{name}'s clicks must be within +-{MAX_SCROLL}, got {clicks}")
        out["clicks"] = clicks
    elif name in ("typewrite", "write"):
        message = a.get("message")
        if isinstance(message, str):
            if len(message) > MAX_TEXT_CHARS:
                raise _refuse(f"{name}'s message is {len(message)} characters; at most {MAX_TEXT_CHARS}")
            out["message"] = message
        elif isinstance(message, (list, tuple)):
            out["message"] = _keys(list(message), name)
        else:
            raise _refuse(f"{name} needs a message string (or a list of key names), got {message!r}")
    elif name == "press":
        keys = a.get("keys")
        presses = a.get("presses", 1)
        if isinstance(presses, bool) or not isinstance(presses, int) or not 1 <= presses <= MAX_PRESSES:
            raise _refuse(f"press's presses must be an integer from 1 to {MAX_PRESSES}, got {presses!r}")
        out["keys"] = _keys(list(keys) if isinstance(keys, (list, tuple)) else [keys], name)
        out["presses"] = presses
    elif name in ("keyDown", "keyUp"):
        out["key"] = _keys([a.get("key")], name)[0]
    elif name == "sleep":
        out["seconds"] = _seconds(a.get("seconds"), "time.sleep")
    return out


def parse_computer13(action: Any) -> list[Action]:
    """Parse one OSWorld ``computer_13`` action ``{"action_type": "CLICK", "parameters": {...}}`` (or a list
    of them). Raises ActionError naming the bad field and the valid action types."""
    items = action if isinstance(action, list) else [action]
    if not items or len(items) > MAX_ACTIONS:
        raise ActionError(f"computer_13 takes 1 to {MAX_ACTIONS} actions, got {len(items)}")
    out = []
    for item in items:
        if not isinstance(item, dict) or "action_type" not in item:
            raise ActionError(f"a computer_13 action is an object with 'action_type' (one of "
                              f"{', '.join(COMPUTER_13)}) and 'parameters', got {str(item)[:120]!r}")
        kind = item["action_type"]
        if kind not in COMPUTER_13:
            raise ActionError(f"unknown computer_13 action_type {kind!r}; valid: {', '.join(COMPUTER_13)}")
        p = dict(item.get("parameters") or {})
        name = COMPUTER_13[kind]
        if name == "click":
            kw = {k: p[k] for k in ("x", "y", "button") if k in p}
            if "num_clicks" in p:
                kw["clicks"] = p["num_clicks"]
            out.append(make_action("click", (), kw))
        elif name == "scroll":
            dx, dy = p.get("dx", 0), p.get("dy", 0)
            if dy:
                out.append(make_action("scroll", (dy,)))
            if dx:
                out.append(make_action("hscroll", (dx,)))
            if not (dx or dy):
                raise ActionError("SCROLL needs a non-zero 'dx' or 'dy'")
        elif name == "typewrite":
            out.append(make_action("typewrite", (p.get("text"),)))
        elif name in ("press", "keyDown", "keyUp"):
            out.append(make_action(name, (p.get("key"),)))
        elif name == "hotkey":
            out.append(make_action("hotkey", tuple(p.get("keys") or ())))
        else:
            out.append(make_action(name, (), {k: v for k, v in p.items() if k in ("x", "y", "button",
                                                                                   "seconds")}))
    return out


def to_pyautogui(actions: list[Action]) -> str:
    """Canonical pyautogui code for validated actions (what the OSWorld runtime sends to its desktop), with
    ``WAIT``/``DONE``/``FAIL`` kept as the bare words DesktopEnv understands."""
    lines = []
    for act in actions:
        a = dict(act.args)
        if act.special:
            lines.append(act.name)
        elif act.name == "sleep":
            lines.append(f"time.sleep({a['seconds']!r})")
        elif act.name == "hotkey":
            lines.append(f"pyautogui.hotkey({', '.join(repr(k) for k in a['keys'])})")
        elif act.name == "press":
            keys = a["keys"][0] if len(a["keys"]) == 1 else list(a["keys"])
            lines.append(f"pyautogui.press({keys!r}, presses={a['presses']})")
        else:
            parts = [f"{k}={v!r}" for k, v in a.items()]
            lines.append(f"pyautogui.{act.name}({', '.join(parts)})")
    return "\n".join(lines)
