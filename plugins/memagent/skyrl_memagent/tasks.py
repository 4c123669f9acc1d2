"""The ``memagent_hotpotqa`` task and the ``memagent`` instruction builder: the messages of every context.

MemAgent's workflow (Yu et al. 2025, arXiv 2507.02259, Sec. 2): the model sees the problem, its memory and one
chunk; it writes the updated memory; the context is then rebuilt from scratch for the next chunk; after the last
chunk a final context (problem + memory, no chunk) asks for the answer. Here each memory update is a call of the
``next`` tool (:mod:`skyrl_memagent.tools`), whose result resets the conversation to the messages built below.
"""

from __future__ import annotations

import asyncio
from typing import Any

from skyrl_core import DataSpec, Instance, Task

from .data import ensure_document, load_ruler_hotpotqa

SYSTEM_PROMPT = (
    "You answer a question about a document that is too long to read at once. You read it one section at a "
    "time and keep a memory: short notes of every fact in the sections read so far that may help answer the "
    "question. After each section call the tool `next` with your whole updated memory (it replaces the old "
    "one); you will then see the question, your memory and the following section. When every section has been "
    "read you are asked for the final answer: call `finish` with it, a few words, as short as possible.")

NO_MEMORY = "(empty: nothing read yet)"
TRUNCATION_NOTE = ("[Note: your last memory was {n} tokens, over the limit of {limit}; only its first {limit} "
                   "tokens were kept. Write shorter notes.]")


def chunk_message(question: str, memory: str, chunk: str, index: int, total: int, note: str = "") -> str:
    """The user message of the context that shows chunk ``index`` (0-based) of ``total``."""
    parts = [f"Question: {question}", f"Memory:\n{memory or NO_MEMORY}"]
    if note:
        parts.append(note)
    parts.append(f"Section {index + 1} of {total}:\n{chunk}")
    parts.append(f"Update your memory with what this section says that helps answer the question, keep the "
                 f"notes that still matter, and call `next` with the whole new memory. "
                 f"{total - index - 1} section{'s' if total - index - 1 != 1 else ''} left after this one.")
    return "\n\n".join(parts)


def final_message(question: str, memory: str, total: int, note: str = "") -> str:
    """The user message of the final context (no chunk): answer from memory."""
    parts = [f"Question: {question}", f"Memory:\n{memory or NO_MEMORY}"]
    if note:
        parts.append(note)
    parts.append(f"You have read all {total} sections. Answer the question from your memory: call `finish` with "
                 f"the answer only (a name, a date, yes or no, a few words).")
    return "\n\n".join(parts)


def system_message(instance: Instance) -> dict:
    return {"role": "system", "content": SYSTEM_PROMPT}


# A worked example (``data.options.demonstration: true``): a made-up question and section, not from HotpotQA, so it
# can never leak an answer. Rendered by the core in the parser's call format (docs/agent.md, "Demonstrations").
_DEMO_QUESTION = "Which river flows through the capital of the country where the Tarn glacier lies?"
_DEMO_SECTION = ("Document 1: Tarn glacier\nThe Tarn glacier is a small glacier in the Alps of Veldoria.\n\n"
                 "Document 2: Lake Ossa\nLake Ossa is a reservoir built in 1961.")
_DEMO_MEMORY = "The Tarn glacier is in Veldoria. Still needed: the capital of Veldoria and its river."
DEMONSTRATION = {
    "next": [{"role": "user", "content": chunk_message(_DEMO_QUESTION, "", _DEMO_SECTION, 0, 3)},
             {"role": "assistant", "content": "",
              "tool_calls": [{"function": {"name": "next", "arguments": {"memory": _DEMO_MEMORY}}}]}],
    "finish": [{"role": "user", "content": final_message(_DEMO_QUESTION, _DEMO_MEMORY + " The capital of Veldoria "
                                                         "is Arlen, on the river Sel.", 3)},
               {"role": "assistant", "content": "",
                "tool_calls": [{"function": {"name": "finish", "arguments": {"answer": "Sel"}}}]}],
}


def context_messages(instance: Instance, user: str, final: bool = False) -> list[dict]:
    """The messages of one context: system, the worked example of its call when the instance asks for one
    (``demonstration``: ``next`` for a section, ``finish`` for the final context), then ``user``."""
    demo = DEMONSTRATION["finish" if final else "next"] if instance.data.get("demonstration") else []
    return [system_message(instance), *[dict(m) for m in demo], {"role": "user", "content": user}]


async def build_memagent_instructions(instance: Instance, task: Any = None) -> list[dict]:
    """System and first user message (question, empty memory, chunk 1 of N) for one instance. Builds the
    instance's document first when it has none (in a worker thread: tokenising is CPU work)."""
    chunks = (await asyncio.to_thread(ensure_document, instance)).chunks
    return context_messages(instance, chunk_message(instance.data["question"], "", chunks[0], 0, len(chunks)))


memagent_hotpotqa_task = Task(
    name="memagent_hotpotqa",
    description="RULER-HotpotQA: answer a HotpotQA question from a long document (gold + distractor paragraphs, "
                "target_tokens long) read chunk by chunk with a memory; reward 1 on exact match",
    load=load_ruler_hotpotqa,
    instruction_builder="memagent",
    tools=("next", "finish"),
    verifier="hotpotqa_em",
    runtime="sandbox",  # the tools run nothing; a python tool added by a config would run sandboxed
    default_data=DataSpec(split="test"),
)
