"""An engine whose replies follow a per-question script, for the Ray tests (a module of its own, not
``conftest``: several test folders have a ``conftest`` module, and in one pytest session the name is taken)."""

from __future__ import annotations

import attrs

from skyrl_core.inference.base import Engine, GenerationOutput


class PromptScriptedEngine(Engine):
    """Wraps a real engine: each call runs it for one token, then replies ``script(prompt_text, turn)`` (turn =
    assistant turns already in the prompt), tokenised with the real tokenizer and ended with <|im_end|>. The reply
    depends only on the trajectory's own prompt, so concurrent trajectories get the same replies in any order."""

    name = "prompt-scripted"

    def __init__(self, inner: Engine, script) -> None:
        super().__init__()
        self.inner = inner
        self.tokenizer = inner.tokenizer
        self.max_context = inner.max_context
        self.script = script
        self.stats = inner.stats

    async def generate(self, input_ids, sampling):
        await self.inner.generate(input_ids, attrs.evolve(sampling, max_tokens=1))
        text = self.tokenizer.decode(input_ids)
        reply = self.script(text, text.count("<|im_start|>assistant") - 1)
        ids = self.tokenizer(reply, add_special_tokens=False)["input_ids"]
        ids = ids + [self.tokenizer.convert_tokens_to_ids("<|im_end|>")]
        return GenerationOutput(output_ids=ids, output_logprobs=[0.0] * len(ids), finish_reason="stop", text=reply)
