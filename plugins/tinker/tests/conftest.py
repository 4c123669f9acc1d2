"""Fixtures for the tinker plugin's tests: a tiny model built here, the local Tinker-compatible server on
127.0.0.1 (started once per session, memory-capped, stopped at the end) and a client environment for it.

Only this plugin and its test fixture plugin are loaded from entry points. The hosted Tinker service is never
contacted: every client gets the local server's URL, and ``TINKER_BASE_URL`` is overridden for the session.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ["SKYRL_LOAD_PLUGINS"] = "tinker,tinker_test_fixture"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ["TINKER_TELEMETRY"] = "0"

EOS_PROBABILITY = 0.35  # per generated token, of the tiny model


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> str:
    """A 2-layer Llama (hidden 32) with SmolLM2's tokenizer and chat template, random weights except that its
    output layer gives EOS a probability of about ``EOS_PROBABILITY`` at every position: replies end by
    themselves (finish reason ``stop``, not a masked ``max_tokens``) after a geometric number of tokens, which
    is what the ``short_reply`` verifier of the fixture plugin rewards. Built once per session in seconds."""
    import math

    import torch
    import transformers

    from skyrl_core.default_plugins.engines.models import load_tokenizer

    root = tmp_path_factory.mktemp("tiny-tinker-model")
    tok = load_tokenizer("smollm2-135m-instruct")
    eos = tok.convert_tokens_to_ids("<|im_end|>")  # the chat template's end of turn, SmolLM2's generation EOS
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                   num_attention_heads=2, num_key_value_heads=1, head_dim=16,
                                   max_position_embeddings=2048, tie_word_embeddings=False,
                                   bos_token_id=tok.bos_token_id, eos_token_id=eos)
    model = transformers.LlamaForCausalLM(cfg).eval()
    with torch.no_grad():
        # a constant direction in the residual stream (dimension 0) that the final norm keeps large ...
        model.model.embed_tokens.weight[:, 0] = 1.0
        ids = torch.tensor([tok.encode("Calculate 48/2. The answer is 24, so the final result is 24.")])
        h0 = model(ids, output_hidden_states=True).hidden_states[-1][0, :, 0].mean().item()
        # ... read by EOS's output row: logit b with e^b / (e^b + V - 1) = EOS_PROBABILITY
        target = math.log(EOS_PROBABILITY / (1 - EOS_PROBABILITY) * (len(tok) - 1))
        model.lm_head.weight[eos, 0] = target / h0
        p_eos = torch.softmax(model(ids).logits[0], -1)[:, eos].mean().item()
    assert 0.2 < p_eos < 0.5, p_eos
    model.save_pretrained(root)
    tok.save_pretrained(root)
    return str(root)


def server_venv() -> Path | None:
    from skyrl_tinker.local_server import default_venv

    venv = default_venv()
    return venv if (venv / "bin" / "python").is_file() else None


# The server's memory cap for the tests (API + engine resident memory, MiB). Measured on this project's machine:
# ~2.2 GB steady with two training clients, and every compute_logprobs (the tests' adapter checks) adds a
# transient ~2 GB, since the JAX backend pads each sampling batch to sample_max_num_sequences rows and
# materialises [rows, padded length, 49k vocabulary] float32 logprobs: peaks of 4673 and 4689 MiB in
# test_resume_restores_the_saved_adapter. A 4500 MiB cap stopped the server there (issue #18); 6144 leaves
# headroom while still stopping a runaway server on a shared machine.
SERVER_MAX_RSS_MB = 6144


@pytest.fixture(scope="session")
def local_server(tiny_model_dir, tmp_path_factory):
    """The open Tinker server for the tiny model on 127.0.0.1, capped at ``SERVER_MAX_RSS_MB`` resident memory.
    Three LoRA slots are used (the run, the in-process resume, the CLI resume) plus the server's slot 0. Without
    a server venv (``plugins/tinker/ci.sh`` builds one) the test fails under CI and is skipped elsewhere."""
    from skyrl_tinker.local_server import LocalTinkerServer

    venv = server_venv()
    if venv is None:
        message = ("no Tinker server venv: run `skyrl tinker setup-server` or plugins/tinker/ci.sh "
                   "(or set SKYRL_TINKER_SERVER_VENV)")
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    server = LocalTinkerServer(tiny_model_dir, tmp_path_factory.mktemp("tinker-server"), venv=venv,
                               max_lora_adapters=4, max_lora_rank=8, train_micro_batch_size=2,
                               sample_max_num_sequences=8, loss_chunk_size=256, max_rss_mb=SERVER_MAX_RSS_MB)
    server.start()
    saved = {k: os.environ.get(k) for k in server.env()}
    os.environ.update(server.env())
    try:
        yield server
    finally:
        server.stop()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.fixture(autouse=True)
def server_still_up(request):
    """After each test that used the local server: fail by name when the server died during it (its memory
    watchdog or a crash), with its peak memory and the end of its log, instead of leaving the next call to hang."""
    yield
    if "local_server" not in request.fixturenames:
        return
    server = request.getfixturevalue("local_server")
    if server.proc is not None and server.proc.poll() is not None:
        pytest.fail(f"the local Tinker server died during {request.node.name} (exit {server.proc.returncode}, "
                    f"peak {server.peak_rss_mb()} MiB, cap {SERVER_MAX_RSS_MB} MiB); end of {server.log_path}:\n"
                    f"{server.log_tail()}")
