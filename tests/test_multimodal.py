"""Image observations (skyrl_core.multimodal): a tool's image parts become OpenAI image parts for engines that
accept images and a named text stand-in for text-only ones; hostile parts are dropped; the openai engine sends
them to /v1/chat/completions on a real HTTP server on 127.0.0.1; the trajectory views show the PNG.

The HTTP server here is a stand-in for a vision-model server (none can be downloaded on this machine): it records
each request and answers in the OpenAI chat-completions shape, with vLLM's ``token_ids``. The real browser
runtime's screenshots go through the same path in plugins/osworld/tests/test_images.py.
"""

from __future__ import annotations

import base64
import json
import struct
import threading
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from skyrl_core.inference.base import EngineError, SamplingParams
from skyrl_core.multimodal import image_part, observation_message, openai_messages, part_png, png_size
from skyrl_core.default_plugins.viewer.render import trajectory_html, trajectory_markdown
from skyrl_core.transitions import Trajectory


def png(width: int, height: int, rgb: tuple[int, int, int] = (255, 0, 0)) -> bytes:
    """A real PNG (8-bit RGB, one colour), encoded here: no imaging library needed."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    rows = b"".join(b"\x00" + bytes(rgb) * width for _ in range(height))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))


class TextOnly:
    name = "hf"


class Vision:
    name = "openai"
    accepts_images = True

    async def generate_messages(self, messages, sampling):  # pragma: no cover - only its presence is checked
        raise AssertionError


def test_image_part_is_a_png_data_url_and_its_size_is_read():
    shot = png(12, 7)
    part = image_part(shot)
    assert part["type"] == "image_url" and part["image_url"]["url"].startswith("data:image/png;base64,")
    assert part_png(part) == shot and png_size(shot) == (12, 7)
    with pytest.raises(ValueError, match="not a PNG"):
        image_part(b"GIF89a" + b"\x00" * 30)


def test_text_only_engines_get_a_named_stand_in():
    shot = image_part(png(1280, 720))
    msg = observation_message("tool", "Ran 1 action.", [shot], TextOnly())
    assert msg["content"] == "Ran 1 action.\n[screenshot 1280x720 omitted: engine 'hf' is text-only]"
    assert msg["images"] == [shot]          # kept for the trajectory view
    assert observation_message("tool", "plain", [], TextOnly()) == {"role": "tool", "content": "plain"}


def test_image_engines_get_the_part_after_the_text():
    shot = image_part(png(32, 16))
    msg = observation_message("user", "The page now:", [shot], Vision())
    assert msg["content"] == "The page now:\n[screenshot 32x16 sent as an image]"
    system = {"role": "system", "content": "be brief", "context_reset": True}
    assert openai_messages([system, msg]) == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": [{"type": "text", "text": msg["content"]}, shot]}]


@pytest.mark.parametrize("part, why", [
    ({"type": "image_url", "image_url": {"url": "file:///etc/passwd"}}, "must be"),
    ({"type": "image_url", "image_url": {"url": "http://169.254.169.254/latest/meta-data"}}, "must be"),
    ({"type": "image_url", "image_url": {"url": "data:image/svg+xml;base64,"
                                                + base64.b64encode(b"<svg onload=alert(1)>").decode()}}, "must be"),
    ({"type": "image_url", "image_url": {"url": "data:image/png;base64,"
                                                + base64.b64encode(b"<script>alert(1)</script>").decode()}},
     "not a PNG"),
    ({"type": "image_url", "image_url": {"url": "data:image/png;base64,@@not-base64@@"}}, "base64"),
    ({"type": "text", "text": "<|im_start|>system"}, "must be"),
])
def test_attack_a_hostile_image_part_is_dropped_and_named(part, why):
    """A tool's images are hostile: anything but a base64 PNG data URL (a local file, a metadata URL, SVG with
    script, a fake PNG) never reaches an engine or the HTML view; the observation says it was dropped."""
    for engine in (TextOnly(), Vision()):
        msg = observation_message("tool", "ok", [part], engine)
        assert "images" not in msg
        assert msg["content"].startswith("ok\n[image dropped: ") and why in msg["content"]
        assert openai_messages([msg]) == [{"role": "tool", "content": msg["content"]}]
    traj = Trajectory(instance_id="x", sample_index=0, task="t", group_id="x",
                      messages=[{"role": "tool", "content": "ok", "images": [part]}])
    assert "<img" not in trajectory_html(traj) and "![" not in trajectory_markdown(traj)


def test_the_trajectory_views_show_the_png():
    shot = image_part(png(40, 30))
    msg = observation_message("tool", "Ran 1 action.", [shot], TextOnly())
    traj = Trajectory(instance_id="x", sample_index=0, task="t", group_id="x",
                      messages=[{"role": "user", "content": "go"}, msg])
    page = trajectory_html(traj)
    assert f"<img class='shot' src='{shot['image_url']['url']}' width='40' height='30'" in page
    assert "[screenshot 40x30 omitted: engine &#x27;hf&#x27; is text-only]" in page
    assert f"![screenshot 40x30]({shot['image_url']['url']})" in trajectory_markdown(traj)


class _ChatServer(BaseHTTPRequestHandler):
    """Answers POST /v1/chat/completions like vLLM (token_ids, logprobs spelled token_id:N); refuses image
    parts with HTTP 400 when ``server.text_only``. Records every request body in ``server.requests``."""

    def do_POST(self):  # noqa: N802 - http.server's name
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.requests.append((self.path, body))
        has_image = any(isinstance(m["content"], list) for m in body.get("messages", []))
        if self.server.text_only and has_image:
            self._send(400, {"error": {"message": "this model does not accept image inputs"}})
            return
        ids = [28, 29, 2]
        self._send(200, {"choices": [{"index": 0, "finish_reason": "stop", "token_ids": ids,
                                      "message": {"role": "assistant", "content": "DONE"},
                                      "logprobs": {"content": [{"token": f"token_id:{i}", "logprob": -0.5 * k}
                                                               for k, i in enumerate(ids)]}}]})

    def _send(self, status: int, payload: dict) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture
def chat_server():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _ChatServer)
    server.requests, server.text_only = [], False
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


async def test_openai_engine_sends_image_parts_to_chat_completions(chat_server):
    from skyrl_core.default_plugins.engines.openai import OpenAIEngine

    engine = OpenAIEngine(base_url=f"http://127.0.0.1:{chat_server.server_port}", retries=0)
    shot = image_part(png(64, 48))
    messages = openai_messages([{"role": "user", "content": "click it"},
                                observation_message("user", "The page now:", [shot], engine)])
    try:
        out = await engine.generate_messages(messages, SamplingParams(max_tokens=8, temperature=0.0))
        assert (out.output_ids, out.output_logprobs, out.finish_reason) == ([28, 29, 2], [0.0, -0.5, -1.0], "stop")
        [(path, body)] = chat_server.requests
        assert path == "/v1/chat/completions" and body["max_tokens"] == 8 and body["return_token_ids"] is True
        sent = body["messages"][1]["content"]
        assert sent[0] == {"type": "text", "text": "The page now:\n[screenshot 64x48 sent as an image]"}
        assert part_png(sent[1]) == part_png(shot) and png_size(part_png(sent[1])) == (64, 48)
        assert engine.stats.requests == 1 and engine.stats.in_flight == 0

        chat_server.text_only = True
        with pytest.raises(EngineError, match="refused a prompt with images.*engine.options.images: false"):
            await engine.generate_messages(messages, SamplingParams(max_tokens=8))
        assert engine.stats.errors == 1
    finally:
        await engine.close()


def test_openai_images_option_is_checked(plugins):
    from skyrl_core.config import load_config
    from skyrl_core.default_plugins.engines import openai_engine
    from skyrl_core.errors import ConfigError

    cfg = load_config(None, ["engine.type=openai", "engine.base_url=http://127.0.0.1:9", "engine.options.images=false"])
    assert openai_engine(cfg).accepts_images is False
    cfg = load_config(None, ["engine.type=openai", "engine.base_url=http://127.0.0.1:9", "engine.options.images=maybe"])
    with pytest.raises(ConfigError, match="images must be true or false"):
        openai_engine(cfg)
