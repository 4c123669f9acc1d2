"""Built-in tool-call parsers, one module per format: ``hermes`` (the default, ``hermes.py``), ``json``
(``json_calls.py``), ``openai`` (``openai_calls.py``), ``codeblock`` (``codeblock.py``), ``qwen3_coder``
(``xml_parameters.py``), ``deepseek_v31`` (``deepseek.py``), ``harmony`` (gpt-oss, ``harmony.py``), ``kimi_k2``
(``kimi.py``), ``mistral_v11`` (``mistral.py``) and ``glm45`` (``glm.py``), over the shared scanner
(``scanner.py``: :class:`ParseResult`, call shapes, reasoning blocks) and JSON repair (``repair.py``:
:func:`loads_tolerant`); ``detect.py`` picks a parser per model and names the format of call-shaped text a
parser could not read (the format detector ``default`` the agent loop asks for: :func:`detect_format`)."""

from __future__ import annotations

from skyrl_core.hookspecs import hookimpl

from .codeblock import CodeBlockParser
from .deepseek import DeepSeekV31Parser
from .detect import MODEL_PARSERS, AutoParser, parser_for_model, parser_for_template, resembled_format
from .glm import GLM45Parser
from .harmony import HarmonyParser
from .hermes import HermesParser
from .json_calls import JsonParser
from .kimi import KimiK2Parser
from .mistral import MistralV11Parser
from .openai_calls import OpenAIParser
from .repair import JSONRepairError, loads_tolerant
from .scanner import ParseResult, format_tool_call, split_reasoning
from .xml_parameters import XmlParameterParser

BUILTIN_PARSERS = (HermesParser, JsonParser, OpenAIParser, CodeBlockParser)

__all__ = ["BUILTIN_PARSERS", "MODEL_PARSERS", "CodeBlockParser", "DeepSeekV31Parser", "GLM45Parser", "HarmonyParser",
           "HermesParser", "JSONRepairError", "JsonParser", "KimiK2Parser", "MistralV11Parser", "OpenAIParser",
           "ParseResult", "XmlParameterParser", "format_tool_call", "loads_tolerant", "parser_for_model",
           "parser_for_template", "resembled_format"]


@hookimpl(trylast=True)
def register_parsers(register):
    register(HermesParser(), name="hermes")
    register(JsonParser(), name="json")
    register(OpenAIParser(), name="openai")
    register(CodeBlockParser(), name="codeblock")
    register(XmlParameterParser(), name="qwen3_coder")
    register(DeepSeekV31Parser(), name="deepseek_v31")
    register(HarmonyParser(), name="harmony")
    register(KimiK2Parser(), name="kimi_k2")
    register(MistralV11Parser(), name="mistral_v11")
    register(GLM45Parser(), name="glm45")
    register(AutoParser(), name="auto")


def detect_format(text: str, tools: dict) -> tuple[str, str] | None:
    """(parser name, format name) of the call format ``text`` outside its reasoning resembles, or None
    (:func:`resembled_format`; ``tools``: name -> Tool of the trajectory)."""
    return resembled_format(split_reasoning(text)[0], tools)


@hookimpl(trylast=True)
def register_format_detectors(register):
    register(detect_format, name="default")
