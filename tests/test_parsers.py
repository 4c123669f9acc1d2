"""Tool-call parsers on what real models emit, plus fuzzing: parse never raises and never runs a cut-off call."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from skyrl_core.default_plugins.parsers import (CodeBlockParser, HermesParser, JsonParser, JSONRepairError,
                                                OpenAIParser, ParseResult, format_tool_call, loads_tolerant)
from skyrl_core.default_plugins.parsers.scanner import split_reasoning

hermes = HermesParser()
json_parser = JsonParser()
openai_parser = OpenAIParser()
codeblock = CodeBlockParser()

CODE = 'x = 48 / 2\nprint("half:", x)\nprint(\'done\')'

# (model output, finish_reason, expected [(name, arguments)], expected content, n errors, truncated, drafted)
CASES = [
    pytest.param('<tool_call>\n{"name": "python", "arguments": {"code": "print(48/2)"}}\n</tool_call>', "stop",
                 [("python", {"code": "print(48/2)"})], "", 0, False, 0, id="qwen-single"),
    pytest.param('I will compute it.\n<tool_call>\n{"name": "python", "arguments": {"code": "print(2+2)"}}\n'
                 '</tool_call>\nThen I will answer.', "stop",
                 [("python", {"code": "print(2+2)"})], "I will compute it.\nThen I will answer.", 0, False, 0,
                 id="text-before-and-after"),
    pytest.param('<tool_call>\n{"name": "python", "arguments": "{\\"code\\": \\"print(1)\\"}"}\n</tool_call>',
                 "stop", [("python", {"code": "print(1)"})], "", 0, False, 0, id="arguments-json-string"),
    pytest.param('<tool_call>\n{"name": "python", "arguments": {"code": "a = 3"}}\n</tool_call>\n<tool_call>\n'
                 '{"name": "finish", "arguments": {"answer": "3"}}\n</tool_call>', "stop",
                 [("python", {"code": "a = 3"}), ("finish", {"answer": "3"})], "", 0, False, 0, id="two-calls"),
    pytest.param('<tool_call>\n{"name": "python", "arguments": {"code": "' + CODE + '"}}\n</tool_call>', "stop",
                 [("python", {"code": CODE})], "", 0, False, 0, id="code-raw-newlines-unescaped-quotes"),
    pytest.param('<tool_call>{"name": "python", "arguments": {"code": "for i in range(3):\n\tprint(i)"}}'
                 '</tool_call>', "stop", [("python", {"code": "for i in range(3):\n\tprint(i)"})], "", 0, False,
                 0, id="raw-tab"),
    pytest.param('<tool_call>{"name": "python", "arguments": {"code": "d = {"k": "v"}\nprint(d["k"], "x")"}}'
                 '</tool_call>', "stop", [("python", {"code": 'd = {"k": "v"}\nprint(d["k"], "x")'})], "", 0,
                 False, 0, id="code-with-dict-literal"),
    pytest.param("<tool_call>{'name': 'finish', 'arguments': {'answer': '18', 'exact': True, 'note': None}}"
                 "</tool_call>", "stop", [("finish", {"answer": "18", "exact": True, "note": None})], "", 0,
                 False, 0, id="python-dict"),
    pytest.param('<tool_call>{"name": "finish", "arguments": {"answer": 72,},}</tool_call>', "stop",
                 [("finish", {"answer": 72})], "", 0, False, 0, id="trailing-commas"),
    pytest.param('<think>\nI could call <tool_call>{"name": "python", "arguments": {"code": "1"}}</tool_call> '
                 'but no.\n</think>\nThe answer is 4.\n<tool_call>{"name": "finish", "arguments": {"answer": 4}}'
                 '</tool_call>', "stop", [("finish", {"answer": 4})], "The answer is 4.", 0, False, 1,
                 id="drafted-in-think"),
    pytest.param('Let me think.</think>{"name": "finish", "arguments": {"answer": 1}}', "stop",
                 [("finish", {"answer": 1})], "", 0, False, 0, id="think-opened-in-prompt"),
    pytest.param('<think>maybe {"name": "finish", "arguments": {"answer": 1}} and then', "length", [], "", 0,
                 False, 1, id="unclosed-think"),
    pytest.param('<tool_call>\n{"name": "python", "arguments": {"code": "for i in range(10):\n    print(',
                 "length", [], "", 1, True, 0, id="cut-off-in-code"),
    pytest.param('Computing.\n<tool_call>\n{"name": "finish", "arguments": {"answer": 4}}\n</tool', "length", [],
                 "Computing.", 1, True, 0, id="cut-off-in-closing-tag"),
    pytest.param('Computing now <tool_ca', "length", [], "Computing now", 1, True, 0, id="cut-off-in-open-tag"),
    pytest.param('{"name": "finish", "arguments": {"answer": "4', "length", [], "", 1, True, 0,
                 id="bare-json-cut-off"),
    pytest.param('<tool_call>\n{"name": "finish", "arguments": {"answer": 4}}', "stop", [("finish", {"answer": 4})],
                 "", 0, False, 0, id="closing-tag-eaten-by-stop-string"),
    pytest.param('<tool_call>{"arguments": {"answer": 5}}</tool_call>', "stop", [], "", 1, False, 0,
                 id="missing-name"),
    pytest.param('<tool_call>{"name": "finish", "arguments": [5]}</tool_call>', "stop", [], "", 1, False, 0,
                 id="arguments-not-object"),
    pytest.param('<tool_call>{"name": "finish" "arguments": {}}</tool_call>', "stop", [], "", 1, False, 0,
                 id="invalid-json"),
    pytest.param('<tool_call>{"name": "a", "arguments": {}}</tool_call><tool_call>{"oops"}</tool_call>', "stop",
                 [("a", {})], "", 1, False, 0, id="one-good-one-bad"),
    pytest.param('Sure.\n```json\n{"name": "finish", "arguments": {"answer": "5"}}\n```\nHope it helps.', "stop",
                 [("finish", {"answer": "5"})], "Sure.\nHope it helps.", 0, False, 0, id="json-fence"),
    pytest.param('{"type": "function", "function": {"name": "finish", "arguments": "{\\"answer\\": 5}"}}',
                 "stop", [("finish", {"answer": 5})], "", 0, False, 0, id="openai-shape-in-text"),
    pytest.param('Calling: {"tool": "finish", "parameters": {"answer": 5}}', "stop", [("finish", {"answer": 5})],
                 "Calling:", 0, False, 0, id="tool-parameters-shape"),
    pytest.param('[{"name": "python", "arguments": {"code": "1"}}, {"name": "finish", "arguments": {"answer": 1}}]',
                 "stop", [("python", {"code": "1"}), ("finish", {"answer": 1})], "", 0, False, 0,
                 id="bare-list"),
    pytest.param('<tool_call>[{"name": "a", "arguments": {}}, {"name": "b", "arguments": {"n": 2}}]</tool_call>',
                 "stop", [("a", {}), ("b", {"n": 2})], "", 0, False, 0, id="list-in-tag"),
    pytest.param('The result is {"name": "Alice", "age": 3} in JSON.', "stop", [],
                 'The result is {"name": "Alice", "age": 3} in JSON.', 0, False, 0, id="ordinary-json-not-a-call"),
    pytest.param("Janet makes 18 dollars a day. The answer is 18.", "stop", [],
                 "Janet makes 18 dollars a day. The answer is 18.", 0, False, 0, id="plain-answer"),
    pytest.param('<tool_call>{"name": "finish", "arguments": {"answer": 2}}}</tool_call>', "stop",
                 [("finish", {"answer": 2})], "", 0, False, 0, id="extra-closing-brace"),
    pytest.param('<tool_call>{"name": "finish", "arguments": {"answer": "x}"}</tool_call>', "stop",
                 [("finish", {"answer": "x}"})], "", 0, False, 0, id="missing-closing-brace"),
    pytest.param('<|python_tag|>{"name": "search", "parameters": {"q": "skyrl"}}', "stop",
                 [("search", {"q": "skyrl"})], "", 0, False, 0, id="llama-python-tag"),
    pytest.param('[TOOL_CALLS] [{"name": "finish", "arguments": {"answer": 1}}]', "stop",
                 [("finish", {"answer": 1})], "", 0, False, 0, id="mistral-tool-calls"),
    pytest.param('<tool_call>{"name": "my tool", "arguments": {}}</tool_call>', "stop", [], "", 1, False, 0,
                 id="name-not-a-tool-name"),
    pytest.param("", "stop", [], "", 0, False, 0, id="empty"),
]


@pytest.mark.parametrize("text,finish_reason,calls,content,n_errors,truncated,drafted", CASES)
def test_hermes_table(text, finish_reason, calls, content, n_errors, truncated, drafted):
    result = hermes.parse(text, finish_reason)
    assert [(c.name, c.arguments) for c in result.calls] == calls
    assert [c.id for c in result.calls] == [f"call_{i}" for i in range(len(calls))]
    assert all(c.raw for c in result.calls)
    assert result.content == content
    assert len(result.errors) == n_errors, result.errors
    assert result.truncated is truncated
    assert result.drafted == drafted


def test_error_messages_say_what_is_wrong():
    assert "missing 'name'" in hermes.parse('<tool_call>{"arguments": {}}</tool_call>').errors[0]
    assert "arguments is not an object" in hermes.parse('<tool_call>{"name": "f", "arguments": 3}</tool_call>').errors[0]
    assert "invalid JSON at line 1 column 19: Expecting ',' delimiter (near " in hermes.parse(
        '<tool_call>{"name": "finish" "arguments": {}}</tool_call>').errors[0]
    cut = hermes.parse('<tool_call>{"name": "python", "arguments": {"code": "pri', "length")
    assert "cut off by the max-token limit" in cut.errors[0]


def test_raw_keeps_the_call_source():
    text = 'a <tool_call>{"name": "f", "arguments": {}}</tool_call> b'
    (call,) = hermes.parse(text).calls
    assert call.raw == '<tool_call>{"name": "f", "arguments": {}}</tool_call>'


def test_reasoning_split():
    visible, reasoning = split_reasoning("<think>plan</think>answer <think>more</think>!")
    assert visible == "answer !"
    assert reasoning == ["plan", "more"]
    result = hermes.parse("<think>plan</think>answer")
    assert result.reasoning == "plan" and result.content == "answer"


def test_a_think_close_inside_a_call_is_argument_text():
    """Found by the truncation property test: an argument holding ``</think>`` made everything before it
    reasoning, so a call cut off after it was neither run nor reported as cut off."""
    cut = hermes.parse('<tool_call>\n{"name": "a", "arguments": {"</think>', "length")
    assert cut.calls == [] and cut.truncated and cut.reasoning == ""
    whole = hermes.parse('<tool_call>{"name": "a", "arguments": {"</think>": null}}</tool_call>')
    assert [(c.name, c.arguments) for c in whole.calls] == [("a", {"</think>": None})]
    assert hermes.parse("plan</think><tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>").reasoning == "plan"


def test_json_parser_ignores_tags_but_finds_objects():
    result = json_parser.parse('<tool_call>{"name": "f", "arguments": {"x": 1}}</tool_call> done')
    assert [(c.name, c.arguments) for c in result.calls] == [("f", {"x": 1})]
    assert result.content == "done"


def test_openai_parse_message_native_calls():
    message = {"role": "assistant", "content": "Let me check.", "tool_calls": [
        {"id": "abc123", "type": "function", "function": {"name": "python", "arguments": '{"code": "print(1)"}'}},
        {"type": "function", "function": {"name": "finish", "arguments": {"answer": 1}}},
        {"type": "function", "function": {"name": "finish", "arguments": "[1]"}},
    ]}
    result = openai_parser.parse_message(message)
    assert [(c.id, c.name, c.arguments) for c in result.calls] == [
        ("abc123", "python", {"code": "print(1)"}), ("call_1", "finish", {"answer": 1})]
    assert result.content == "Let me check."
    assert len(result.errors) == 1 and "not an object" in result.errors[0]


def test_openai_parse_message_falls_back_to_text_and_reasoning():
    message = {"role": "assistant", "reasoning_content": '<tool_call>{"name": "a", "arguments": {}}</tool_call>',
               "content": '<tool_call>{"name": "b", "arguments": {}}</tool_call>'}
    result = openai_parser.parse_message(message)
    assert [c.name for c in result.calls] == ["b"]
    assert result.drafted == 1
    cut = openai_parser.parse_message({"tool_calls": [{"function": {"name": "f", "arguments": '{"x": "ab'}}]},
                                      finish_reason="length")
    assert cut.calls == [] and cut.truncated
    assert openai_parser.parse('<tool_call>{"name": "b", "arguments": {}}</tool_call>').calls[0].name == "b"


def test_loads_tolerant():
    assert loads_tolerant('{"a": "x\ny", "b": [1, 2,],}') == {"a": "x\ny", "b": [1, 2]}
    assert loads_tolerant("{'a': False, \"b\": null}") == {"a": False, "b": None}
    assert loads_tolerant('```json\n{"a": 1}\n```') == {"a": 1}
    assert loads_tolerant('{"re": "\\d+"}') == {"re": "\\d+"}
    with pytest.raises(JSONRepairError, match="invalid JSON at line 1 column 7"):
        loads_tolerant('{"a": }')


def test_registered_by_name(plugins):
    registry = plugins.registry
    assert registry.names("parsers") == ["auto", "codeblock", "deepseek_v31", "glm45", "harmony", "hermes", "json",
                                         "kimi_k2", "mistral_v11", "openai", "qwen3_coder"]
    assert isinstance(registry.get("parsers", "hermes"), HermesParser)
    assert registry.get("parsers", "openai").name == "openai"


# ---------------------------------------------------------------------------------------------------- fuzzing

json_scalars = st.none() | st.booleans() | st.integers(-10**12, 10**12) | st.text(max_size=30) | st.floats(
    allow_nan=False, allow_infinity=False)
json_values = st.recursive(json_scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
    st.text(max_size=10), inner, max_size=4), max_leaves=20)
json_args = st.dictionaries(st.text(max_size=12), json_values, max_size=5)
tool_names = st.from_regex(r"[a-z][a-z0-9_]{0,15}", fullmatch=True)
FRAGMENTS = ["```python\n", "```bash\n", "<tool_call>", "</tool_call>", "<think>", "</think>", "{", "}", "[", "]", '"', "'", ":", ",", "\\",
             '"name"', '"arguments"', '"function"', '"tool"', "True", "null", "```json\n", "```", "\n", " "]
fragment_text = st.lists(st.sampled_from(FRAGMENTS) | st.text(max_size=8), max_size=40).map("".join)
# Prose that cannot itself contain a call or a tag.
prose = st.text(alphabet=st.characters(blacklist_characters="{}[]<>\"'`\\", blacklist_categories=("Cs",)),
                max_size=40)

FUZZ = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FUZZ
@given(text=fragment_text | st.text(max_size=200), finish_reason=st.sampled_from(["stop", "length"]),
       parser=st.sampled_from([hermes, json_parser, openai_parser, codeblock]))
def test_parse_never_raises(text, finish_reason, parser):
    result = parser.parse(text, finish_reason)
    assert isinstance(result, ParseResult)
    for call in result.calls:
        assert isinstance(call.name, str) and call.name
        assert isinstance(call.arguments, dict)
        json.dumps(call.arguments, default=str)


@FUZZ
@given(name=tool_names, args=json_args, before=prose, after=prose)
def test_hermes_round_trip(name, args, before, after):
    text = f"{before}\n{format_tool_call(name, args)}\n{after}"
    result = hermes.parse(text)
    assert [(c.name, c.arguments) for c in result.calls] == [(name, args)]
    assert result.errors == [] and not result.truncated
    assert result.content == "\n".join(p.strip() for p in (before, after) if p.strip())


@FUZZ
@given(name=tool_names, args=json_args, before=prose, data=st.data())
def test_truncated_call_is_never_executed(name, args, before, data):
    call = format_tool_call(name, args)
    text = f"{before} {call}"
    start = len(before) + 1
    cut = data.draw(st.integers(start + 2, len(text) - 1), label="cut")
    result = hermes.parse(text[:cut], "length")
    assert result.calls == []
    assert result.truncated
    assert any("cut off" in e for e in result.errors)


@FUZZ
@given(name=tool_names, args=json_args, data=st.data())
def test_truncated_bare_json_is_never_executed(name, args, data):
    text = json.dumps({"name": name, "arguments": args})
    cut = data.draw(st.integers(1, len(text) - 1), label="cut")
    result = hermes.parse(text[:cut], "length")
    assert result.calls == []


@FUZZ
@given(depth=st.integers(1, 60), finish_reason=st.sampled_from(["stop", "length"]), data=st.data())
def test_deep_nesting_never_raises(depth, finish_reason, data):
    inner = "[" * depth + "1" + "]" * depth
    text = f'<tool_call>{{"name": "f", "arguments": {{"x": {inner}}}}}</tool_call>'
    cut = data.draw(st.integers(1, len(text)), label="cut")
    result = hermes.parse(text[:cut], finish_reason)
    if cut == len(text):
        assert len(result.calls) == 1
    elif finish_reason == "length":
        assert result.calls == []


# ---------------------------------------------------------------------------------------------------- codeblock

CODEBLOCK_CASES = [
    # (text, finish_reason, calls, content, truncated) -- the shapes SmolLM2-135M writes
    ("To calculate it:\n```python\nprint(0.8-0.5)\n```\n", "stop", [("python", {"code": "print(0.8-0.5)"})],
     "To calculate it:", False),
    ("```python\nx = 2 * 100\nprint(x)\n```", "stop", [("python", {"code": "x = 2 * 100\nprint(x)"})], "", False),
    ("```py\nprint(1)\n```\n```bash\nls -la\n```", "stop",
     [("python", {"code": "print(1)"}), ("bash", {"command": "ls -la"})], "", False),
    ("```python print(2)``` then", "stop", [("python", {"code": "print(2)"})], "then", False),
    ("Cut: ```python\ndef f(:\n    return", "length", [], "Cut:", True),  # never run a half-written block
    ("Ended: ```python\nprint(3)", "stop", [("python", {"code": "print(3)"})], "Ended:", False),
    ("```text\nhello\n``` and ```\nplain\n```", "stop", [], "```text\nhello\n```\nand ```\nplain\n```", False),
    ("The answer is 84.", "stop", [], "The answer is 84.", False),
    ("```python\n\n```", "stop", [], "", False),  # an empty block is no call
    ('```python\nprint(5)\n```\n<tool_call>{"name": "finish", "arguments": {"answer": 5}}</tool_call>', "stop",
     [("python", {"code": "print(5)"}), ("finish", {"answer": 5})], "", False),
    ('{"name": "finish", "arguments": {"answer": 5}}', "stop", [], '{"name": "finish", "arguments": {"answer": 5}}',
     False),  # bare JSON is prose here: code and data would be misread as calls
]


@pytest.mark.parametrize("text,finish_reason,calls,content,truncated", CODEBLOCK_CASES)
def test_codeblock_table(text, finish_reason, calls, content, truncated):
    result = codeblock.parse(text, finish_reason)
    assert [(c.name, c.arguments) for c in result.calls] == calls
    assert [c.id for c in result.calls] == [f"call_{i}" for i in range(len(calls))]
    assert result.content == content
    assert result.truncated == truncated
    assert bool(result.errors) == truncated


def test_codeblock_formats_prompts_and_stops():
    assert codeblock.format_call("python", {"code": "print(1)"}) == "```python\nprint(1)\n```"
    tag = codeblock.format_call("finish", {"answer": 3})
    assert tag.startswith("<tool_call>") and json.loads(tag.split("\n")[1]) == {"name": "finish",
                                                                                "arguments": {"answer": 3}}
    schemas = [{"type": "function", "function": {"name": "python", "description": "Run code.",
                                                 "parameters": {"type": "object"}}},
               {"type": "function", "function": {"name": "finish", "description": "Done.", "parameters": {
                   "type": "object", "properties": {"answer": {"type": "string", "description": "the answer"}},
                   "required": ["answer"]}}}]
    prompt = codeblock.tools_prompt(schemas)
    assert "write a ```python code block" in prompt and '"name": "finish"' in prompt
    assert "<the answer>" in prompt  # the tagged tool's example call, from its schema
    assert codeblock.tools_prompt(schemas[:1]).count("<tool_call>") == 0
    # the stop string ends a turn at a closing fence but never at an opening one
    assert "```\n" in "```python\nprint(1)\n```\n" and "```\n" not in "Let me compute:\n```python\n"
    assert codeblock.stop == ("```\n",)
    only_sh = CodeBlockParser({"sh": ("shell", "cmd")})
    assert [(c.name, c.arguments) for c in only_sh.parse("```sh\necho hi\n```\n```python\nx\n```").calls] == [
        ("shell", {"cmd": "echo hi"})]


code_text = st.text(alphabet=st.characters(blacklist_characters="`", blacklist_categories=("Cs",)),
                    max_size=60).filter(lambda t: t.strip("\n").strip())


@FUZZ
@given(code=code_text, before=prose, after=prose)
def test_codeblock_round_trip(code, before, after):
    code = code.strip("\n")
    text = f"{before}\n{codeblock.format_call('python', {'code': code})}\n{after}"
    result = codeblock.parse(text)
    assert [(c.name, c.arguments) for c in result.calls] == [("python", {"code": code})]
    assert not result.errors


@FUZZ
@given(code=code_text, before=prose, data=st.data())
def test_codeblock_cut_off_is_never_executed(code, before, data):
    text = f"{before} ```python\n{code}\n```"
    cut = data.draw(st.integers(len(before) + 1, len(text) - 1), label="cut")
    result = codeblock.parse(text[:cut], "length")
    assert result.calls == []
