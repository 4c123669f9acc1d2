"""Parser ``codeblock``: fenced code blocks as tool calls (CodeAct-style actions)."""

from __future__ import annotations

import json
import re
from typing import Any

from skyrl_core.tools import ToolCall, example_arguments

from .hermes import HermesParser
from .scanner import TOOL_CALL_CLOSE, TOOL_CALL_OPEN, _TRUNCATED_MSG, ParseResult, _tidy, split_reasoning


_FENCE_OPEN = re.compile(r"```[ \t]*([A-Za-z0-9_+\-]*)[ \t]*(\n|(?=\S))")
DEFAULT_FENCE_TOOLS: dict[str, tuple[str, str]] = {
    "python": ("python", "code"), "py": ("python", "code"), "python3": ("python", "code"),
    "bash": ("bash", "command"), "sh": ("bash", "command"), "shell": ("bash", "command"),
}


class CodeBlockParser:
    """Fenced code blocks as tool calls (CodeAct-style actions): a ```python block is the call
    ``python(code=<block>)``, a ```bash block ``bash(command=<block>)``; ``<tool_call>`` tags in the same
    message are read as :class:`HermesParser` reads them (e.g. ``finish``). Never raises.

    Small instruction-tuned models (SmolLM2, Qwen2.5-0.5B) write Markdown code far more readily than JSON
    calls: with this parser a base model already calls its python tool, which gives RL a signal to reinforce.
    The action is still one function call of a registered tool, recorded like any other.

    ``fence_tools`` maps a fence language (lower case) to ``(tool name, argument name)``; fences in other
    languages (or none) are text. Every complete block of a mapped language is a call, in order. A block cut
    off by the max-token limit (``finish_reason == "length"``, no closing fence) is never run (``truncated``);
    one left open when the model ended its turn (``finish_reason == "stop"``) is run. ``stop`` holds
    ``"```\n"``: a closing fence ends the turn, so the model reads the output before going on (an opening
    fence always carries a language or code after it, so it does not match).
    """

    name = "codeblock"
    reads_formats = ("hermes",)  # the call formats (parsers.detect.FORMAT_MARKERS) it reads
    stop: tuple[str, ...] = ("```\n",)

    def __init__(self, fence_tools: dict[str, tuple[str, str]] | None = None) -> None:
        self.fence_tools = {k.lower(): tuple(v) for k, v in (fence_tools or DEFAULT_FENCE_TOOLS).items()}
        self._tags = HermesParser()

    def _language_of(self, tool_name: str) -> str | None:
        return next((lang for lang, (tool, _) in self.fence_tools.items() if tool == tool_name), None)

    def format_call(self, name: str, arguments: dict[str, Any]) -> str:
        """A call written the way this parser reads it: a fenced block for mapped tools, else a tag."""
        lang = self._language_of(name)
        if lang is not None:
            arg = self.fence_tools[lang][1]
            return f"```{lang}\n{arguments.get(arg, '')}\n```"
        return f"{TOOL_CALL_OPEN}\n{json.dumps({'name': name, 'arguments': arguments}, ensure_ascii=False)}" \
               f"\n{TOOL_CALL_CLOSE}"

    def tools_prompt(self, tool_schemas: list[dict]) -> str:
        """System-prompt text saying how to call ``tool_schemas`` (OpenAI function schemas) in this format."""
        lines, tagged = [], []
        for schema in tool_schemas:
            fn = schema.get("function", schema)
            name, desc = fn.get("name", ""), fn.get("description", "")
            lang = self._language_of(name)
            if lang is not None:
                lines.append(f"- {name}: {desc} To call it, write a ```{lang} code block; it runs when the "
                             f"block closes and its output comes back to you.")
            else:
                tagged.append(fn)
        text = "# Tools\n\n" + "\n".join(lines)
        if tagged:
            text += ("\n\nThe other tools take a JSON object inside <tool_call></tool_call> tags. Their "
                     "signatures, as JSON Schema:\n<tools>\n"
                     + "\n".join(json.dumps({"type": "function", "function": fn}, ensure_ascii=False)
                                 for fn in tagged) + "\n</tools>\nFor example:\n"
                     + self.format_call(tagged[0].get("name", ""), example_arguments(tagged[0].get("parameters") or {})))
        return text.strip()

    def parse(self, text: str, finish_reason: str = "stop") -> ParseResult:
        text = text or ""
        visible, reasoning = split_reasoning(text)
        drafted = sum(len(self._blocks(r, "stop")[0]) for r in reasoning)
        calls, content, truncated = self._blocks(visible, finish_reason)
        errors = [_TRUNCATED_MSG] if truncated else []
        # Tags only when present: the tolerant bare-JSON scan would read code or prose as calls.
        result = self._tags.parse(content, finish_reason) if TOOL_CALL_OPEN in content else \
            ParseResult(content=content)
        for call in result.calls:
            calls.append((call.name, call.arguments, call.raw))
        ordered = [ToolCall(name=n, arguments=a, id=f"call_{i}", raw=r) for i, (n, a, r) in enumerate(calls)]
        return ParseResult(calls=ordered, content=result.content, errors=errors + result.errors,
                           truncated=truncated or result.truncated, drafted=drafted,
                           reasoning="\n\n".join(r for r in reasoning if r))

    def _blocks(self, text: str, finish_reason: str) -> tuple[list[tuple[str, dict, str]], str, bool]:
        """(calls as (tool, arguments, raw), the text outside the mapped blocks, a block was cut off)."""
        calls: list[tuple[str, dict, str]] = []
        kept: list[str] = []
        i, truncated = 0, False
        while True:
            m = _FENCE_OPEN.search(text, i)
            if m is None:
                kept.append(text[i:])
                break
            lang = m.group(1).lower()
            body_start = m.end()
            close = text.find("```", body_start)
            mapped = self.fence_tools.get(lang)
            if close < 0:
                if mapped is not None and finish_reason == "length":
                    truncated = True
                    kept.append(text[i:m.start()])
                elif mapped is not None and text[body_start:].strip():
                    kept.append(text[i:m.start()])
                    calls.append((mapped[0], {mapped[1]: text[body_start:].strip("\n")}, text[m.start():]))
                else:
                    kept.append(text[i:])
                break
            if mapped is None:
                kept.append(text[i:close + 3])
            else:
                kept.append(text[i:m.start()])
                body = text[body_start:close].strip("\n")
                if body.strip():
                    calls.append((mapped[0], {mapped[1]: body}, text[m.start():close + 3]))
            i = close + 3
        return calls, _tidy(kept), truncated
