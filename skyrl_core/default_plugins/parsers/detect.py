"""Which parser reads a model's calls, and which format an unread call resembles.

:func:`parser_for_model` picks a registered parser name for a tokenizer: from its chat template's call markers
when the template has them (the template renders past calls in the format the model was trained to write), else
from :data:`MODEL_PARSERS` by the model's name, else ``hermes``. Config ``agent.parser: auto`` uses it.

:func:`resembled_format` says whether text the configured parser read no call from still has the shape of a call
(a known format's markers, or a JSON object naming a tool) and which format it resembles; the agent loop then
tells the model so instead of ending the episode as ``no_tool_call``.
"""

from __future__ import annotations

import json
import re
from typing import Any, Iterable

from .repair import _read_prefix

# Call markers of each format: (parser name, format name, pattern), most specific first.
FORMAT_MARKERS: list[tuple[str, str, re.Pattern]] = [
    ("harmony", "gpt-oss harmony", re.compile(r"<\|channel\|>[^<]*\bto=|\bto=functions\.[\w.\-]+")),
    ("kimi_k2", "Kimi-K2", re.compile(r"<\|tool_calls_section_begin\|>|<\|tool_call_begin\|>"
                                      r"|\bfunctions\.[\w.\-]+:\d+\s*\{")),  # the last: its tokens decoded away
    ("deepseek_v31", "DeepSeek-V3.1", re.compile(r"<｜tool▁calls?▁begin｜>")),
    ("mistral_v11", "Mistral [TOOL_CALLS]", re.compile(r"\[TOOL_CALLS\]|\[ARGS\]")),
    ("glm45", "GLM-4.5", re.compile(r"<arg_key>|<arg_value>")),
    ("qwen3_coder", "Qwen3-Coder XML", re.compile(r"<function=[^>\n]+>")),
    ("hermes", "Hermes <tool_call>", re.compile(r"<tool_call>")),
    ("json", "Llama 3.1 <|python_tag|> JSON", re.compile(r"<\|python_tag\|>")),
]
_NAMED_OBJECT = re.compile(r"\{\s*[\"'](?:name|function|tool|tool_name)[\"']\s*:")
_ARG_KEYS = ("arguments", "parameters", "args", "input", "params")

# Model-name patterns (matched against the tokenizer's name_or_path, case-insensitive) -> parser, for templates
# whose markers cannot be detected (a template given without its tokens, a server-side template).
MODEL_PARSERS: list[tuple[str, str]] = [
    (r"gpt-oss", "harmony"),
    (r"kimi-k2", "kimi_k2"),
    (r"glm-4\.[5-9]", "glm45"),
    (r"mistral-small-3\.[12]|magistral|devstral|mistral-medium-3|ministral-3", "mistral_v11"),
    (r"qwen3-coder", "qwen3_coder"),
    (r"deepseek-v3|deepseek-r1", "deepseek_v31"),
    (r"qwen|hermes|smollm|nemotron|granite", "hermes"),
    (r"llama-?3\.[1-3]", "json"),
]

# Chat-template markers -> parser, most specific first.
_TEMPLATE_MARKERS: list[tuple[str, tuple[str, ...]]] = [
    ("harmony", ("<|channel|>", "to=functions")),
    ("kimi_k2", ("<|tool_calls_section_begin|>",)),
    ("deepseek_v31", ("tool▁call▁begin",)),
    ("mistral_v11", ("[TOOL_CALLS]",)),
    ("glm45", ("<arg_key>",)),
    ("qwen3_coder", ("<function=", "<parameter=")),
    ("hermes", ("<tool_call>",)),
    ("json", ("<|python_tag|>",)),
]


def parser_for_template(chat_template: str | None) -> str | None:
    """The parser whose call markers the jinja ``chat_template`` renders, or None when it renders none."""
    if not chat_template:
        return None
    for name, markers in _TEMPLATE_MARKERS:
        if all(m in chat_template for m in markers):
            return name
    return None


def parser_for_model(tokenizer: Any) -> tuple[str, str]:
    """(parser name, why) for a transformers ``tokenizer``: its chat template's markers, else its name in
    :data:`MODEL_PARSERS`, else ``hermes``."""
    template = getattr(tokenizer, "chat_template", None)
    if isinstance(template, dict):  # several named templates
        template = "\n".join(str(t) for t in template.values())
    found = parser_for_template(template if isinstance(template, str) else None)
    if found:
        return found, "the chat template renders its call markers"
    model = str(getattr(tokenizer, "name_or_path", "") or "")
    for pattern, name in MODEL_PARSERS:
        if re.search(pattern, model, re.I):
            return name, f"the model name '{model}' matches '{pattern}'"
    return "hermes", "no call markers in the chat template and no known model name: the default"


class AutoParser:
    """``agent.parser: auto``: a stand-in the rollout session replaces, through the parser contract's ``for_model``,
    by the parser :func:`parser_for_model` picks for the run's model; it never parses itself."""

    name = "auto"

    def parse(self, text: str, finish_reason: str) -> Any:
        raise RuntimeError("the 'auto' parser is replaced by the model's own parser when a rollout session starts")

    @staticmethod
    def for_model(tokenizer: Any) -> tuple[str, str]:
        return parser_for_model(tokenizer)


def resembled_format(text: str, tool_names: Iterable[str] = ()) -> tuple[str, str] | None:
    """(parser name, format name) of the call format ``text`` resembles, or None. A bare JSON object counts
    when it names a tool: a string ``name`` (or ``function``/``tool``) with an arguments key, or naming one of
    ``tool_names``."""
    for name, label, pattern in FORMAT_MARKERS:
        if pattern.search(text):
            return name, label
    names = set(tool_names)
    for m in _NAMED_OBJECT.finditer(text):
        got = _read_prefix(text, m.start())
        value = got[0] if got is not None else None
        if isinstance(value, dict):
            named = next((value[k] for k in ("name", "function", "tool", "tool_name") if k in value), None)
            if isinstance(named, dict):
                named = named.get("name")
            if isinstance(named, str) and (named in names or any(k in value for k in _ARG_KEYS)):
                return "json", "JSON call object"
        elif got is None:
            head = text[m.start():m.start() + 200]
            if any(json.dumps(n) in head for n in names):
                return "json", "JSON call object"
    return None
