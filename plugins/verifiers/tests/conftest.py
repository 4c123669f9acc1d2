"""Load only this plugin from the installed third-party plugins, so other installed plugins never change what
these tests see; datasets are read from the shipped files only (no hub access)."""

import os

import pytest

os.environ["SKYRL_LOAD_PLUGINS"] = "skyrl-verifiers"
os.environ["HF_DATASETS_OFFLINE"] = "1"
os.environ["HF_HUB_OFFLINE"] = "1"


@pytest.fixture(scope="session")
def tiny_chat_model_dir(tmp_path_factory) -> str:
    """A randomly initialised 1-layer Llama (hidden 16) with SmolLM2's tokenizer and chat template, saved once:
    the real engine and gateway in seconds, with nothing learned."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from skyrl_core.default_plugins.engines.models import load_tokenizer

    root = tmp_path_factory.mktemp("tiny-chat-model")
    tok = load_tokenizer("smollm2-135m-instruct")
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=len(tok), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                   num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=2048,
                                   tie_word_embeddings=True, bos_token_id=tok.bos_token_id,
                                   eos_token_id=tok.eos_token_id)
    transformers.LlamaForCausalLM(cfg).save_pretrained(root)
    tok.save_pretrained(root)
    return str(root)
