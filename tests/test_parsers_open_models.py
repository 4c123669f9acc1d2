"""The call formats of today's open models (gpt-oss harmony, Kimi-K2, Mistral tokenizer v11, GLM-4.5) on
realistic output, the per-model parser table, call-shaped text a parser cannot read, and hypothesis fuzzing of
the four parsers ("never raises, never runs a call the text does not contain, a cut call never runs"); a strictly
valid prefix of a call with unescaped quotes is not run as a guess, in any format."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from skyrl_core.default_plugins.parsers import (GLM45Parser, HarmonyParser, HermesParser, JsonParser, KimiK2Parser,
                                                MistralV11Parser, OpenAIParser, parser_for_model,
                                                parser_for_template, resembled_format)
from skyrl_core.default_plugins.parsers import XmlParameterParser

harmony, kimi, mistral, glm = HarmonyParser(), KimiK2Parser(), MistralV11Parser(), GLM45Parser()

SCHEMAS = [{"type": "function", "function": {"name": "bash", "description": "Run a shell command.", "parameters": {
    "type": "object", "properties": {"command": {"type": "string"}, "timeout": {"type": "integer"}},
    "required": ["command"]}}},
           {"type": "function", "function": {"name": "finish", "description": "Give the answer.", "parameters": {
               "type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}}}]


def calls(result):
    return [(c.name, c.arguments) for c in result.calls]


# what the models write: from their chat templates / model cards, with realistic arguments
GPT_OSS = ("<|channel|>analysis<|message|>The user wants the failing test. I'll run pytest.<|end|>"
           "<|start|>assistant<|channel|>commentary to=functions.bash <|constrain|>json<|message|>"
           '{"command": "pytest -x tests/test_io.py -k \\"read and not <|call|>\\""}<|call|>')
KIMI = ("I'll look at both files.<|tool_calls_section_begin|><|tool_call_begin|>functions.bash:0"
        '<|tool_call_argument_begin|>{"command": "cat setup.cfg"}<|tool_call_end|><|tool_call_begin|>functions.bash:1'
        '<|tool_call_argument_begin|>{"command": "grep -n \'<|tool_call_end|>\' README.md"}<|tool_call_end|>'
        "<|tool_calls_section_end|>")
MISTRAL = ('Let me check.[TOOL_CALLS]bash[ARGS]{"command": "echo \'[TOOL_CALLS]\' | wc -c"}'
           '[TOOL_CALLS]finish[ARGS]{"answer": "13"}</s>')
GLM = ("<think>The test imports a missing helper.</think>\nSearching for it.\n<tool_call>bash\n"
       '<arg_key>command</arg_key>\n<arg_value>grep -rn "</arg_value>" src/ | head</arg_value>\n'
       "<arg_key>timeout</arg_key>\n<arg_value>30</arg_value>\n</tool_call>")


@pytest.mark.parametrize("parser,text,finish_reason,expected,ids,n_errors,truncated,content", [
    pytest.param(harmony, GPT_OSS, "stop",
                 [("bash", {"command": 'pytest -x tests/test_io.py -k "read and not <|call|>"'})],
                 ["call_0"], 0, False, "", id="harmony-analysis-then-call"),
    pytest.param(harmony, "<|start|>assistant to=functions.finish<|channel|>commentary json<|message|>"
                 '{"answer": "42"}<|call|>', "stop", [("finish", {"answer": "42"})], ["call_0"], 0, False, "",
                 id="harmony-recipient-before-channel"),
    pytest.param(harmony, "<|channel|>analysis<|message|>Easy.<|end|><|start|>assistant<|channel|>final<|message|>"
                 "It is 42.<|return|>", "stop", [], [], 0, False, "It is 42.", id="harmony-final-answer"),
    pytest.param(harmony, 'analysisNeed files.assistantcommentary to=functions.bash json{"command": "ls"}', "stop",
                 [("bash", {"command": "ls"})], ["call_0"], 0, False, "analysisNeed files.assistantcommentary",
                 id="harmony-decoded-without-special-tokens"),
    pytest.param(harmony, '<|channel|>commentary to=functions.bash <|constrain|>json<|message|>{"command": "pytest',
                 "length", [], [], 1, True, "", id="harmony-cut-off"),
    pytest.param(kimi, KIMI, "stop", [("bash", {"command": "cat setup.cfg"}),
                                      ("bash", {"command": "grep -n '<|tool_call_end|>' README.md"})],
                 ["functions.bash:0", "functions.bash:1"], 0, False, "I'll look at both files.", id="kimi-two-calls"),
    pytest.param(kimi, '<|tool_calls_section_begin|><|tool_call_begin|>functions.bash:0<|tool_call_argument_begin|>'
                 '{"command": "ls', "length", [], [], 1, True, "", id="kimi-cut-off"),
    pytest.param(kimi, '<|tool_calls_section_begin|><|tool_call_begin|>functions.bash:0<|tool_call_argument_begin|>'
                 '{"command": "grep -n "a", "b": "c" f"}<|tool_call_end|><|tool_calls_section_end|>', "stop", [], [], 1,
                 False, "", id="kimi-ambiguous-quotes"),
    pytest.param(mistral, MISTRAL, "stop", [("bash", {"command": "echo '[TOOL_CALLS]' | wc -c"}),
                                            ("finish", {"answer": "13"})], ["call_0", "call_1"], 0, False,
                 "Let me check.", id="mistral-two-calls-token-in-string"),
    pytest.param(mistral, '[TOOL_CALLS]bash[CALL_ID]Xk3b9QzP1[ARGS]{"command": "ls"}', "stop",
                 [("bash", {"command": "ls"})], ["Xk3b9QzP1"], 0, False, "", id="mistral-call-id"),
    pytest.param(mistral, '[TOOL_CALLS][{"name": "bash", "arguments": {"command": "ls"}}]', "stop",
                 [("bash", {"command": "ls"})], ["call_0"], 0, False, "", id="mistral-v3-list"),
    pytest.param(mistral, '[TOOL_CALLS][{"name": "bash", "arguments": {"command": "ls"}, "id": "a1B2c3D4e"}, '
                 '{"name": "finish", "arguments": {"answer": "4"}, "id": "f5G6h7I8j"}]</s>', "stop",
                 [("bash", {"command": "ls"}), ("finish", {"answer": "4"})], ["a1B2c3D4e", "f5G6h7I8j"], 0, False, "",
                 id="mistral-v7-list-with-ids"),
    pytest.param(mistral, '[TOOL_CALLS]bash[ARGS]{"command": "find . -name', "length", [], [], 1, True, "",
                 id="mistral-cut-off"),
    pytest.param(glm, GLM, "stop", [("bash", {"command": 'grep -rn "</arg_value>" src/ | head', "timeout": 30})],
                 ["call_0"], 0, False, "Searching for it.", id="glm-closing-tag-in-value-typed"),
    pytest.param(glm, "<tool_call>bash\n<arg_key>command</arg_key>\n<arg_value>ls</arg_value>\n<arg_key>command"
                 "</arg_key>\n<arg_value>rm -rf x</arg_value>\n</tool_call>", "stop", [], [], 1, False, "",
                 id="glm-key-twice"),
    pytest.param(glm, "<tool_call>bash\n<arg_key>command</arg_key>\n<arg_value>for f in *; do", "length", [], [], 1,
                 True, "", id="glm-cut-off"),
    pytest.param(glm, "<tool_call>finish\n<arg_key>answer</arg_key>\n<arg_value>4</arg_value>\n", "stop",
                 [("finish", {"answer": "4"})], ["call_0"], 0, False, "", id="glm-end-tag-eaten-by-stop"),
])
def test_open_model_formats(parser, text, finish_reason, expected, ids, n_errors, truncated, content):
    result = parser.parse(text, finish_reason, tool_schemas=SCHEMAS) if parser is glm else \
        parser.parse(text, finish_reason)
    assert calls(result) == expected
    assert [c.id for c in result.calls] == ids
    assert len(result.errors) == n_errors, result.errors
    assert result.truncated == truncated
    assert result.content == content


def test_harmony_analysis_is_reasoning():
    result = harmony.parse(GPT_OSS)
    assert result.reasoning == "The user wants the failing test. I'll run pytest."


@pytest.mark.parametrize("parser", [harmony, kimi, mistral, glm], ids=lambda p: p.name)
def test_tools_prompt_teaches_a_call_the_parser_reads(parser):
    prompt = parser.tools_prompt(SCHEMAS)
    assert "bash" in prompt and "finish" in prompt and "Run a shell command." in prompt
    example = prompt[prompt.rindex("For example:\n") + len("For example:\n"):]
    result = parser.parse(example, tool_schemas=SCHEMAS) if parser is glm else parser.parse(example)
    assert [c.name for c in result.calls] == ["bash"] and result.errors == []


@pytest.mark.parametrize("text", [GPT_OSS, KIMI, MISTRAL, GLM])
def test_hermes_reads_none_of_them(text):
    """Fault 1 of issue #32: the default parser gets no call from these formats."""
    assert HermesParser().parse(text).calls == []


def test_registered_by_name(plugins):
    names = plugins.registry.names("parsers")
    for name in ("harmony", "kimi_k2", "mistral_v11", "glm45"):
        assert name in names
        assert plugins.registry.get("parsers", name).name == name


# ------------------------------------------------------------------------------------------ which parser, which format

@pytest.mark.parametrize("template,expected", [
    ("{%- if message.recipient %}{{ '<|start|>assistant to=' + message.recipient + '<|channel|>commentary' }}"
     "{%- endif %}<|channel|>{{ 'to=functions.' }}", "harmony"),
    ("{{'<|tool_calls_section_begin|>'}}{% for tc in message.tool_calls %}<|tool_call_begin|>{% endfor %}", "kimi_k2"),
    ("{{ '[TOOL_CALLS]' + tool.function.name + '[ARGS]' + args }}", "mistral_v11"),
    ("<tool_call>{{ tc.name }}\n{% for k, v in tc.arguments.items() %}<arg_key>{{ k }}</arg_key>", "glm45"),
    ("<tool_call>\n<function={{ tc.name }}>\n<parameter={{ k }}>", "qwen3_coder"),
    ("<tool_call>\n{\"name\": \"{{ tool_call.name }}\"", "hermes"),
    ("{{- '<|python_tag|>' + tool_call.name }}", "json"),
    ("{% for m in messages %}<|im_start|>{{ m.role }}{% endfor %}", None),
])
def test_parser_for_template(template, expected):
    assert parser_for_template(template) == expected


def test_parser_for_model_uses_the_template_then_the_name():
    class Tok:
        def __init__(self, template, name):
            self.chat_template, self.name_or_path = template, name

    assert parser_for_model(Tok("<arg_key>", "some/model"))[0] == "glm45"
    assert parser_for_model(Tok(None, "openai/gpt-oss-20b"))[0] == "harmony"
    assert parser_for_model(Tok("plain", "moonshotai/Kimi-K2-Instruct"))[0] == "kimi_k2"
    assert parser_for_model(Tok(None, "mistralai/Devstral-Small-2507"))[0] == "mistral_v11"
    assert parser_for_model(Tok(None, "unknown/thing"))[0] == "hermes"


@pytest.mark.parametrize("text,expected", [
    (GPT_OSS, "harmony"), (KIMI, "kimi_k2"), (MISTRAL, "mistral_v11"), (GLM, "glm45"),
    ('Sure: {"name": "bash", "arguments": {"command": "ls"}}', "json"),
    ('{"name": "bash"}', "json"),  # names a tool of the run
    ('functions.bash:0{"command": "ls"}', "kimi_k2"),  # Kimi's tokens dropped by skip_special_tokens
    ('The record is {"name": "Ada Lovelace", "born": 1815}.', None),  # a JSON object, not a call
    ("The answer is 42.", None),
])
def test_resembled_format(text, expected):
    found = resembled_format(text, ["bash", "finish"])
    assert (found[0] if found else None) == expected


def test_which_parser_reads_which_format():
    """Each parser declares the call formats it reads (``reads_formats``): nothing is keyed by its name."""
    assert "hermes" in OpenAIParser().reads_formats and "json" in HermesParser().reads_formats
    assert "hermes" in glm.reads_formats and "hermes" in JsonParser().reads_formats
    assert "mistral_v11" not in HermesParser().reads_formats and "hermes" not in XmlParameterParser().reads_formats


# ------------------------------------------------------------------------------------------ fuzzing

FUZZ = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
PARSERS = {"harmony": harmony, "kimi_k2": kimi, "mistral_v11": mistral, "glm45": glm}
MARKERS = ["<|channel|>", "<|message|>", "<|call|>", "<|end|>", "<|start|>", "to=functions.", "<|constrain|>",
           "<|tool_calls_section_begin|>", "<|tool_call_begin|>", "<|tool_call_argument_begin|>", "<|tool_call_end|>",
           "[TOOL_CALLS]", "[ARGS]", "[CALL_ID]", "<tool_call>", "</tool_call>", "<arg_key>", "</arg_key>",
           "<arg_value>", "</arg_value>", "<think>", "</think>", '"', "\\", "{", "}", "[", "]", "\n", ":"]
hostile = st.lists(st.sampled_from(MARKERS) | st.text(max_size=6), max_size=12).map("".join)
tool_names = st.from_regex(r"[a-z][a-z0-9_]{0,12}", fullmatch=True)
prose = st.text(alphabet=st.characters(blacklist_characters="{}[]<>\"'`\\|:=", blacklist_categories=("Cs",)),
                max_size=30)
keys = st.from_regex(r"[a-z_]{1,8}", fullmatch=True)


def _parse(name, text, finish_reason="stop"):
    parser = PARSERS[name]
    return parser.parse(text, finish_reason, tool_schemas=SCHEMAS) if name == "glm45" else \
        parser.parse(text, finish_reason)


@FUZZ
@given(text=st.lists(st.sampled_from(MARKERS + ["bash", "command", "ls", "0"]) | st.text(max_size=8),
                     max_size=40).map("".join),
       finish_reason=st.sampled_from(["stop", "length"]), name=st.sampled_from(sorted(PARSERS)))
def test_never_raises_never_invents_a_call(text, finish_reason, name):
    result = _parse(name, text, finish_reason)
    for call in result.calls:
        assert call.name and call.name in text
        assert isinstance(call.arguments, dict)
        assert all(key in text for key in call.arguments)


@FUZZ
@given(name=tool_names, args=st.dictionaries(keys, hostile, max_size=4), before=prose,
       which=st.sampled_from(["harmony", "kimi_k2", "mistral_v11"]))
def test_json_formats_round_trip_hostile_strings(name, args, before, which):
    text = PARSERS[which].format_call(name, args)
    result = _parse(which, f"{before}{text}")
    assert calls(result) == [(name, args)], text
    assert result.errors == []


def glm_ambiguous(v: str) -> bool:
    """GLM-4.5 writes values raw: one holding "</arg_value>" followed by "<arg_key>" or "</tool_call>" (or by
    nothing) is ambiguous by construction, as the model's own template writes it."""
    return any(v[i:].lstrip().startswith(("<arg_key>", "</tool_call>")) or not v[i:].strip()
               for i in range(len(v) + 1) if v[:i].endswith("</arg_value>"))


@FUZZ
@given(name=tool_names, args=st.dictionaries(keys, hostile, max_size=4), before=prose)
def test_glm_round_trips_unambiguous_values(name, args, before):
    args = {k: v for k, v in args.items() if not glm_ambiguous(v)}
    text = glm.format_call(name, args)
    assert calls(glm.parse(f"{before}\n{text}")) == [(name, args)], text


@FUZZ
@given(name=tool_names, args=st.dictionaries(keys, hostile, max_size=3), which=st.sampled_from(sorted(PARSERS)),
       data=st.data())
def test_cut_off_calls_are_never_run(name, args, which, data):
    if which == "glm45":  # a raw value that closes the call itself is a complete call when cut after it
        args = {k: v for k, v in args.items() if not glm_ambiguous(v)}
    text = PARSERS[which].format_call(name, args)
    end = {"harmony": "<|call|>", "kimi_k2": "<|tool_call_end|>", "glm45": "</tool_call>"}.get(which)
    if end is not None:  # complete only with its end token
        text = text[:text.rindex(end)]
    else:  # Mistral has no end token: cut inside the JSON
        text = text[:-1]
    cut = data.draw(st.integers(1, len(text)), label="cut")
    assert _parse(which, text[:cut], "length").calls == []


# ------------------------------------------------------------------------------------------ guessed repairs

TEMPLATE_GREP = '{"name": "bash", "arguments": {"command": "grep -n "}}" templates/base.html"}}'


@pytest.mark.parametrize("parser,text", [
    (JsonParser(), TEMPLATE_GREP),
    (HermesParser(), f"I'll find the closing braces. {TEMPLATE_GREP}"),
    (HermesParser(), '{"name": "python", "arguments": {"code": "x = 1"}}\n", "path": "notes.txt"}}'),
])
def test_a_valid_prefix_of_a_call_with_unescaped_quotes_is_not_run(parser, text):
    """Issue #32 fault 2: the strict reader accepted '{... "command": "grep -n "}}' (a prefix of the text) and
    ran 'grep -n '; the text reads two ways, so it is a recoverable error that quotes the problem."""
    result = parser.parse(text)
    assert result.calls == []
    assert len(result.errors) == 1 and "reads more than one way" in result.errors[0]
    assert 'write every quote inside a string as \\"' in result.errors[0]
    assert "near" in result.errors[0]  # the place is quoted


@FUZZ
@given(code=st.text(alphabet='ab" ,:{}[]\n', max_size=20), other=st.text(alphabet='ab" ,:{}', max_size=10),
       which=st.sampled_from(["json", "hermes-prose", "openai", "kimi_k2", "mistral_v11", "harmony"]))
def test_unescaped_quotes_give_the_call_or_an_error_in_every_json_format(code, other, which):
    args = {"code": code, "path": other}
    inner = "{" + ", ".join(f'"{k}": "{v}"' for k, v in args.items()) + "}"
    if which == "json":
        result = JsonParser().parse('{"name": "f", "arguments": ' + inner + "}")
    elif which == "hermes-prose":
        result = HermesParser().parse('Calling {"name": "f", "arguments": ' + inner + "} now")
    elif which == "openai":
        result = OpenAIParser().parse_message({"tool_calls": [{"id": "c", "function": {"name": "f",
                                                                                        "arguments": inner}}]})
    else:
        result = PARSERS[which].parse(PARSERS[which].format_call("f", {}).replace("{}", inner))
    assert calls(result) in ([("f", args)], []), inner
    if not result.calls:
        assert result.errors
