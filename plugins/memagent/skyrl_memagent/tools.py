"""The ``next(memory)`` tool: MemAgent's memory overwrite, as an agent-state-changing tool.

A call stores the model's updated memory (capped at the instance's ``memory_tokens`` tokens of the policy's
tokenizer; a longer one keeps its first ``memory_tokens`` tokens and the next context says so) and returns
``reset_messages``: the conversation becomes system + user(question, memory, chunk i+1 of N, progress), or, after
the last chunk, system + user(question, memory, "answer now"). The agent loop's context-reset path marks the
next LLM call ``new_context``, so each context's transitions are packed into their own training datum.

Everything the model writes is hostile: the memory is text placed into the next prompt, so chat-template control
tokens in it (``<|im_start|>system`` ...) are broken up before it is rendered, and a memory can never exceed its
cap however it is written. The tool keeps its position in ``ctx.tool_store("next")`` (``shown``: 0-based index
of the chunk on screen, N in the final context; ``truncations``; ``memory_tokens``: the tokens of each memory).

In the final context ``next`` ends the trajectory with its text as the answer (a model told to answer may still
write it as a memory); ``finish(answer)`` works at any point.
"""

from __future__ import annotations

import asyncio
from typing import Any

from skyrl_core import Tool, ToolContext, ToolResult

from .data import ensure_document
from .tasks import TRUNCATION_NOTE, chunk_message, context_messages, final_message

ZERO_WIDTH_SPACE = "\u200b"


def neutralise_control_tokens(text: str, tokenizer: Any) -> str:
    """``text`` with every special/added token string of ``tokenizer`` broken by a zero-width space after its
    first character, so a chat template renders it as plain text, never as a role or turn boundary."""
    specials = set(getattr(tokenizer, "all_special_tokens", None) or [])
    added = getattr(tokenizer, "get_added_vocab", None)
    if added is not None:
        specials |= set(added())
    for token in sorted((s for s in specials if len(s) > 1), key=len, reverse=True):
        if token in text:
            text = text.replace(token, token[0] + ZERO_WIDTH_SPACE + token[1:])
    return text


def cap_tokens(text: str, limit: int, tokenizer: Any) -> tuple[str, int]:
    """(the first ``limit`` tokens of ``text`` as text, the token count of ``text``)."""
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    if len(ids) <= limit:
        return text, len(ids)
    return tokenizer.decode(ids[:limit], skip_special_tokens=True), len(ids)


def _tokenizer(ctx: ToolContext) -> Any:
    tok = getattr(ctx.engine, "tokenizer", None)
    if tok is not None:
        return tok
    from .data import _tokenizer as load

    return load(ctx.instance.data.get("tokenizer") or "smollm2-135m-instruct")


async def next_chunk(args: dict, ctx: ToolContext) -> ToolResult:
    instance = ctx.instance
    data = getattr(instance, "data", None) or {}
    if "question" not in data or "target_tokens" not in data:
        return ToolResult(output="Error: `next` works only in a memagent task (an instance with a question and "
                                 "a document).", error=True)
    chunks = (await asyncio.to_thread(ensure_document, instance)).chunks  # built by the instruction builder
    store = ctx.tool_store("next")
    shown = int(store.get("shown", 0))
    total = len(chunks)
    tokenizer = _tokenizer(ctx)
    limit = int(data.get("memory_tokens", 256))
    memory = neutralise_control_tokens(str(args["memory"]), tokenizer).strip()
    memory, n_tokens = cap_tokens(memory, limit, tokenizer)
    cut = n_tokens > limit
    store["truncations"] = store.get("truncations", 0) + int(cut)
    store.setdefault("memory_tokens", []).append(n_tokens)
    meta = {"memory_tokens": n_tokens, "memory_truncated": cut}
    if shown >= total:
        return ToolResult(output=f"Finished with answer: {memory}", finish=True, answer=memory,
                          metadata={**meta, "answered_with": "next"})
    store["shown"] = shown + 1
    note = TRUNCATION_NOTE.format(n=n_tokens, limit=limit) if cut else ""
    question = data["question"]
    final = shown + 1 >= total
    if not final:
        user = chunk_message(question, memory, chunks[shown + 1], shown + 1, total, note)
        output = f"Memory saved ({n_tokens} tokens{', cut to ' + str(limit) if cut else ''}). Section {shown + 2} of {total} follows."
    else:
        user = final_message(question, memory, total, note)
        output = f"Memory saved ({n_tokens} tokens{', cut to ' + str(limit) if cut else ''}). All {total} sections read; answer now."
    return ToolResult(output=output, reset_messages=context_messages(instance, user, final),
                      metadata={**meta, "chunk": shown + 1})


next_tool = Tool(
    name="next",
    description=("Save your updated memory and move on: the context is replaced by the question, this memory and "
                 "the next section of the document (after the last section: a request for the final answer). "
                 "The memory replaces the old one, so include every note that still matters."),
    parameters={
        "type": "object",
        "properties": {"memory": {"type": "string",
                                  "description": "your whole updated memory: facts that help answer the question"}},
        "required": ["memory"],
        "additionalProperties": False,
    },
    handler=next_chunk,
)
