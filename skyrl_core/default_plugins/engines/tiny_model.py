"""A tiny random chat model and a one-thread CPU engine, for the tests and benchmarks of the core and the plugins.

:func:`save_tiny_chat_model` writes a randomly initialised 1-layer Llama (hidden size 16) with SmolLM2's tokenizer
and chat template (seeded: the same weights in every process): the real rollout, gateway and training paths run on
it in seconds, with nothing learned. :func:`cpu_engine` holds an :class:`~skyrl_core.default_plugins.engines.hf.HFEngine`
on the CPU with one intra-op thread while it lives (torch's default threads spin and crawl on a shared CI host,
docs/engines.md), restoring the previous setting afterwards. Both import torch and transformers when called.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any, Iterator


def save_tiny_chat_model(root: str | Path) -> str:
    """Save the tiny model and SmolLM2's tokenizer into ``root`` (created if needed); returns ``root`` as a str."""
    import torch
    import transformers

    from .models import load_tokenizer

    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    tok = load_tokenizer("smollm2-135m-instruct")
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=len(tok), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                   num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=2048,
                                   tie_word_embeddings=True, bos_token_id=tok.bos_token_id,
                                   eos_token_id=tok.eos_token_id)
    transformers.LlamaForCausalLM(cfg).save_pretrained(root)
    tok.save_pretrained(root)
    return str(root)


@contextlib.contextmanager
def cpu_engine(**kwargs: Any) -> Iterator[Any]:
    """``HFEngine(device="cpu", **kwargs)`` with one torch thread while it lives; closed on exit."""
    import torch

    from .hf import HFEngine

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    engine = HFEngine(device="cpu", **kwargs)
    try:
        yield engine
    finally:
        asyncio.run(engine.close())
        torch.set_num_threads(threads)
