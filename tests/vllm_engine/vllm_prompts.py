"""Prompts shared by the vllm engine tests."""

from __future__ import annotations

GREEDY_MAX = 16
QUESTIONS = ["What is 2+2?", "Name a color.", "Write a haiku about the sea.",
             "Say something nice about cats, dogs and birds in one sentence."]


def chat_ids(tokenizer, text: str) -> list[int]:
    out = tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                        tokenize=True)
    return list(out["input_ids"] if hasattr(out, "keys") else out)


def odd_ids(tokenizer, text: str) -> list[int]:
    """A chat prompt whose user text is tokenised one character per token: ids no tokenizer would produce from the
    decoded text, so an engine that decoded and re-encoded the prompt would run a different one."""
    head = chat_ids(tokenizer, "\x00")
    cut = head.index(tokenizer("\x00", add_special_tokens=False)["input_ids"][0])
    chars = [t for ch in text for t in tokenizer(ch, add_special_tokens=False)["input_ids"]]
    return head[:cut] + chars + head[cut + 1:]
