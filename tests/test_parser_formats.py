"""Tag formats on realistic model output: closing-tag text inside arguments, repairs that are guesses, the
Qwen3-Coder XML-parameter form and DeepSeek-V3.1's tokens; hypothesis fuzzing of every parser for "never raises,
never runs a call the text does not contain"."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from skyrl_core.default_plugins.parsers import (CodeBlockParser, HermesParser, JsonParser, JSONRepairError,
                                                OpenAIParser, format_tool_call, loads_tolerant)
from skyrl_core.default_plugins.parsers.scanner import find_tag_outside_strings
from skyrl_core.default_plugins.parsers.deepseek import (CALL_BEGIN, CALL_END, CALLS_BEGIN, CALLS_END, SEP,
                                                         DeepSeekV31Parser)
from skyrl_core.default_plugins.parsers.xml_parameters import XmlParameterParser

hermes = HermesParser()
xml = XmlParameterParser()
deepseek = DeepSeekV31Parser()

EDITOR_SCHEMA = [{"type": "function", "function": {"name": "str_replace_editor", "parameters": {
    "type": "object", "properties": {"command": {"type": "string"}, "path": {"type": "string"},
                                     "old_str": {"type": "string"}, "new_str": {"type": "string"},
                                     "insert_line": {"type": "integer"},
                                     "view_range": {"type": "array", "items": {"type": "integer"}}}}}},
                 {"type": "function", "function": {"name": "bash", "parameters": {
                     "type": "object", "properties": {"command": {"type": "string"},
                                                      "timeout": {"type": "number"}}}}}]


def calls(result):
    return [(c.name, c.arguments) for c in result.calls]


# ------------------------------------------------------------------------------------------ fault 1: tags in strings

@pytest.mark.parametrize("text,expected,content", [
    pytest.param('<tool_call>\n{"name": "bash", "arguments": {"command": "grep -rn \'</tool_call>\' skyrl_core/"}}\n'
                 '</tool_call>', [("bash", {"command": "grep -rn '</tool_call>' skyrl_core/"})], "",
                 id="closing-tag-in-command"),
    pytest.param('Writing the test.\n<tool_call>{"name": "python", "arguments": {"code": "s = \\"<tool_call>x'
                 '</tool_call>\\"\\nprint(s)"}}</tool_call>\nDone.',
                 [("python", {"code": 's = "<tool_call>x</tool_call>"\nprint(s)'})], "Writing the test.\nDone.",
                 id="both-tags-in-code"),
    pytest.param('<tool_call>{"name": "python", "arguments": {"code": "print("</tool_call>")"}}</tool_call>',
                 [("python", {"code": 'print("</tool_call>")'})], "", id="tag-in-unescaped-quotes"),
    pytest.param('<tool_call>{"name": "a", "arguments": {"q": "</tool_call>"}}</tool_call>\n'
                 '<tool_call>{"name": "b", "arguments": {}}</tool_call>', [("a", {"q": "</tool_call>"}), ("b", {})],
                 "", id="two-calls-first-holds-tag"),
])
def test_closing_tag_inside_a_json_string_does_not_end_the_call(text, expected, content):
    result = hermes.parse(text)
    assert calls(result) == expected and result.errors == []
    assert result.content == content


def test_string_aware_scan_skips_escaped_quotes():
    text = '{"a": "x \\" </tool_call> y"} </tool_call>'
    at, tag = find_tag_outside_strings(text, 0, ("</tool_call>",))
    assert tag == "</tool_call>" and at == text.rindex("</tool_call>")
    assert find_tag_outside_strings('"</tool_call>"', 0, ("</tool_call>",)) == (-1, None)


# ------------------------------------------------------------------------------------------ fault 2: guessed repairs

def test_ambiguous_unescaped_quotes_are_an_error_not_a_call():
    # reads as {"command": 'grep -n "foo', "bar": 'x" file.py'} (an invented argument) or as one command
    text = '<tool_call>{"name": "bash", "arguments": {"command": "grep -n "foo", "bar": "x" file.py"}}</tool_call>'
    result = hermes.parse(text)
    assert result.calls == []
    assert len(result.errors) == 1
    assert "reads more than one way" in result.errors[0] and '\\"' in result.errors[0]
    assert 'grep -n \\"foo' in result.errors[0]  # the problem is quoted


def test_unambiguous_repairs_still_run():
    assert loads_tolerant('{"code": "print("half", x)"}') == {"code": 'print("half", x)'}
    assert loads_tolerant('{"name": "finish", "arguments": {"answer": "4"}') == {
        "name": "finish", "arguments": {"answer": "4"}}  # closing bracket of a complete value
    assert loads_tolerant('{"code": "a\n\tb"}') == {"code": "a\n\tb"}  # raw control characters
    with pytest.raises(JSONRepairError, match="more than one way"):
        loads_tolerant('{"s": "a", "b": "c", "d"}')


def test_bare_json_with_two_readings_is_not_run():
    text = 'I will run {"name": "bash", "arguments": {"command": "echo "a", "b": "c""}} now'
    assert JsonParser().parse(text).calls == []


# ------------------------------------------------------------------------------------------ fault 3: Qwen3-Coder XML

QWEN_CODER_EDIT = """I'll replace the template's closing tag.
<tool_call>
<function=str_replace_editor>
<parameter=command>
str_replace
</parameter>
<parameter=path>
templates/call.xml
</parameter>
<parameter=old_str>
<param name="x">"</parameter>" & </tool_call></param>
</parameter>
<parameter=new_str>
<param name="x">'ok' if a < b else {"k": 1}</param>
</parameter>
</function>
</tool_call>"""


@pytest.mark.parametrize("text,finish_reason,expected,n_errors,truncated,content", [
    pytest.param(QWEN_CODER_EDIT, "stop", [("str_replace_editor", {
        "command": "str_replace", "path": "templates/call.xml",
        "old_str": '<param name="x">"</parameter>" & </tool_call></param>',
        "new_str": "<param name=\"x\">'ok' if a < b else {\"k\": 1}</param>"})], 0, False,
                 "I'll replace the template's closing tag.", id="markup-and-closing-tags-in-values"),
    pytest.param("<tool_call>\n<function=bash>\n<parameter=command>\nls -la\n</parameter>\n<parameter=timeout>\n30\n"
                 "</parameter>\n</function>\n</tool_call>", "stop", [("bash", {"command": "ls -la", "timeout": 30})],
                 0, False, "", id="typed-by-schema"),
    pytest.param("<function=str_replace_editor>\n<parameter=command>\nview\n</parameter>\n<parameter=path>\na.py\n"
                 "</parameter>\n<parameter=view_range>\n[1, 20]\n</parameter>\n</function>", "stop",
                 [("str_replace_editor", {"command": "view", "path": "a.py", "view_range": [1, 20]})], 0, False, "",
                 id="no-wrapper-array-value"),
    pytest.param("<tool_call>\n<function=bash>\n<parameter=command>\necho 1\n</parameter>\n</function>\n</tool_call>\n"
                 "<tool_call>\n<function=bash>\n<parameter=command>\necho 2\n</parameter>\n</function>\n</tool_call>",
                 "stop", [("bash", {"command": "echo 1"}), ("bash", {"command": "echo 2"})], 0, False, "",
                 id="two-calls"),
    pytest.param("<tool_call>\n<function=bash>\n<parameter=command>\nfor f in *.py; do\n  wc -l", "length", [], 1,
                 True, "", id="cut-off-in-value"),
    pytest.param("<tool_call>\n<function=bash>\n<parameter=command>\nls\n</parameter>\n", "length", [], 1, True, "",
                 id="cut-off-before-function-close"),
    pytest.param("<tool_call>\n<function=bash>\n<parameter=command>\nls\n</parameter>\n", "stop",
                 [("bash", {"command": "ls"})], 0, False, "", id="function-close-eaten-by-stop-string"),
    pytest.param("<tool_call>\n<function=bash>\n<parameter=command>\nls\n</parameter>\n<parameter=command>\nrm -rf x\n"
                 "</parameter>\n</function>\n</tool_call>", "stop", [], 1, False, "", id="parameter-twice"),
    pytest.param("<think>\nMaybe <function=bash>\n<parameter=command>\nls\n</parameter>\n</function>\n</think>\n"
                 "No tool needed: the answer is 4.", "stop", [], 0, False, "No tool needed: the answer is 4.",
                 id="drafted-in-think"),
    pytest.param('<tool_call>\n{"name": "bash", "arguments": {"command": "ls"}}\n</tool_call>', "stop", [], 0,
                 False, '{"name": "bash", "arguments": {"command": "ls"}}', id="json-is-not-this-format"),
])
def test_qwen3_coder_table(text, finish_reason, expected, n_errors, truncated, content):
    result = xml.parse(text, finish_reason, tool_schemas=EDITOR_SCHEMA)
    assert calls(result) == expected
    assert len(result.errors) == n_errors, result.errors
    assert result.truncated == truncated
    assert result.content == content


def test_qwen3_coder_without_schemas_keeps_strings_and_prompt_round_trips():
    text = "<function=bash>\n<parameter=timeout>\n30\n</parameter>\n</function>"
    assert calls(xml.parse(text)) == [("bash", {"timeout": "30"})]
    prompt = xml.tools_prompt(EDITOR_SCHEMA)
    assert "<function=str_replace_editor>" in prompt and '"name": "bash"' in prompt
    call = xml.format_call("bash", {"command": 'echo "</parameter>"', "timeout": 5})
    assert calls(xml.parse(call, tool_schemas=EDITOR_SCHEMA)) == [("bash", {"command": 'echo "</parameter>"',
                                                                           "timeout": 5})]


# ------------------------------------------------------------------------------------------ fault 3: DeepSeek-V3.1

def ds(*parts: tuple[str, str]) -> str:
    return CALLS_BEGIN + "".join(f"{CALL_BEGIN}{n}{SEP}{a}{CALL_END}" for n, a in parts) + CALLS_END


@pytest.mark.parametrize("text,finish_reason,expected,n_errors,truncated,content", [
    pytest.param("Let me look." + ds(("bash", '{"command": "ls -la"}')), "stop", [("bash", {"command": "ls -la"})],
                 0, False, "Let me look.", id="v31-single"),
    pytest.param(ds(("bash", '{"command": "echo \'' + CALL_END + '\'"}'), ("finish", "{}")), "stop",
                 [("bash", {"command": f"echo '{CALL_END}'"}), ("finish", {})], 0, False, "",
                 id="end-token-inside-string"),
    pytest.param(f"{CALLS_BEGIN}{CALL_BEGIN}function{SEP}bash\n```json\n{{\"command\": \"ls\"}}\n```{CALL_END}"
                 f"{CALLS_END}", "stop", [("bash", {"command": "ls"})], 0, False, "", id="v3-form"),
    pytest.param(f"{CALLS_BEGIN}{CALL_BEGIN}bash{SEP}{{\"command\": \"pytest -x", "length", [], 1, True, "",
                 id="cut-off"),
    pytest.param(f"{CALLS_BEGIN}{CALL_BEGIN}bash{SEP}{{\"command\": \"ls\"}}", "stop", [("bash", {"command": "ls"})],
                 0, False, "", id="end-tokens-eaten-by-stop"),
    pytest.param(ds(("bash", '{"command": "grep -n "a", "b": "c" f"}')), "stop", [], 1, False, "",
                 id="ambiguous-quotes"),
    pytest.param(ds(("no such tool!", "{}")), "stop", [], 1, False, "", id="bad-name"),
])
def test_deepseek_table(text, finish_reason, expected, n_errors, truncated, content):
    result = deepseek.parse(text, finish_reason)
    assert calls(result) == expected
    assert len(result.errors) == n_errors, result.errors
    assert result.truncated == truncated
    assert result.content == content


def test_deepseek_prompt_and_format():
    prompt = deepseek.tools_prompt(EDITOR_SCHEMA)
    assert "### bash" in prompt and SEP in prompt
    assert calls(deepseek.parse(deepseek.format_call("bash", {"command": "ls"}))) == [("bash", {"command": "ls"})]


# ------------------------------------------------------------------------------------------ fuzzing

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
tool_names = st.from_regex(r"[a-z][a-z0-9_]{0,12}", fullmatch=True)
TAG_TEXT = ["<tool_call>", "</tool_call>", "<function=", "</function>", "<parameter=", "</parameter>", CALL_END,
            CALL_BEGIN, SEP, CALLS_END, '"', "\\", "{", "}", "\n", " <think>", "`"]
hostile = st.lists(st.sampled_from(TAG_TEXT) | st.text(max_size=6), max_size=12).map("".join)
prose = st.text(alphabet=st.characters(blacklist_characters="{}[]<>\"'`\\", blacklist_categories=("Cs",)),
                max_size=30)
parser_names = st.sampled_from(["hermes", "json", "openai", "codeblock", "qwen3_coder", "deepseek_v31"])
PARSERS = {"hermes": hermes, "json": JsonParser(), "openai": OpenAIParser(), "codeblock": CodeBlockParser(),
           "qwen3_coder": xml, "deepseek_v31": deepseek}


@FUZZ
@given(text=st.lists(st.sampled_from(TAG_TEXT + ['"name"', '"arguments"', ":", ",", "bash", "ls"]) |
                     st.text(max_size=8), max_size=40).map("".join),
       finish_reason=st.sampled_from(["stop", "length"]), name=parser_names)
def test_every_parser_never_raises(text, finish_reason, name):
    result = PARSERS[name].parse(text, finish_reason)
    for call in result.calls:
        assert call.name and call.name in text  # never a call the text does not name
        assert isinstance(call.arguments, dict)
        for key in call.arguments:
            assert key in text


@FUZZ
@given(name=tool_names, args=st.dictionaries(st.from_regex(r"[a-z_]{1,8}", fullmatch=True), hostile, max_size=4),
       before=prose, after=prose)
def test_hermes_and_deepseek_round_trip_hostile_strings(name, args, before, after):
    for parser, text in ((hermes, format_tool_call(name, args)), (deepseek, deepseek.format_call(name, args))):
        result = parser.parse(f"{before}\n{text}\n{after}")
        assert calls(result) == [(name, args)], text
        assert result.errors == []


def qwen3_ambiguous(v: str) -> bool:
    """A qwen3_coder value that itself holds "</parameter>" followed by "<parameter=" or "</function>" is ambiguous
    by construction of the format (docs/parsers.md): the raw value closes its parameter, or the call, itself."""
    return any(v[i:].lstrip().startswith(("<parameter=", "</function>")) or not v[i:].strip()
               for i in range(len(v) + 1) if v[:i].endswith("</parameter>"))


@FUZZ
@given(name=tool_names, args=st.dictionaries(st.from_regex(r"[a-z_]{1,8}", fullmatch=True), hostile, max_size=4),
       before=prose)
def test_qwen3_coder_round_trip_hostile_values(name, args, before):
    # every value but the ambiguous ones (qwen3_ambiguous) comes back byte for byte
    args = {k: v for k, v in args.items() if not qwen3_ambiguous(v + "\n")}
    text = xml.format_call(name, args)
    result = xml.parse(f"{before}\n{text}")
    assert calls(result) == [(name, args)], text


@FUZZ
@given(name=tool_names, code=st.text(alphabet=st.characters(blacklist_characters="\\", blacklist_categories=("Cs",)),
                                     max_size=40), data=st.data())
def test_unescaped_quotes_give_the_call_or_an_error_never_another_call(name, code, data):
    """Write the call with every inner quote unescaped (what small models do): the parser either reads back
    exactly the call the text means or reports an error; never a different call."""
    other = data.draw(st.text(alphabet="ab\" ,:{}", max_size=12), label="other")
    args = {"code": code, "path": other}
    text = "<tool_call>{" + f'"name": "{name}", "arguments": ' + "{" + ", ".join(
        f'"{k}": "{v}"' for k, v in args.items()) + "}}</tool_call>"
    result = hermes.parse(text)
    assert calls(result) in ([(name, args)], []), text
    if not result.calls:
        assert result.errors


@FUZZ
@given(name=tool_names, args=st.dictionaries(st.from_regex(r"[a-z_]{1,8}", fullmatch=True), hostile, max_size=3),
       which=st.sampled_from(["qwen3_coder", "deepseek_v31"]), data=st.data())
def test_cut_off_calls_are_never_run(name, args, which, data):
    parser = PARSERS[which]
    if which == "qwen3_coder":  # a value that closes the call itself makes a shorter, complete call: left out
        args = {k: v for k, v in args.items() if not qwen3_ambiguous(v + "\n")}
    text = parser.format_call(name, args)
    if which == "qwen3_coder":
        text = text[:text.rindex("</function>")]  # the call is complete only with its closing tag
    else:
        text = text[:text.rindex(CALL_END)]
    cut = data.draw(st.integers(1, len(text)), label="cut")
    result = parser.parse(text[:cut], "length")
    assert result.calls == []


@pytest.mark.parametrize("text", [
    '<tool_call>{"name": "a", "arguments": {"code": """, "path": """}}</tool_call>',   # hypothesis found this one
    "<tool_call>{'name': 'a', 'arguments': {'code': ''', 'path': '''}}</tool_call>",
    '<tool_call>{"name": "a", "arguments": {"code": b"x"}}</tool_call>',
])
def test_python_only_string_syntax_is_never_read_as_a_call(text):
    """Triple quotes and prefixed literals are Python, not JSON: reading them would turn unescaped quotes into
    one invented string (code=', "path": ') or a bytes value. The text is an error, never that call."""
    result = hermes.parse(text)
    assert calls(result) == []
    assert result.errors
