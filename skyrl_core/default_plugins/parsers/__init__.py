"""Built-in tool-call parsers, one module per format: ``hermes`` (the default, ``hermes.py``), ``json``
(``json_calls.py``), ``openai`` (``openai_calls.py``), ``codeblock`` (``codeblock.py``), ``qwen3_coder``
(``xml_parameters.py``) and ``deepseek_v31`` (``deepseek.py``), over the shared scanner (``scanner.py``:
:class:`ParseResult`, call shapes, reasoning blocks) and JSON repair (``repair.py``: :func:`loads_tolerant`)."""

from __future__ import annotations

from skyrl_core.hookspecs import hookimpl

from .codeblock import CodeBlockParser
from .deepseek import DeepSeekV31Parser
from .hermes import HermesParser
from .json_calls import JsonParser
from .openai_calls import OpenAIParser
from .repair import JSONRepairError, loads_tolerant
from .scanner import ParseResult, format_tool_call
from .xml_parameters import XmlParameterParser

BUILTIN_PARSERS = (HermesParser, JsonParser, OpenAIParser, CodeBlockParser)

__all__ = ["BUILTIN_PARSERS", "CodeBlockParser", "DeepSeekV31Parser", "HermesParser", "JSONRepairError", "JsonParser",
           "OpenAIParser", "ParseResult", "XmlParameterParser", "format_tool_call", "loads_tolerant"]


@hookimpl(trylast=True)
def register_parsers(register):
    register(HermesParser(), name="hermes")
    register(JsonParser(), name="json")
    register(OpenAIParser(), name="openai")
    register(CodeBlockParser(), name="codeblock")
    register(XmlParameterParser(), name="qwen3_coder")
    register(DeepSeekV31Parser(), name="deepseek_v31")
