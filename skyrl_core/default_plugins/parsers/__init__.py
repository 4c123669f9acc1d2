"""Built-in tool-call parsers: ``hermes`` (the default), ``json``, ``openai``, ``codeblock`` (see
skyrl_core.parsers), ``qwen3_coder`` (skyrl_core.parsers_xml) and ``deepseek_v31`` (skyrl_core.parsers_deepseek)."""

from __future__ import annotations

from ..hookspecs import hookimpl
from ..parsers import CodeBlockParser, HermesParser, JsonParser, OpenAIParser
from ..parsers_deepseek import DeepSeekV31Parser
from ..parsers_xml import XmlParameterParser


@hookimpl(trylast=True)
def register_parsers(register):
    register(HermesParser(), name="hermes")
    register(JsonParser(), name="json")
    register(OpenAIParser(), name="openai")
    register(CodeBlockParser(), name="codeblock")
    register(XmlParameterParser(), name="qwen3_coder")
    register(DeepSeekV31Parser(), name="deepseek_v31")
