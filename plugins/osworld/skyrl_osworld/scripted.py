"""A scripted MiniWoB++ policy (``miniwob_scripted``): a benchmark fixture run by ``skyrl osworld scaffold-check
CONFIG``, answering through the engine interface, but never an inference engine
(:mod:`skyrl_core.default_plugins.eval.scripted`: no config names it, ``skyrl train`` refuses it).

It reads what a text-only model reads — the task sentence and the latest accessibility view in the prompt —
and writes one ``osworld_action`` call per turn in the Hermes ``<tool_call>`` format, tokenised with the
configured model's tokenizer. It is a reference policy: it proves the tool, runtime, episode control and
verifier end to end (its success rate is the environment's ceiling for these task types, 1.0 measured): a
scaffold check, not a score. It solves the task types in
``skyrl_osworld.miniwob.DEFAULT_TASKS``; on anything else it calls ``FAIL``.
"""

from __future__ import annotations

import json
import re
from typing import Any

import attrs

from skyrl_core.inference.base import GenerationOutput, SamplingParams
from skyrl_core.default_plugins.eval.scripted import ScriptedPolicy

_LINE = re.compile(r'^(?P<indent>\s*)\[(?P<n>\d+)\] (?P<role>\S+) "(?P<name>.*?)"(?P<rest>.*?)@\((?P<x>-?\d+),'
                   r'(?P<y>-?\d+)\) (?P<w>\d+)x(?P<h>\d+)\s*$')


@attrs.define
class Element:
    """One line of the accessibility view."""

    role: str
    name: str
    x: int
    y: int
    w: int
    h: int
    states: str = ""


def parse_view(text: str) -> list[Element]:
    """The elements of an accessibility view (lines ``[n] role "name" ... @(x,y) WxH``)."""
    out = []
    for line in text.splitlines():
        m = _LINE.match(line)
        if m:
            out.append(Element(m["role"], m["name"], int(m["x"]), int(m["y"]), int(m["w"]), int(m["h"]),
                               m["rest"].strip()))
    return out


def _find(els: list[Element], roles: tuple[str, ...], name: str | None = None) -> list[Element]:
    return [e for e in els if e.role in roles and (name is None or e.name.strip().lower() == name.lower())]


def _click(e: Element) -> str:
    return f"pyautogui.click({e.x}, {e.y})"


def _typed(e: Element, text: str) -> list[str]:
    return [_click(e), f"pyautogui.typewrite({text!r})"]


def _submit(els: list[Element], word: str = "submit") -> list[str]:
    buttons = _find(els, ("button",), word) or _find(els, ("button",))
    return [_click(buttons[-1])] if buttons else []


def decide(instruction: str, view: str, turn: int) -> str:
    """The pyautogui code for the next step of ``instruction`` given the current ``view`` (``turn`` counts
    this trajectory's earlier calls). Returns ``FAIL`` when it does not know the task."""
    els = parse_view(view)
    q = instruction.strip()
    quoted = re.findall(r'"([^"]*)"', q)
    boxes = _find(els, ("textbox", "searchbox"))
    steps: list[str] = []
    if m := re.match(r'Click on the "(.*)" button\.', q):
        steps = [_click(e) for e in _find(els, ("button",), m[1])[:1]]
    elif m := re.match(r'Click on the link "(.*)"\.', q):
        # MiniWoB++ links are styled spans: an exact-case text match first, then any case
        exact = [e for e in els if e.role in ("link", "text") and e.name.strip() == m[1]]
        steps = [_click(e) for e in (exact or _find(els, ("link", "text"), m[1]))[:1]]
    elif m := re.match(r"Click on (Tab #\d+)\.", q):
        steps = [_click(e) for e in _find(els, ("tab",), m[1])[:1]]
    elif m := re.match(r'Switch between the tabs to find and click on the link "(.*)"\.', q):
        links = _find(els, ("link",), m[1])
        if links:
            steps = [_click(links[0])]
        else:
            tabs = _find(els, ("tab",))
            chosen = next((i for i, t in enumerate(tabs) if "selected" in t.states.split()), -1)
            if tabs and turn < len(tabs) + 1:
                return _click(tabs[(chosen + 1) % len(tabs)])
    elif q.startswith("Select ") and q.endswith("and click Submit.") and "from the list" not in q:
        body = q[len("Select "):-len("and click Submit.")].strip().rstrip(",")
        wanted = [] if body == "nothing" else [w.strip() for w in re.split(r",\s*", body) if w.strip()]
        for box in _find(els, ("checkbox",)):
            should = box.name.strip() in wanted
            if should != ("checked" in box.states.split()):
                steps.append(_click(box))
        steps += _submit(els)
    elif m := re.match(r"Select (.*) from the list and click Submit\.", q):
        combo = _find(els, ("combobox",))
        if combo:
            # type-ahead on a focused <select> picks the option without opening its popup
            steps = [_click(combo[0]), "pyautogui.press('escape')", f"pyautogui.typewrite({m[1]!r})"] + _submit(els)
    elif q.startswith("Enter the username") and len(quoted) == 2 and len(boxes) >= 2:
        steps = _typed(boxes[0], quoted[0]) + _typed(boxes[1], quoted[1]) + _submit(els, "login")
    elif q.startswith("Enter the password") and quoted and len(boxes) >= 2:
        steps = _typed(boxes[0], quoted[0]) + _typed(boxes[1], quoted[0]) + _submit(els)
    elif q.startswith("Enter an item that starts with") and boxes:
        start = quoted[0] if quoted else ""
        end = quoted[1] if len(quoted) > 1 else ""
        options = [e for e in _find(els, ("listitem", "menuitem", "option", "text"))
                   if e.name.lower().startswith(start.lower()) and e.name.lower().endswith(end.lower())
                   and e.y > boxes[0].y]
        if options:
            steps = [_click(options[0])] + _submit(els)
        elif turn == 0:
            # jQuery UI opens its menu after a 300 ms delay
            return "\n".join(_typed(boxes[0], start) + ["time.sleep(0.6)"])
        else:
            steps = _submit(els)
    elif q.startswith("Enter") and quoted and boxes:
        steps = _typed(boxes[0], quoted[0]) + _submit(els)
    elif q.startswith("Focus into the textbox") and boxes:
        steps = [_click(boxes[0])]
    if not steps:
        return "FAIL"
    return "\n".join(steps + ["DONE"])


def read_prompt(prompt: str) -> tuple[str, str, int]:
    """(instruction, latest view, tool observations so far) read from the decoded prompt."""
    m = re.search(r"Task: (.*?)\n\nThe page now:\n", prompt, re.S)
    instruction = m[1] if m else ""
    views = prompt.split("The page now:\n")
    view = views[-1] if len(views) > 1 else ""
    turn = len(re.findall(r"Ran \d+ actions?\.|Refused, nothing was run", prompt))
    return instruction, view, turn


class ScriptedMiniwobEngine(ScriptedPolicy):
    """Engine interface over :func:`decide`. ``tokenizer`` is the configured model's; logprobs are 0."""

    name = "miniwob_scripted"

    def __init__(self, tokenizer: Any, max_context: int = 8192) -> None:
        super().__init__()
        self.tokenizer = tokenizer
        self.max_context = max_context
        self.stats.capacity = 64
        end = tokenizer.convert_tokens_to_ids("<|im_end|>") if hasattr(tokenizer, "convert_tokens_to_ids") else None
        self._eot = [end] if isinstance(end, int) and end >= 0 else [tokenizer.eos_token_id]

    async def generate(self, input_ids: list[int], sampling: SamplingParams) -> GenerationOutput:
        self.stats.started(len(input_ids))
        prompt = self.tokenizer.decode(input_ids)
        instruction, view, turn = read_prompt(prompt)
        code = decide(instruction, view.split("<|im_end|>")[0], turn)
        text = "<tool_call>\n" + json.dumps({"name": "osworld_action", "arguments": {"code": code}}) + "\n</tool_call>"
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"] + self._eot
        self.stats.finished(len(ids))
        return GenerationOutput(output_ids=ids, output_logprobs=[0.0] * len(ids), finish_reason="stop", text=text)


def scripted_engine(config: Any) -> ScriptedMiniwobEngine:
    """The ``miniwob_scripted`` policy with ``config.model``'s tokenizer (``skyrl osworld scaffold-check``)."""
    from skyrl_core.default_plugins.engines.models import load_tokenizer

    return ScriptedMiniwobEngine(load_tokenizer(config.model))
