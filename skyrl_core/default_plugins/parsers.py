"""Built-in tool-call parsers: ``hermes`` (the default), ``json``, ``openai`` and ``codeblock`` (see
skyrl_core.parsers)."""

from __future__ import annotations

from ..hookspecs import hookimpl
from ..parsers import CodeBlockParser, HermesParser, JsonParser, OpenAIParser


@hookimpl(trylast=True)
def register_parsers(register):
    register(HermesParser(), name="hermes")
    register(JsonParser(), name="json")
    register(OpenAIParser(), name="openai")
    register(CodeBlockParser(), name="codeblock")
