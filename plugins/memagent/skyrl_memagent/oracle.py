"""``memagent_oracle``: a scripted policy that checks the scaffold, independently of model quality.

It is not a model, and not an inference engine: a benchmark fixture
(:mod:`skyrl_core.default_plugins.eval.scripted`) run by ``skyrl memagent scaffold-check CONFIG``; no config can name it and ``skyrl train`` refuses it. It reads each prompt it is given (token ids, decoded with the policy's tokenizer), finds the
question, its memory and the section on screen, and writes a ``next`` call whose memory is the old memory plus
every sentence of the section that names the answer or is one of the question's supporting facts (it looks the
question up in the HotpotQA rows, so it knows them). In the final context it calls ``finish`` with the gold
answer when its memory holds every supporting sentence, else ``finish("unknown")``. So it answers right exactly
when the chunks, the context resets and the memory carry the evidence through the whole document: a broken
chunker (a gold sentence split or lost), a reset that drops the memory, or a cap that cuts it shows up as a wrong
answer. ``forget=True`` (option ``forget``) writes only the current section's sentences, the control showing the
memory is what carries the answer.

Replies are Hermes ``<tool_call>`` JSON (``agent.parser: hermes``), ended by the template's end-of-turn token;
logprobs are None (it samples nothing).
"""

from __future__ import annotations

import json
import re
from typing import Any

from skyrl_core.inference.base import GenerationOutput, SamplingParams
from skyrl_core.default_plugins.eval.scripted import ScriptedPolicy

from .data import gold_sentences, read_rows

_QUESTION = re.compile(r"Question: (.*)")
_SECTION = re.compile(r"Section \d+ of \d+:\n(.*?)\n\nUpdate your memory", re.DOTALL)
_MEMORY = re.compile(r"Memory:\n(.*?)\n\n(?:\[Note|Section \d+ of|You have read all)", re.DOTALL)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n+")


class OraclePolicy(ScriptedPolicy):
    """The scripted policy. ``tokenizer``: the policy's; ``rows``: HotpotQA rows (question -> answer and
    supporting sentences); ``forget``: keep no memory across sections (the control)."""

    name = "memagent_oracle"

    def __init__(self, tokenizer: Any, rows: list[dict], forget: bool = False, max_context: int = 1 << 20) -> None:
        super().__init__()
        self.tokenizer = tokenizer
        self.max_context = max_context
        self.forget = forget
        self.gold = {row["question"].strip(): (row["answer"], gold_sentences(row)) for row in rows}
        self._eot = tokenizer.eos_token or ""

    def reply(self, prompt: str) -> str:
        """The reply text for a decoded prompt (the last user turn is read)."""
        user = prompt[prompt.rfind("Question: "):]
        q = _QUESTION.search(user)
        if q is None or q.group(1).strip() not in self.gold:
            return _call("finish", answer="unknown")
        answer, support = self.gold[q.group(1).strip()]
        mem = _MEMORY.search(user)
        memory = "" if mem is None or mem.group(1).startswith("(empty") else mem.group(1)
        section = _SECTION.search(user)
        if section is None:  # the final context
            found = all(s in memory for s in support)
            return _call("finish", answer=answer if found else "unknown")
        keep = [] if self.forget else [s for s in memory.split("\n") if s]
        text = section.group(1)
        for sentence in _SENTENCE_END.split(text):
            sentence = sentence.strip()
            if not sentence or sentence in keep:
                continue
            names_answer = len(answer) > 3 and answer.lower() in sentence.lower()
            if names_answer or any(s and s in sentence for s in support):
                keep.append(sentence)
        for s in support:  # a supporting sentence holding a split point is still copied whole when it is seen
            if s in text and s not in "\n".join(keep):
                keep.append(s)
        return _call("next", memory="\n".join(keep))

    async def generate(self, input_ids: list[int], sampling: SamplingParams) -> GenerationOutput:
        self.stats.started(len(input_ids))
        prompt = self.tokenizer.decode(list(input_ids), skip_special_tokens=True)
        text = self.reply(prompt) + self._eot
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        cut = len(ids) > sampling.max_tokens  # as an engine would: a reply over max_tokens is cut, "length"
        ids = ids[: sampling.max_tokens]
        self.stats.finished(len(ids))
        return GenerationOutput(output_ids=ids, output_logprobs=None, finish_reason="length" if cut else "stop",
                                text=self.tokenizer.decode(ids) if cut else text)


def _call(name: str, **arguments: Any) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments}, ensure_ascii=False)}\n</tool_call>"


def oracle_engine(config: Any) -> OraclePolicy:
    """The ``memagent_oracle`` policy for ``config``: the config's model's tokenizer, the rows of each memagent task's
    ``data.path`` (else the bundled rows); ``engine.options.forget`` (bool)."""
    from skyrl_core.errors import ConfigError
    from skyrl_core.default_plugins.engines.models import load_tokenizer

    opts = dict(config.engine.options or {})
    unknown = sorted(set(opts) - {"forget"})
    if unknown:
        raise ConfigError(f"engine.options {unknown} are not understood by the 'memagent_oracle' engine; valid: forget")
    rows: list[dict] = []
    paths = {getattr(spec, "path", None) for tc in config.tasks for spec in (tc.data, tc.eval_data) if spec}
    for path in paths or {None}:
        rows.extend(read_rows(path))
    return OraclePolicy(load_tokenizer(config.model), rows, forget=bool(opts.get("forget", False)))
