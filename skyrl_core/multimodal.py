"""Image observations: a tool result's images, on their way to the engine and into the trajectory view.

A tool returns images in ``ToolResult.images``: OpenAI-style content parts, ``{"type": "image_url",
"image_url": {"url": "data:image/png;base64,..."}}`` (build one with :func:`image_part` from PNG bytes). The agent
loop turns the result into one observation message (:func:`observation_message`) whose ``content`` stays text
(so chat templates, hints and token accounting work unchanged) and whose ``images`` key keeps the parts:

- an engine that accepts images (``engine.accepts_images``: the ``openai`` engine, unless
  ``engine.options.images: false``) is called with the live conversation as OpenAI chat messages, each image
  part placed after its message's text (:func:`openai_messages`), through its ``generate_messages``; the text
  carries the marker ``[screenshot 1280x720 sent as an image]``;
- a text-only engine (``hf``, ``vllm``, scripted engines) gets a text stand-in in its place:
  ``[screenshot 1280x720 omitted: engine 'hf' is text-only]``, so the model knows an image was there and what
  size it was.

Either way the message keeps its ``images``, so ``trajectories.jsonl`` holds the PNG and the HTML and Markdown
trajectory views (the viewer built-in, :mod:`skyrl_core.default_plugins.viewer.render`) show it. Token ids recorded for an image call are the text rendering
(with the marker), not the server's image tokens: image prompts are not token-exact training data.
"""

from __future__ import annotations

import base64
import binascii
import struct
from typing import Any

DATA_URL_PREFIX = "data:image/png;base64,"
_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def image_part(png: bytes) -> dict:
    """An OpenAI image content part holding ``png`` (PNG bytes) as a base64 data URL. Raises ValueError when the
    bytes are not a PNG."""
    png_size(png)
    return {"type": "image_url", "image_url": {"url": DATA_URL_PREFIX + base64.b64encode(png).decode("ascii")}}


def png_size(png: bytes) -> tuple[int, int]:
    """(width, height) in pixels from a PNG's IHDR chunk. Raises ValueError when ``png`` is not a PNG."""
    if len(png) < 24 or not png.startswith(_PNG_SIGNATURE) or png[12:16] != b"IHDR":
        raise ValueError(f"not a PNG image ({len(png)} bytes starting {png[:8]!r}); image parts must be PNG")
    width, height = struct.unpack(">II", png[16:24])
    return int(width), int(height)


def part_png(part: Any) -> bytes:
    """The PNG bytes of an image part made by :func:`image_part`. Raises ValueError naming what is valid for any
    other value (a tool's images are hostile input too: only base64 PNG data URLs are accepted)."""
    url = part.get("image_url", {}).get("url") if isinstance(part, dict) and part.get("type") == "image_url" \
        else None
    if not isinstance(url, str) or not url.startswith(DATA_URL_PREFIX):
        raise ValueError(f"an image part must be {{'type': 'image_url', 'image_url': {{'url': "
                         f"'{DATA_URL_PREFIX}...'}}}}, got {str(part)[:120]}")
    try:
        png = base64.b64decode(url[len(DATA_URL_PREFIX):], validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("an image part's data URL is not valid base64") from None
    png_size(png)
    return png


def accepts_images(engine: Any) -> bool:
    """Whether ``engine`` takes image parts: the engine contract's optional ``accepts_images`` is true and it has
    the optional ``generate_messages(messages, sampling)`` (:mod:`skyrl_core.contracts`)."""
    from .contracts import member

    return bool(member(engine, "inference_engines", "accepts_images")) and \
        callable(member(engine, "inference_engines", "generate_messages"))


def engine_name(engine: Any) -> str:
    from .contracts import display_name

    return display_name(engine, "inference_engines")


def observation_message(role: str, text: str, images: list[dict] | None, engine: Any) -> dict:
    """The observation message for a tool's ``text`` and ``images``: ``{"role", "content": text + one marker or
    stand-in line per image}`` plus ``"images": [part, ...]`` when there are images. An image part that is not a
    base64 PNG data URL is dropped and named in the text instead (it never reaches an engine)."""
    if not images:
        return {"role": role, "content": text}
    kept, lines = [], []
    image_engine = accepts_images(engine)
    for part in images:
        try:
            width, height = png_size(part_png(part))
        except ValueError as exc:
            lines.append(f"[image dropped: {exc}]")
            continue
        kept.append(part)
        if image_engine:
            lines.append(f"[screenshot {width}x{height} sent as an image]")
        else:
            lines.append(f"[screenshot {width}x{height} omitted: engine '{engine_name(engine)}' is text-only]")
    message = {"role": role, "content": "\n".join([text, *lines]) if text else "\n".join(lines)}
    if kept:
        message["images"] = kept
    return message


def has_images(messages: list[dict]) -> bool:
    return any(m.get("images") for m in messages)


def openai_messages(messages: list[dict]) -> list[dict]:
    """``messages`` as OpenAI chat messages: role and content only; a message with ``images`` gets a content
    list, its text part first and then its image parts. skyrl's own keys (``context_reset``, ...) are dropped."""
    out = []
    for m in messages:
        content = m.get("content")
        if m.get("images"):
            text = [{"type": "text", "text": content}] if content else []
            content = text + [dict(p) for p in m["images"]]
        out.append({"role": m.get("role"), "content": "" if content is None else content})
    return out
