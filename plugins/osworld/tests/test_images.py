"""Screenshots from the real browser runtime through the core's image path (skyrl_core.multimodal): a text-only
engine gets the named stand-in, an image engine (the openai engine) gets the PNG as an ``image_url`` part on
/v1/chat/completions, and the saved trajectories and their HTML view hold the PNG.

The image engine talks to a small HTTP server on 127.0.0.1 that stands in for a vision-model server (none can be
downloaded here): it records each request and plays a fixed policy — move the mouse, then ``DONE`` — so the second
call is the one that carries the screenshot. The browser, the MiniWoB++ page and the screenshot are real.
"""

from __future__ import annotations

import io
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from skyrl_core.config import load_config
from skyrl_core.multimodal import part_png

EXAMPLE = "osworld:miniwob"  # shipped in skyrl_osworld/examples/, taken by name
SHOT = (160, 210)   # the MiniWoB++ area, one pixel per click coordinate


def tool_call(code: str) -> str:
    return "<tool_call>\n" + json.dumps({"name": "osworld_action", "arguments": {"code": code}}) + "\n</tool_call>"


def screenshots(trajectory: dict) -> list[bytes]:
    return [part_png(p) for m in trajectory["messages"] for p in m.get("images") or []]


async def test_a_text_only_engine_gets_the_stand_in_and_the_view_shows_the_png(pools, tmp_path):
    from PIL import Image

    from skyrl_core.default_plugins.eval.scaffold_check import run_scaffold_check
    from skyrl_osworld.scripted import scripted_engine

    cfg = load_config(EXAMPLE, ["eval_data.limit=2", "sampling.n_samples=1",
                                "tasks.0.runtime.options.observation=both"])
    metrics = await run_scaffold_check(cfg, tmp_path, scripted_engine(cfg))
    assert metrics["pass@1"] == 1.0                 # the stand-in costs the text view nothing
    rows = [json.loads(line) for line in (tmp_path / "trajectories.jsonl").read_text().splitlines()]
    for t in rows:
        [shot] = screenshots(t)
        assert Image.open(io.BytesIO(shot)).size == SHOT
        observation = next(m for m in t["messages"] if m.get("images"))
        assert observation["content"].endswith(
            f"\n[screenshot {SHOT[0]}x{SHOT[1]} omitted: engine 'miniwob_scripted' is text-only]")
    page = (tmp_path / "trajectories.html").read_text()
    assert page.count("<img class='shot' src='data:image/png;base64,") == 2


class _VisionStandIn(BaseHTTPRequestHandler):
    """``/v1/completions`` (token prompts, the first call: no image yet) answers a mouse move; ``/v1/chat/
    completions`` (a context holding a screenshot) answers DONE. Bodies are kept in ``server.requests``."""

    def do_POST(self):  # noqa: N802 - http.server's name
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.requests.append((self.path, body))
        if self.path == "/v1/chat/completions":
            choice = {"message": {"role": "assistant", "content": tool_call("DONE")}, "finish_reason": "stop"}
        else:
            choice = {"text": tool_call("pyautogui.moveTo(1, 1)"), "finish_reason": "stop"}
        data = json.dumps({"choices": [{"index": 0, **choice}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture
def vision_server():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _VisionStandIn)
    server.requests = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


async def test_the_openai_engine_receives_the_real_screenshot_as_an_image_part(pools, tmp_path, vision_server):
    from PIL import Image

    from skyrl_core.default_plugins.eval.run import run_eval

    cfg = load_config(EXAMPLE, ["engine.type=openai", f"engine.base_url=http://127.0.0.1:{vision_server.server_port}",
                                "engine.options.retries=0", "eval_data.limit=1", "sampling.n_samples=1",
                                "tasks.0.runtime.options.observation=both"])
    metrics = await run_eval(cfg, tmp_path)
    [t] = [json.loads(line) for line in (tmp_path / "trajectories.jsonl").read_text().splitlines()]
    assert (t["finish_reason"], t["answer"], t["turns"]) == ("finished", "DONE", 2), t.get("error")
    assert metrics["n_trajectories"] == 1
    paths = [path for path, _ in vision_server.requests]
    assert paths == ["/v1/completions", "/v1/chat/completions"]
    messages = vision_server.requests[1][1]["messages"]
    assert messages[0]["role"] == "system" and isinstance(messages[0]["content"], str)
    [with_image] = [m for m in messages if isinstance(m["content"], list)]
    text, image = with_image["content"]
    assert text["type"] == "text" and f"\n[screenshot {SHOT[0]}x{SHOT[1]} sent as an image]" in text["text"]
    assert "The page now:" in text["text"]                  # the text view still travels with the image
    sent = part_png(image)
    assert Image.open(io.BytesIO(sent)).size == SHOT
    # the trajectory keeps the PNG the engine saw, and the one after DONE
    assert len(screenshots(t)) == 2 and screenshots(t)[0] == sent
    # the query bar of the real page is yellow in the pixels sent
    assert Image.open(io.BytesIO(sent)).convert("RGB").getpixel((2, 5)) == (255, 255, 0)
