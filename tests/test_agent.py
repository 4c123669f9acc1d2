"""The agent loop against the real SmolLM2 hf engine and the real bubblewrap sandbox.

Where a test needs the model to make a particular call (a hanging tool, bad arguments, ...), the engine is
wrapped by ``ScriptedReplyInjector``: the real engine still runs (one token), then the model's reply is replaced
by scripted text tokenised with the model's tokenizer. Engine faults (raises, hangs, returns nothing) come from
``EngineFaultInjector``, which wraps the real engine too.
"""

from __future__ import annotations

import asyncio
import json

import attrs
import pytest

from skyrl_core.agent import MAX_OBSERVATION_CHARS, run_agent
from skyrl_core.default_plugins.chat.template import ChatFormat
from skyrl_core.config import AgentConfig, HintsConfig
from skyrl_core.default_plugins.generic_tools import finish_tool, python_tool
from skyrl_core.inference.base import Engine, GenerationOutput, SamplingParams
from skyrl_core.default_plugins.parsers import CodeBlockParser, HermesParser
from skyrl_core.default_plugins.runtimes.sandbox import LocalSandbox
from skyrl_core.runtime import RuntimeSpec
from skyrl_core.tools import Tool, ToolContext, ToolResult
from skyrl_core.transitions import Trajectory

pytestmark = pytest.mark.timeout(300)

QUESTION = [{"role": "system", "content": "Use the python tool to compute, then call finish with the answer."},
            {"role": "user", "content": "What is 48 + 24?"}]


@pytest.fixture(scope="module")
def engine():
    from skyrl_core.default_plugins.engines.hf import HFEngine

    eng = HFEngine(model="smollm2-135m-instruct", max_batch=4, device="cpu")
    yield eng
    asyncio.run(eng.close())


@pytest.fixture(scope="module")
def chat(engine):
    return ChatFormat(engine.tokenizer)


class ScriptedReplyInjector(Engine):
    """Wraps the real engine: each call runs it for one token, then substitutes the next scripted reply
    (tokenised with the real tokenizer, ending with <|im_end|> unless ``eot=False``). ``run_model=False`` skips
    the model call (for tests timing other parts to the sub-second)."""

    name = "scripted-reply-injector"

    def __init__(self, inner: Engine, replies: list[str], eot: bool = True, run_model: bool = True) -> None:
        super().__init__()
        self.run_model = run_model
        self.inner = inner
        self.tokenizer = inner.tokenizer
        self.max_context = inner.max_context
        self.replies = list(replies)
        self.eot = eot
        self.calls = 0

    async def generate(self, input_ids, sampling):
        if self.run_model:
            await self.inner.generate(input_ids, attrs.evolve(sampling, max_tokens=1))
        reply = self.replies[min(self.calls, len(self.replies) - 1)]
        self.calls += 1
        ids = self.tokenizer(reply, add_special_tokens=False)["input_ids"]
        if self.eot:
            ids = ids + [self.tokenizer.convert_tokens_to_ids("<|im_end|>")]
        return GenerationOutput(output_ids=ids, output_logprobs=[0.0] * len(ids), finish_reason="stop", text=reply)


class EngineFaultInjector(Engine):
    """Wraps the real engine and injects a fault on call number ``at`` (0-based): ``raise`` (RuntimeError),
    ``hang`` (never returns), ``none`` (returns None) or ``empty`` (no tokens, finish_reason 'abort')."""

    name = "fault-injector"

    def __init__(self, inner: Engine, fault: str, at: int = 0) -> None:
        super().__init__()
        self.inner, self.fault, self.at = inner, fault, at
        self.tokenizer = inner.tokenizer
        self.max_context = inner.max_context
        self.calls = 0

    async def generate(self, input_ids, sampling):
        n = self.calls
        self.calls += 1
        if n == self.at:
            if self.fault == "raise":
                raise RuntimeError("CUDA error: device-side assert triggered (injected)")
            if self.fault == "hang":
                await asyncio.sleep(3600)
            if self.fault == "none":
                return None
            if self.fault == "empty":
                return GenerationOutput(output_ids=[], output_logprobs=[], finish_reason="abort")
        return await self.inner.generate(input_ids, sampling)


def call(name: str, **args) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': args})}\n</tool_call>"


async def run(engine, chat, tools=(python_tool, finish_tool), sampling=None, messages=QUESTION, runtime=None,
              engine_timeout_s=None, parser=None, **agent):
    traj = Trajectory(instance_id="q0", sample_index=0, task="test", group_id="test:q0",
                      messages=[dict(m) for m in messages])
    cfg = AgentConfig(**{"max_turns": 6, **agent})
    rt = runtime
    own = rt is None
    if own:
        rt = LocalSandbox(RuntimeSpec())
        await rt.start()
    try:
        await run_agent(traj, engine=engine, tools={t.name: t for t in tools}, parser=parser or HermesParser(), chat=chat,
                        agent_config=cfg, sampling=sampling or SamplingParams(max_tokens=48, temperature=0.0),
                        ctx=ToolContext(runtime=rt), engine_timeout_s=engine_timeout_s)
    finally:
        if own:
            await rt.close()
    return traj


def observations(traj):
    return [m["content"] for m in traj.messages if m["role"] in ("tool", "user")][1:]


def assert_one_datum(traj):
    """Each call's input + output is a prefix of the next call's input (token-in/token-out)."""
    for a, b in zip(traj.transitions, traj.transitions[1:]):
        if not b.new_context:
            assert b.input_ids[: len(a.input_ids) + len(a.output_ids)] == a.input_ids + a.output_ids


@pytest.mark.slow
async def test_real_model_rollout_records_exact_transitions(engine, chat):
    traj = await run(engine, chat, max_turns=2, sampling=SamplingParams(max_tokens=40, temperature=0.0))
    assert traj.transitions, "no LLM call was recorded"
    assert traj.finish_reason in {"finished", "no_tool_call", "max_turns", "max_tokens", "context_exceeded"}
    assert traj.turns == len(traj.transitions)
    first = traj.transitions[0]
    assert first.input_ids == chat.render_ids(traj.messages[:2], [python_tool.schema(), finish_tool.schema()])
    for t in traj.transitions:
        assert t.output_logprobs is not None and len(t.output_logprobs) == len(t.output_ids)
        assert all(lp <= 0.0 for lp in t.output_logprobs)
    # the transcript's assistant text is the decoded generation (ids were never re-encoded)
    assert traj.messages[2]["content"] == chat.decode(first.output_ids)
    assert_one_datum(traj)
    assert traj.masked == (traj.finish_reason in {"max_turns", "max_tokens", "context_exceeded"})


async def test_python_then_finish_in_the_real_sandbox(engine, chat):
    eng = ScriptedReplyInjector(engine, ["I will compute it.\n" + call("python", code="print(48 + 24)"),
                                         call("finish", answer="72")])
    traj = await run(eng, chat)
    assert traj.finish_reason == "finished" and traj.answer == "72" and not traj.masked
    assert traj.tool_calls == {"python": 1, "finish": 1}
    assert traj.turns == 2
    assert observations(traj)[0].startswith("72")
    assert "5 turns left." in observations(traj)[0]
    assert_one_datum(traj)


async def test_unknown_tool_gets_the_list_of_valid_tools(engine, chat):
    eng = ScriptedReplyInjector(engine, [call("pyhton", code="print(1)"), call("finish", answer="1")])
    traj = await run(eng, chat)
    obs = observations(traj)[0]
    assert "no tool named 'pyhton'" in obs and "Did you mean 'python'?" in obs
    assert "Valid tools: finish, python." in obs
    assert python_tool.example_call() in obs
    assert traj.finish_reason == "finished" and traj.tool_calls == {"finish": 1}


async def test_arguments_failing_the_schema_get_that_tools_example(engine, chat):
    eng = ScriptedReplyInjector(engine, [call("python", source="print(1)"), call("finish", answer="1")])
    traj = await run(eng, chat)
    obs = observations(traj)[0]
    assert "'code' is a required property" in obs
    assert f"<tool_call>\n{python_tool.example_call()}\n</tool_call>" in obs
    assert traj.finish_reason == "finished"


async def test_unparseable_call_is_corrected_and_the_loop_continues(engine, chat):
    eng = ScriptedReplyInjector(engine, ['<tool_call>\n{"name": "python", "arguments": </tool_call>',
                                         call("finish", answer="2")])
    traj = await run(eng, chat)
    obs = observations(traj)[0]
    assert obs.startswith("Error: your tool call could not be parsed:")
    assert python_tool.example_call() in obs  # the tool the model named
    assert traj.finish_reason == "finished" and traj.answer == "2"


async def test_a_hanging_tool_is_stopped_by_the_per_call_timeout(engine, chat):
    async def hang(args, ctx):
        await asyncio.sleep(3600)

    sleeper = Tool(name="wait", description="Wait.", parameters={"type": "object", "properties": {}}, handler=hang)
    eng = ScriptedReplyInjector(engine, [call("wait"), call("finish", answer="3")])
    traj = await asyncio.wait_for(run(eng, chat, tools=(sleeper, finish_tool), tool_timeout_s=0.5), 120)
    assert "tool 'wait' timed out after 0.5 s (agent.tool_timeout_s)" in observations(traj)[0]
    assert traj.finish_reason == "finished" and traj.tool_calls == {"wait": 1, "finish": 1}


async def test_a_tool_printing_50_mb_is_truncated_with_a_note_of_the_true_size(engine, chat):
    # the runtime caps the output at 16000 characters and notes the 50 MB written; the loop's second cut (to
    # agent.max_context_tokens) keeps that note instead of counting the characters of the runtime's excerpt
    code = "import sys\nsys.stdout.write('x' * 50_000_000 + 'END')"
    eng = ScriptedReplyInjector(engine, [call("python", code=code), call("finish", answer="0")], run_model=False)
    traj = await run(eng, chat)
    obs = observations(traj)[0]
    assert "[... output truncated: the command wrote 50000003 bytes; its first " in obs
    assert "characters omitted" not in obs
    assert obs.startswith("xxx") and "END" in obs[-400:]
    assert len(obs) < min(MAX_OBSERVATION_CHARS, AgentConfig().max_context_tokens) + 500
    assert traj.finish_reason == "finished"


async def test_a_raising_tool_becomes_a_corrective_observation(engine, chat):
    def boom(args, ctx):
        raise ValueError("disk quota exceeded")

    broken = Tool(name="save", description="Save text.", handler=boom,
                  parameters={"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]})
    eng = ScriptedReplyInjector(engine, [call("save", text="hi"), call("finish", answer="4")])
    traj = await run(eng, chat, tools=(broken, finish_tool))
    obs = observations(traj)[0]
    assert "tool 'save' failed: ValueError: disk quota exceeded" in obs
    assert broken.example_call() in obs
    assert traj.finish_reason == "finished"


async def test_no_tool_call_stops_or_nudges(engine, chat):
    eng = ScriptedReplyInjector(engine, ["The answer is 72."])
    traj = await run(eng, chat, on_no_tool_call="stop")
    assert traj.finish_reason == "no_tool_call" and not traj.masked and traj.turns == 1

    eng = ScriptedReplyInjector(engine, ["The answer is 72."])
    traj = await run(eng, chat, on_no_tool_call="nudge", max_nudges=2)
    assert traj.finish_reason == "no_tool_call" and traj.turns == 3
    nudges = [m for m in traj.messages if m["role"] == "user" and m["content"].startswith("You did not call a tool")]
    assert len(nudges) == 2 and python_tool.example_call() in nudges[0]["content"]

    eng = ScriptedReplyInjector(engine, ["The answer is 72.", call("finish", answer="72")])
    traj = await run(eng, chat, on_no_tool_call="nudge")
    assert traj.finish_reason == "finished" and traj.answer == "72"


async def test_max_turns_is_masked(engine, chat):
    eng = ScriptedReplyInjector(engine, [call("python", code="print(1)")])
    traj = await run(eng, chat, max_turns=2, hints=HintsConfig(repeated_action=0))
    assert traj.finish_reason == "max_turns" and traj.masked and traj.turns == 2
    assert "1 turn left." in observations(traj)[0]


async def test_generation_stopped_at_max_tokens_mid_call(engine, chat):
    # the real model, cut after 3 tokens: a named, masked finish (the cut call is never executed)
    traj = await run(engine, chat, sampling=SamplingParams(max_tokens=3, temperature=0.0))
    assert traj.finish_reason == "max_tokens" and traj.masked
    assert len(traj.transitions[0].output_ids) == 3 and traj.transitions[0].finish_reason == "length"
    assert "sampling.max_tokens=3" in traj.error


class CutAfter(ScriptedReplyInjector):
    """Replies cut to ``sampling.max_tokens`` tokens with finish_reason 'length', as an engine cuts them."""

    async def generate(self, input_ids, sampling):
        out = await super().generate(input_ids, sampling)
        ids = out.output_ids[:sampling.max_tokens]
        return GenerationOutput(output_ids=ids, output_logprobs=[0.0] * len(ids), finish_reason="length")


@pytest.mark.parametrize("reply,words", [
    ("Let me think about this step by step. First, 48 + 24 is the sum of two numbers, so", "with no tool call"),
    (call("python", code="total = 0\nfor i in range(100):\n    total += i\nprint(total)"), "mid-call"),
])
async def test_a_max_tokens_stop_says_whether_a_call_was_cut(engine, chat, reply, words):
    """Issue #37 item 14: a max_tokens stop was reported 'mid-call' even when the text held no call."""
    traj = await run(CutAfter(engine, [reply], eot=False, run_model=False), chat,
                     sampling=SamplingParams(max_tokens=12, temperature=0.0))
    assert traj.finish_reason == "max_tokens" and traj.masked
    assert traj.error.startswith("generation hit sampling.max_tokens=12") and words in traj.error
    assert ("mid-call" in traj.error) == (words == "mid-call")


GPT_OSS_CALL = ('<|channel|>analysis<|message|>I need the sum.<|end|><|start|>assistant<|channel|>commentary '
                'to=functions.python <|constrain|>json<|message|>{"code": "print(48 + 24)"}<|call|>')
MISTRAL_CALL = '[TOOL_CALLS]python[ARGS]{"code": "print(48 + 24)"}'
KIMI_CALL = ('<|tool_calls_section_begin|><|tool_call_begin|>functions.python:0<|tool_call_argument_begin|>'
             '{"code": "print(48 + 24)"}<|tool_call_end|><|tool_calls_section_end|>')


@pytest.mark.parametrize("reply,label", [(GPT_OSS_CALL, "gpt-oss harmony"), (MISTRAL_CALL, "Mistral [TOOL_CALLS]"),
                                         (KIMI_CALL, "Kimi-K2")])
async def test_a_call_in_a_format_the_parser_cannot_read_is_an_observation_not_a_stop(engine, chat, reply, label):
    """Issue #32 fault 1: under the default parser and on_no_tool_call: stop these ended as no_tool_call."""
    eng = ScriptedReplyInjector(engine, [reply, call("finish", answer="72")], run_model=False)
    traj = await run(eng, chat, on_no_tool_call="stop")
    assert traj.finish_reason == "finished" and traj.answer == "72"
    obs = observations(traj)[0]
    assert obs.startswith(f"Error: your reply looks like a tool call in the {label} format")
    assert "this run reads tool calls in the 'hermes' format, so nothing was run" in obs
    assert call("python", code="print(1)").split("\n")[0] in obs  # a valid call in the run's format
    assert traj.metrics["unread_calls"] == 1 and traj.tool_calls == {"finish": 1}


async def test_a_parse_error_in_another_models_format_names_that_format(engine, chat):
    glm = "<tool_call>python\n<arg_key>code</arg_key>\n<arg_value>print(48 + 24)</arg_value>\n</tool_call>"
    eng = ScriptedReplyInjector(engine, [glm, call("finish", answer="72")], run_model=False)
    traj = await run(eng, chat)
    obs = observations(traj)[0]
    assert obs.startswith("Error: your tool call could not be parsed:")
    assert "Your reply looks like the GLM-4.5 format (parser 'glm45'); this run reads the 'hermes' format." in obs
    assert traj.finish_reason == "finished"


async def test_the_right_parser_runs_those_calls(engine, chat):
    from skyrl_core.default_plugins.parsers import HarmonyParser, KimiK2Parser, MistralV11Parser

    for parser, reply in ((HarmonyParser(), GPT_OSS_CALL), (MistralV11Parser(), MISTRAL_CALL),
                          (KimiK2Parser(), KIMI_CALL)):
        finish = parser.format_call("finish", {"answer": "72"})
        traj = await run(ScriptedReplyInjector(engine, [reply, finish], run_model=False), chat, parser=parser)
        assert traj.finish_reason == "finished" and traj.tool_calls == {"python": 1, "finish": 1}, parser.name
        assert observations(traj)[0].startswith("72")


async def test_observations_carry_the_id_of_the_call_they_answer(engine, chat):
    """Issue #32 fault 5: two calls in one message, the first failing; and calls written out of order."""
    from skyrl_core.default_plugins.parsers import KimiK2Parser

    def boom(args, ctx):
        raise ValueError("disk quota exceeded")

    save = Tool(name="save", description="Save text.", handler=boom,
                parameters={"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]})
    tools = (save, python_tool, finish_tool)
    eng = ScriptedReplyInjector(engine, [call("save", text="hi") + "\n" + call("python", code="print(7 * 6)"),
                                         call("finish", answer="42")], run_model=False)
    traj = await run(eng, chat, tools=tools)
    obs = [(m["tool_call_id"], m["content"][:26]) for m in traj.messages if m.get("tool_call_id")]
    assert obs == [("call_0", "Error: tool 'save' failed:"), ("call_1", "42\n\n[5 turns left.]"),
                   ("call_0", "Finished with answer: 42")]

    kimi = KimiK2Parser()
    reply = ('<|tool_calls_section_begin|><|tool_call_begin|>functions.python:1<|tool_call_argument_begin|>'
             '{"code": "print(6 * 7)"}<|tool_call_end|><|tool_call_begin|>functions.save:0'
             '<|tool_call_argument_begin|>{"text": "hi"}<|tool_call_end|><|tool_calls_section_end|>')
    eng = ScriptedReplyInjector(engine, [reply, kimi.format_call("finish", {"answer": "42"}, index=2)],
                                run_model=False)
    traj = await run(eng, chat, tools=tools, parser=kimi)
    obs = {m["tool_call_id"]: m["content"] for m in traj.messages if m.get("tool_call_id")}
    assert obs["functions.python:1"].startswith("42") and "tool 'save' failed" in obs["functions.save:0"]


async def test_context_window_exceeded(engine, chat):
    prompt = chat.render_ids(chat.prepare(QUESTION, [python_tool.schema(), finish_tool.schema()]),
                             [python_tool.schema(), finish_tool.schema()])
    eng = ScriptedReplyInjector(engine, [call("python", code="print(2)"), call("finish", answer="2")])
    traj = await run(eng, chat, max_context_tokens=len(prompt) + 40)
    assert traj.finish_reason == "context_exceeded" and traj.masked and traj.turns == 1


@pytest.mark.parametrize("fault,reason,words", [
    ("raise", "error_run", "engine 'fault-injector' failed: RuntimeError: CUDA error"),
    ("none", "error_run", "returned no output"),
    ("empty", "error_run", "aborted"),
    ("hang", "timeout", "engine call timed out after 0.5 s (engine.call_timeout_s)"),
])
async def test_engine_faults_end_the_trajectory_with_a_named_reason(engine, chat, fault, reason, words):
    # the first call succeeds (a python call), the second one fails
    first = ScriptedReplyInjector(engine, [call("python", code="print(1)")], run_model=fault != "hang")
    eng = EngineFaultInjector(first, fault, at=1)
    traj = await asyncio.wait_for(run(eng, chat, engine_timeout_s=0.5 if fault == "hang" else None), 120)
    assert traj.finish_reason == reason and traj.masked
    assert words in traj.error
    assert len(traj.transitions) == (1 if fault != "empty" else 2)  # a failed call records no transition


async def test_context_reset_starts_a_new_datum(engine, chat):
    async def summarize(args, ctx):
        return ToolResult(output="summarised", reset_messages=[ctx.state.messages[0],
                                                               {"role": "user", "content": "Summary: 48+24. Go on."}])

    tool = Tool(name="summarize", description="Replace the context by a summary.", handler=summarize,
                parameters={"type": "object", "properties": {}})
    eng = ScriptedReplyInjector(engine, [call("summarize"), call("finish", answer="72")])
    traj = await run(eng, chat, tools=(tool, finish_tool))
    assert traj.finish_reason == "finished"
    a, b = traj.transitions
    assert b.new_context and not a.new_context
    assert chat.tokenizer.decode(b.input_ids).count("Summary: 48+24") == 1
    assert "What is 48 + 24?" not in chat.tokenizer.decode(b.input_ids)
    assert any(m.get("context_reset") for m in traj.messages)


async def test_hints_repeated_action_and_failed_edit(engine, chat):
    def edit(args, ctx):
        return ToolResult(output="no match for old text", error=True, metadata={"edit_failed": True})

    editor = Tool(name="edit", description="Edit.", handler=edit,
                  parameters={"type": "object", "properties": {"old": {"type": "string"}}, "required": ["old"]})
    eng = ScriptedReplyInjector(engine, [call("edit", old="a")] * 3 + [call("finish", answer="x")])
    traj = await run(eng, chat, tools=(editor, finish_tool))
    obs = observations(traj)
    assert "re-check its current content" in obs[0]
    assert "same call" not in obs[1] and "same call 3 times in a row" in obs[2]
    traj = await run(ScriptedReplyInjector(engine, [call("edit", old="a")] * 3 + [call("finish", answer="x")]),
                     chat, tools=(editor, finish_tool),
                     hints=HintsConfig(turns_left=False, repeated_action=0, failed_edit=False))
    assert all("[" not in o for o in observations(traj)[:3])


async def test_generation_without_end_of_turn_gets_template_end_of_turn(engine, chat):
    eng = ScriptedReplyInjector(engine, [call("python", code="print(5)"), call("finish", answer="5")], eot=False)
    traj = await run(eng, chat)
    a, b = traj.transitions
    im_end = chat.tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert a.output_ids[-1] != im_end
    assert b.input_ids[len(a.input_ids) + len(a.output_ids)] == im_end
    assert_one_datum(traj)


DEMO = [{"role": "system", "content": "Compute with python, then give the answer."},
        {"role": "user", "content": "Calculate 12*7."},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "c0", "type": "function", "function": {"name": "python",
                                                          "arguments": json.dumps({"code": "print(12*7)"})}}]},
        {"role": "tool", "tool_call_id": "c0", "content": "84"},
        {"role": "assistant", "content": "The answer is 84."},
        {"role": "user", "content": "Calculate 48+24."}]


class SamplingRecorder(ScriptedReplyInjector):
    """The scripted engine, also keeping the SamplingParams of every call."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.samplings = []

    async def generate(self, input_ids, sampling):
        self.samplings.append(sampling)
        return await super().generate(input_ids, sampling)


async def test_codeblock_actions_run_in_the_real_sandbox(engine, chat):
    eng = SamplingRecorder(engine, ["Let me compute:\n```python\nprint(48 + 24)\n```\n", "The answer is 72."])
    traj = await run(eng, chat, tools=(python_tool,), parser=CodeBlockParser(), messages=DEMO,
                     hints=HintsConfig(turns_left=False))
    assert traj.finish_reason == "no_tool_call" and traj.tool_calls == {"python": 1} and traj.turns == 2
    assert observations(traj)[-1] == "72"  # the output alone: no hint appended
    assert all("```\n" in s.stop for s in eng.samplings)  # the parser's stop string reaches the engine
    system = traj.messages[0]["content"]
    assert "write a ```python code block" in system and "<tools>" not in system
    # the demonstration's call is written as a code block, its result in the template's observation role
    assert traj.messages[2] == {"role": "assistant", "content": "```python\nprint(12*7)\n```"}
    assert (traj.messages[3]["role"], traj.messages[3]["content"]) == (chat.observation_role, "84")
    # the template was given no tool schemas: the prompt is the messages alone
    assert traj.transitions[0].input_ids == chat.render_ids(traj.messages[:6], None)
    assert_one_datum(traj)


async def test_demonstrations_follow_the_parser(engine, chat):
    eng = ScriptedReplyInjector(engine, ["72"], run_model=False)
    traj = await run(eng, chat, tools=(python_tool,), messages=DEMO)
    demo_call = traj.messages[2]["content"]
    assert demo_call.startswith("<tool_call>") and json.loads(demo_call.split("\n")[1]) == {
        "name": "python", "arguments": {"code": "print(12*7)"}}
    assert "tool_calls" not in traj.messages[2]
    bad = [dict(m) for m in DEMO]
    bad[2] = {"role": "assistant", "content": "", "tool_calls": [{"function": {"arguments": "{}"}}]}
    with pytest.raises(ValueError, match="instruction message 2: a demonstrated tool call needs a 'name'"):
        await run(eng, chat, tools=(python_tool,), messages=bad)  # a builder bug: the dispatcher marks error_run


async def test_chat_template_kwargs_are_recorded_in_every_transition(engine):
    chat = ChatFormat(engine.tokenizer, template_kwargs={"enable_thinking": False})
    eng = ScriptedReplyInjector(engine, [call("python", code="print(1)"), call("finish", answer="1")],
                                run_model=False)
    traj = await run(eng, chat)
    assert traj.finish_reason == "finished" and len(traj.transitions) == 2
    assert all(t.chat_template_kwargs == {"enable_thinking": False} for t in traj.transitions)
    assert traj.transitions[0].to_json()["chat_template_kwargs"] == {"enable_thinking": False}


async def test_the_xml_parameter_parser_types_values_by_the_trajectorys_tools(engine, chat):
    from skyrl_core.default_plugins.parsers.xml_parameters import XmlParameterParser

    parser = XmlParameterParser()
    counter = Tool(name="count", description="count to n", parameters={
        "type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"], "additionalProperties": False},
        handler=lambda args, ctx: ToolResult(output=" ".join(str(i) for i in range(args["n"]))))
    eng = ScriptedReplyInjector(engine, [parser.format_call("count", {"n": 3}), parser.format_call(
        "finish", {"answer": "done"})], run_model=False)
    traj = await run(eng, chat, tools=(counter, finish_tool), parser=parser)
    assert traj.finish_reason == "finished" and traj.tool_calls == {"count": 1, "finish": 1}
    assert "0 1 2" in observations(traj)[0]  # "3" reached the tool as the integer its schema asks for


def test_a_schema_error_quotes_only_a_cut_of_the_offending_value():
    from skyrl_core.errors import ToolArgumentsError
    from skyrl_core.tools import Tool

    tool = Tool(name="probe", description="d", handler=lambda args, ctx: "ok",
                parameters={"type": "object", "properties": {"q": {"type": "string", "maxLength": 10}}})
    with pytest.raises(ToolArgumentsError) as info:
        tool.validate({"q": "x" * 5_000_000})  # jsonschema's message holds the whole 5 MB value
    text = str(info.value)
    assert len(text) < 600 and "characters cut" in text and text.endswith("is too long")
    with pytest.raises(ToolArgumentsError, match="^argument 'q' of 'probe': 5 is not of type 'string'$"):
        tool.validate({"q": 5})  # a short message is kept whole


ID_TEMPLATE = ("{%- for m in messages -%}{%- if m.role == 'tool' -%}<|im_start|>tool\n"
               "## Return of {{ m.tool_call_id }}\n{{ m.content }}<|im_end|>\n{% else -%}<|im_start|>{{ m.role }}\n"
               "{{ m.content }}<|im_end|>\n{% endif -%}"
               "{%- endfor -%}{%- if add_generation_prompt -%}<|im_start|>assistant\n{% endif -%}")
STRICT_ID_TEMPLATE = ("{%- for m in messages -%}{%- if m.tool_call_id is defined and m.tool_call_id|length != 9 -%}"
                      "{{ raise_exception('Tool call IDs should be alphanumeric strings with length 9!') }}"
                      "{%- endif -%}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{%- endfor -%}"
                      "{%- if add_generation_prompt -%}<|im_start|>assistant\n{% endif -%}")


async def test_templates_that_render_call_ids_get_them_and_strict_ones_still_work(engine):
    """Kimi-K2's template writes '## Return of <id>' before a result; Mistral's raises on ids of another shape."""
    from skyrl_core.default_plugins.parsers import KimiK2Parser

    kimi = KimiK2Parser()
    replies = [KIMI_CALL, kimi.format_call("finish", {"answer": "72"}, index=1)]
    chat = ChatFormat(engine.tokenizer, chat_template=ID_TEMPLATE)
    assert chat.call_ids == "rendered"
    traj = await run(ScriptedReplyInjector(engine, replies, run_model=False), chat, parser=kimi)
    assert traj.finish_reason == "finished"
    assert "## Return of functions.python:0\n72" in engine.tokenizer.decode(traj.transitions[1].input_ids)
    strict = ChatFormat(engine.tokenizer, chat_template=STRICT_ID_TEMPLATE)
    assert strict.call_ids == "rejected" and ChatFormat(engine.tokenizer).call_ids == "ignored"
    traj = await run(ScriptedReplyInjector(engine, replies, run_model=False), strict, parser=kimi)
    assert traj.finish_reason == "finished" and traj.tool_calls == {"python": 1, "finish": 1}
    assert [m["tool_call_id"] for m in traj.messages if m.get("tool_call_id")] == ["functions.python:0",
                                                                                   "functions.finish:1"]
