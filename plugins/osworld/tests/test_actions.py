"""The action parser: every allowed pyautogui call and computer_13 form parses to the right Action; hostile code
is refused with a message naming the allowed actions, and never runs."""

from __future__ import annotations

import pytest

from skyrl_osworld.actions import (ALLOWED, Action, ActionError, make_action, parse_computer13, parse_pyautogui,
                                   to_pyautogui)


def test_every_allowed_call_parses_with_its_arguments():
    code = """
import pyautogui
import time
pyautogui.click(10, 20)
pyautogui.click(x=5, y=6, clicks=2, button='right')
pyautogui.click((7, 8))
click(1, 2)
pyautogui.doubleClick(30, 40)
pyautogui.tripleClick(31, 41)
pyautogui.rightClick(50, 60)
pyautogui.moveTo(70, 80, duration=0.5)
pyautogui.dragTo(90, 100, button='left')
pyautogui.mouseDown()
pyautogui.mouseUp(3, 4, button='middle')
pyautogui.scroll(-3, x=11, y=12)
pyautogui.typewrite('hello', interval=0.1)
pyautogui.write(['a', 'b'])
pyautogui.press('enter', presses=2)
pyautogui.press(['tab', 'tab'])
pyautogui.keyDown('shift')
pyautogui.keyUp('shift')
pyautogui.hotkey('ctrl', 'a')
time.sleep(0.25)
WAIT
DONE
"""
    acts = parse_pyautogui(code)
    assert [a.name for a in acts] == ["click", "click", "click", "click", "doubleClick", "tripleClick", "rightClick",
                                      "moveTo", "dragTo", "mouseDown", "mouseUp", "scroll", "typewrite",
                                      "typewrite", "press", "press", "keyDown", "keyUp", "hotkey", "sleep", "WAIT",
                                      "DONE"]
    assert acts[0].args == {"x": 10, "y": 20, "button": "left", "clicks": 1}
    assert acts[1].args == {"x": 5, "y": 6, "button": "right", "clicks": 2}
    assert acts[2].args["x"] == 7 and acts[2].args["y"] == 8
    assert acts[9].args == {"button": "left"}                     # mouseDown where the pointer is
    assert acts[11].args == {"x": 11, "y": 12, "clicks": -3}
    assert acts[12].args == {"message": "hello"}
    assert acts[13].args == {"message": ("a", "b")}
    assert acts[14].args == {"keys": ("enter",), "presses": 2}
    assert acts[15].args == {"keys": ("tab", "tab"), "presses": 1}
    assert acts[18].args == {"keys": ("ctrl", "a")}
    assert acts[19].args == {"seconds": 0.25}
    assert acts[-1].special and acts[-2].args == {"seconds": 1.0}
    assert set(ALLOWED) >= {"click", "doubleClick", "tripleClick", "rightClick", "moveTo", "dragTo", "mouseDown",
                            "mouseUp", "scroll", "typewrite", "write", "press", "keyDown", "keyUp", "hotkey"}


def test_canonical_code_round_trips():
    acts = parse_pyautogui("pyautogui.click(10, 20)\npyautogui.typewrite('a\"b')\npyautogui.hotkey('ctrl', 'c')\n"
                           "pyautogui.press('enter')\ntime.sleep(1)\nFAIL")
    code = to_pyautogui(acts)
    assert "pyautogui.click(x=10, y=20, button='left', clicks=1)" in code.splitlines()
    assert parse_pyautogui(code) == acts


def test_a_fenced_block_is_read():
    assert parse_pyautogui("```python\npyautogui.click(1, 2)\n```")[0].args["x"] == 1


@pytest.mark.parametrize("code, culprit", [
    ("__import__('os').system('touch {marker}')", "__import__('os').system"),
    ("import os\nos.system('touch {marker}')", "Import statement"),
    ("exec(\"open('{marker}', 'w')\")", "'exec'"),
    ("eval('1')", "'eval'"),
    ("pyautogui.click(__import__('os').system('touch {marker}'), 1)", "not a literal"),
    ("x = 5\npyautogui.click(x, x)", "Assign statement"),
    ("pyautogui.click(x, 1)", "not a literal"),
    ("for i in range(3): pyautogui.click(1, 1)", "For statement"),
    ("pyautogui.__dict__['click'](1, 2)", "not an allowed action"),
    ("pyautogui.screenshot('{marker}')", "not an allowed action"),
    ("pyautogui.os.system('touch {marker}')", "not an allowed action"),
    ("(lambda: 1)()", "not an allowed action"),
    ("pyautogui.click(*[1, 2])", "*args"),
    ("pyautogui.click(**{{'x': 1}})", "**kwargs"),
    ("pyautogui.typewrite(f'{{1}}')", "not a literal"),
    ("pyautogui.typewrite('a' * 10**9)", "not a literal"),
    ("pyautogui.click(1e9, 5)", "off the screen"),
    ("pyautogui.click(1)", "both x and y"),
    ("pyautogui.click(1, 2, button='evil')", "button must be one of"),
    ("pyautogui.press('enter', presses=1000000)", "presses must be"),
    ("pyautogui.click(1, 2, clicks=True)", "clicks must be"),
    ("pyautogui.click(1, 2, nonsense=1)", "unknown keyword"),
    ("import pyautogui as os", "Import statement"),
    ("", "empty"),
    ("pyautogui.click(1,", "not valid Python"),
    ("\n".join(["pyautogui.click(1, 1)"] * 40), "more than 32"),
])
def test_hostile_or_bad_code_is_refused_and_runs_nothing(code, culprit, tmp_path):
    marker = tmp_path / "pwned"
    with pytest.raises(ActionError) as err:
        parse_pyautogui(code.format(marker=marker))
    msg = str(err.value)
    assert culprit in msg
    assert "pyautogui.click(...)" in msg and "WAIT, DONE and FAIL" in msg    # the corrective part
    assert not marker.exists()


def test_computer_13_forms():
    acts = parse_computer13([
        {"action_type": "CLICK", "parameters": {"x": 3, "y": 4, "button": "right", "num_clicks": 2}},
        {"action_type": "TYPING", "parameters": {"text": "hi"}},
        {"action_type": "HOTKEY", "parameters": {"keys": ["ctrl", "s"]}},
        {"action_type": "SCROLL", "parameters": {"dx": 2, "dy": -1}},
        {"action_type": "PRESS", "parameters": {"key": "enter"}},
        {"action_type": "DRAG_TO", "parameters": {"x": 9, "y": 9}},
        {"action_type": "DONE"},
    ])
    assert acts == [Action("click", {"x": 3, "y": 4, "button": "right", "clicks": 2}),
                    Action("typewrite", {"message": "hi"}), Action("hotkey", {"keys": ("ctrl", "s")}),
                    Action("scroll", {"clicks": -1}), Action("hscroll", {"clicks": 2}),
                    Action("press", {"keys": ("enter",), "presses": 1}),
                    Action("dragTo", {"x": 9, "y": 9, "button": "left"}), Action("DONE")]
    with pytest.raises(ActionError, match="unknown computer_13 action_type 'RM_RF'.*CLICK"):
        parse_computer13({"action_type": "RM_RF"})
    with pytest.raises(ActionError, match="action_type"):
        parse_computer13("pyautogui.click(1, 2)")


def test_make_action_rejects_what_the_worker_must_never_run():
    with pytest.raises(ActionError):
        make_action("typewrite", (), {"message": {"__class__": 1}})
    with pytest.raises(ActionError):
        make_action("hotkey", ("ctrl", 5))
