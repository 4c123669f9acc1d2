"""The ``research_codeblock`` tool-call parser: fenced blocks as calls of the research tools.

SmolLM2-135M never writes a JSON tool call for ``web_search`` from the Hermes prompt and one worked example
(measured: 0 searches in 10 HotpotQA questions with ``parser: hermes``), but it writes Markdown fences readily. With
this parser a ```search block is ``web_search(queries=<block>)``, a ```open block ``open_page(url=<block>)``
and a ```answer block ``finish(answer=<block>)``; ``<tool_call>`` tags still work for any tool. It is the core's
:class:`~skyrl_core.default_plugins.parsers.CodeBlockParser` with these fences; the calls are recorded like any other.
"""

from __future__ import annotations

from skyrl_core.default_plugins.parsers import CodeBlockParser

RESEARCH_FENCES = {"search": ("web_search", "queries"), "open": ("open_page", "url"), "answer": ("finish", "answer")}


def research_codeblock_parser() -> CodeBlockParser:
    return CodeBlockParser(fence_tools=RESEARCH_FENCES)
