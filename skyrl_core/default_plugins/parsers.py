"""Built-in tool-call parsers: ``hermes`` (the default), ``json`` and ``openai`` (see skyrl_core.parsers)."""

from __future__ import annotations

from ..hookspecs import hookimpl
from ..parsers import HermesParser, JsonParser, OpenAIParser


@hookimpl(trylast=True)
def register_parsers(register):
    register(HermesParser(), name="hermes")
    register(JsonParser(), name="json")
    register(OpenAIParser(), name="openai")
