"""``skyrl serve`` in a real subprocess on 127.0.0.1, and the openai engine against it (no mocks).

The text-only server used for the fallback test is our own ``skyrl serve --text-only`` (it refuses token-id
prompts and returns no token ids). (A llama.cpp-server variant was removed: CI never installs llama-cpp-python,
so it could only ever skip.)
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import socket
import subprocess
import sys
import threading
import time

import pytest

torch = pytest.importorskip("torch")
httpx = pytest.importorskip("httpx")
pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from skyrl_core.inference import EngineError, SamplingParams  # noqa: E402

KEY = "test-key-123"
GREEDY = SamplingParams(temperature=0.0, max_tokens=16)


class Server:
    def __init__(self, *args: str) -> None:
        env = dict(os.environ, SKYRL_LOAD_PLUGINS="", PYTHONUNBUFFERED="1")
        self.proc = subprocess.Popen([sys.executable, "-m", "skyrl_core.cli", "serve", "--port", "0",
                                      "--device", "cpu", "--max-batch", "8", "--threads", "1", *args],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
        self.lines: list[str] = []
        deadline = time.time() + 120
        while time.time() < deadline:
            line = self.proc.stderr.readline()
            if not line:
                break
            self.lines.append(line)
            m = re.search(r"listening on (http://\S+)", line)
            if m:
                self.url = m.group(1)
                # keep draining stderr so the server never blocks on a full pipe
                threading.Thread(target=self._drain, daemon=True).start()
                break
        else:
            line = ""
        if not getattr(self, "url", None):
            self.stop()
            raise RuntimeError("skyrl serve did not start:\n" + "".join(self.lines))
        self._wait_ready()

    def _drain(self) -> None:
        for line in self.proc.stderr:
            self.lines.append(line)

    def _wait_ready(self) -> None:
        for _ in range(200):
            try:
                if httpx.get(self.url + "/health", timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                time.sleep(0.05)
        raise RuntimeError("skyrl serve never answered /health")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture(scope="module")
def server():
    s = Server("--api-key", KEY)
    yield s
    s.stop()


@pytest.fixture(scope="module")
def text_server():
    s = Server("--text-only")
    yield s
    s.stop()


@pytest.fixture(scope="module")
def local(hf_engine):
    """The same model in-process: the reference the server's answers must match token for token."""
    return hf_engine


def client_for(url: str, **kw):
    from skyrl_core.default_plugins.engines.openai import OpenAIEngine

    return OpenAIEngine(model="smollm2-135m-instruct", base_url=url, **kw)


def chat(tok, text: str) -> list[int]:
    out = tok.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True, tokenize=True)
    return list(out["input_ids"] if hasattr(out, "keys") else out)


def test_models_and_auth(server):
    r = httpx.get(server.url + "/v1/models", headers={"Authorization": f"Bearer {KEY}"})
    assert r.status_code == 200
    assert [m["id"] for m in r.json()["data"]] == ["smollm2-135m-instruct"]
    r = httpx.get(server.url + "/v1/models", headers={"Authorization": "Bearer wrong"})
    assert r.status_code == 401 and "Authorization" in r.json()["error"]["message"]


async def test_openai_engine_is_token_exact_against_skyrl_serve(server, local):
    eng = client_for(server.url, api_key=KEY)
    try:
        prompt = chat(local.tokenizer, "What is the capital of France?")
        remote = await eng.generate(prompt, GREEDY)
        ref = await local.generate(prompt, GREEDY)
        assert remote.output_ids == ref.output_ids
        assert remote.finish_reason == ref.finish_reason
        assert remote.text == ref.text
        assert torch.allclose(torch.tensor(remote.output_logprobs), torch.tensor(ref.output_logprobs), atol=1e-4)
        assert eng.token_prompts is True
        # stop strings: the stop text stays in the output, ids are the exact prefix
        stop = ref.text.split()[2]
        sp = SamplingParams(temperature=0.0, max_tokens=16, stop=(stop,))
        r_stop, l_stop = await eng.generate(prompt, sp), await local.generate(prompt, sp)
        assert r_stop.output_ids == l_stop.output_ids and r_stop.finish_reason == "stop" and stop in r_stop.text
        # max_tokens -> length
        short = await eng.generate(prompt, SamplingParams(temperature=0.0, max_tokens=3))
        assert short.finish_reason == "length" and short.output_ids == ref.output_ids[:3]
    finally:
        await eng.close()


async def test_concurrent_client_requests_are_batched_on_the_server(server, local):
    eng = client_for(server.url, api_key=KEY)
    headers = {"Authorization": f"Bearer {KEY}"}
    try:
        prompts = [chat(local.tokenizer, q) for q in ("Hi", "Name a color.", "Count to three.", "Why?",
                                                       "What is 2+2?", "Say yes.")]
        before = httpx.get(server.url + "/health", headers=headers).json()["stats"]
        outs = await asyncio.gather(*[eng.generate(p, GREEDY) for p in prompts])
        after = httpx.get(server.url + "/health", headers=headers).json()["stats"]
        assert all(o.output_ids for o in outs)
        assert after["max_batch_seen"] >= 2
        steps = after["decode_steps"] - before["decode_steps"]
        assert steps < sum(len(o.output_ids) for o in outs) - len(prompts)
    finally:
        await eng.close()


def test_raw_http_completions_and_chat_follow_vllm_fields(server, local):
    headers = {"Authorization": f"Bearer {KEY}"}
    prompt = chat(local.tokenizer, "Hi")
    r = httpx.post(server.url + "/v1/completions", headers=headers, timeout=120,
                   json={"model": "smollm2-135m-instruct", "prompt": local.tokenizer.decode(prompt), "max_tokens": 8,
                         "temperature": 0, "logprobs": 1, "return_token_ids": True})
    assert r.status_code == 200, r.text
    choice = r.json()["choices"][0]
    assert choice["prompt_token_ids"] == prompt  # text prompt tokenised to the same ids
    ref = asyncio.run(local.generate(prompt, SamplingParams(temperature=0.0, max_tokens=8)))
    assert choice["token_ids"] == ref.output_ids and choice["text"] == ref.text
    assert len(choice["logprobs"]["token_logprobs"]) == len(ref.output_ids)
    assert r.json()["usage"]["completion_tokens"] == len(ref.output_ids)

    r = httpx.post(server.url + "/v1/chat/completions", headers=headers, timeout=120,
                   json={"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 8, "temperature": 0,
                         "logprobs": True, "return_token_ids": True})
    assert r.status_code == 200, r.text
    data = r.json()
    assert data["prompt_token_ids"] == prompt  # the chat template was applied
    assert data["choices"][0]["message"] == {"role": "assistant", "content": ref.text}
    assert data["choices"][0]["token_ids"] == ref.output_ids
    assert len(data["choices"][0]["logprobs"]["content"]) == len(ref.output_ids)

    bad = httpx.post(server.url + "/v1/completions", headers=headers, json={"model": "gpt-9", "prompt": "x"})
    assert bad.status_code == 400 and "gpt-9" in bad.json()["error"]["message"]
    bad = httpx.post(server.url + "/v1/completions", headers=headers, json={"prompt": {"a": 1}})
    assert bad.status_code == 400 and "prompt" in bad.json()["error"]["message"]


async def test_text_only_fallback_against_skyrl_serve_text_only(text_server, local, caplog):
    """Our own server with --text-only stands in for a text-only server: token prompts get 400, no ids back."""
    r = httpx.post(text_server.url + "/v1/completions", json={"prompt": [1, 2, 3], "max_tokens": 2})
    assert r.status_code == 400 and "text-only" in r.json()["error"]["message"]
    eng = client_for(text_server.url)
    try:
        prompt = chat(local.tokenizer, "Name a color.")
        ref = await local.generate(prompt, GREEDY)
        with caplog.at_level(logging.WARNING, logger="skyrl_core.default_plugins.engines.openai"):
            first = await eng.generate(prompt, GREEDY)
            second = await eng.generate(prompt, GREEDY)
        warnings = [r for r in caplog.records if "NOT token-exact" in r.getMessage()]
        assert len(warnings) == 1  # one warning, not one per call
        assert eng.token_prompts is False
        assert first.text == ref.text and second.text == ref.text
        assert first.output_logprobs is None
        retokenised = local.tokenizer(ref.text, add_special_tokens=False)["input_ids"]
        eos = [local.tokenizer.eos_token_id] if ref.finish_reason == "stop" else []
        assert first.output_ids == retokenised + eos
        assert first.finish_reason == ref.finish_reason
        # a stop string comes back in the text even though the server cuts it (vLLM's stop_reason)
        stop = ref.text.split()[1]
        sp = SamplingParams(temperature=0.0, max_tokens=16, stop=(stop,))
        cut = await eng.generate(prompt, sp)
        assert cut.finish_reason == "stop" and cut.text.endswith(stop)
    finally:
        await eng.close()


async def test_token_prompts_forced_raises_on_text_only_server(text_server, local):
    eng = client_for(text_server.url, token_prompts="true")
    try:
        with pytest.raises(EngineError, match="token_prompts is true"):
            await eng.generate(chat(local.tokenizer, "Hi"), GREEDY)
    finally:
        await eng.close()


async def test_wrong_api_key_is_an_error_not_a_fallback(server, local):
    eng = client_for(server.url, api_key="wrong")
    try:
        with pytest.raises(EngineError, match="401"):
            await eng.generate(chat(local.tokenizer, "Hi"), GREEDY)
        assert eng.token_prompts is None
    finally:
        await eng.close()


async def test_unreachable_and_hanging_servers_raise_clear_errors():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead_port = s.getsockname()[1]
    eng = client_for(f"http://127.0.0.1:{dead_port}", retries=1)
    t0 = time.perf_counter()
    with pytest.raises(EngineError, match=r"failed after 2 attempt\(s\): Connect"):
        await eng.generate([1, 2, 3], GREEDY)
    assert time.perf_counter() - t0 < 10
    await eng.close()

    # a real listener that accepts connections and never answers
    hang = socket.socket()
    hang.bind(("127.0.0.1", 0))
    hang.listen(8)
    try:
        eng = client_for(f"http://127.0.0.1:{hang.getsockname()[1]}", timeout_s=0.5, retries=1)
        t0 = time.perf_counter()
        with pytest.raises(EngineError, match=r"timed out after 0.5 s"):
            await eng.generate([1, 2, 3], GREEDY)
        assert time.perf_counter() - t0 < 10
        assert eng.stats.errors == 1 and eng.stats.in_flight == 0
        await eng.close()
    finally:
        hang.close()


async def test_weights_pushed_through_load_weights_change_the_served_model(server, local):
    eng = client_for(server.url, api_key=KEY)
    try:
        prompt = chat(local.tokenizer, "What is 2+2?")
        before = await eng.generate(prompt, GREEDY)
        name = "model.norm.weight"
        original = local.model.state_dict()[name].clone()
        await eng.update_weights({name: -original})
        changed = await eng.generate(prompt, GREEDY)
        assert changed.output_ids != before.output_ids
        await eng.update_weights({name: original})
        assert (await eng.generate(prompt, GREEDY)).output_ids == before.output_ids
        with pytest.raises(EngineError, match="load_weights refused"):
            await eng.load_weights_from("/nonexistent/dir")
    finally:
        await eng.close()


def test_serve_command_is_registered_and_help_is_fast():
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "skyrl_core.cli", "serve", "--help"], capture_output=True, text=True,
                         env=dict(os.environ, SKYRL_LOAD_PLUGINS=""), timeout=60)
    assert out.returncode == 0, out.stderr
    assert "--max-batch" in out.stdout and "--text-only" in out.stdout
    assert time.perf_counter() - t0 < 10
    assert "torch" not in subprocess.run(
        [sys.executable, "-c", "import sys, skyrl_core.default_plugins.engines; print(' '.join(sys.modules))"],
        capture_output=True, text=True).stdout.split()
