"""Side engines (the page summariser, the judge) and the two-stage page summary.

A side engine is ``policy`` (the trajectory's own engine, the default for the summariser) or a mapping
``{model: ..., engine: {type: ..., ...}}`` in the config's own shape, built once per process through the
registered engine factory (any engine: hf, openai, vllm, a plugin's), so the summariser or judge may be a
different model from the policy.

Two-stage summary (SkyRL-Agent's deep-research setup, after WebSailor/WebDancer): a page longer than the
threshold is cut into chunks of ``chunk_chars`` characters on paragraph boundaries; stage 1 asks the engine for
the facts each chunk holds about the goal; stage 2 merges the notes into one answer. The citation is added by
code, never left to the model: every note is tagged ``[n]`` and the result ends with the source URL and the
chunks it used, so a summary always keeps its source.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

_ENGINES: dict[str, Any] = {}
_CHATS: dict[int, Any] = {}


class SideEngineError(ValueError):
    """A side-engine setting is malformed; the message names the option and what is valid."""


def side_engine_key(spec: Any) -> str:
    return json.dumps(spec, sort_keys=True, default=str)


async def side_engine(spec: Any, policy_engine: Any, option: str) -> Any:
    """The engine ``spec`` names: ``policy`` (or None) -> ``policy_engine``; a mapping with ``model`` and
    ``engine`` -> built once per process by the registered factory. Raises SideEngineError naming ``option``."""
    if spec in (None, "policy"):
        if policy_engine is None:
            raise SideEngineError(f"runtime option '{option}: policy' needs the trajectory's engine, and there is none")
        return policy_engine
    if not isinstance(spec, dict) or "model" not in spec:
        raise SideEngineError(f"runtime option '{option}' must be 'policy' or a mapping with 'model' and "
                              f"optionally 'engine' ({{type: hf|openai|vllm, ...}}), got {spec!r}")
    key = side_engine_key(spec)
    if key not in _ENGINES:
        from skyrl_core.config import config_from_dict
        from skyrl_core.plugins import get_registry

        bad = sorted(set(spec) - {"model", "engine"})
        if bad:
            raise SideEngineError(f"runtime option '{option}': unknown key(s) {', '.join(bad)}; valid: model, engine")
        config = config_from_dict({"model": spec["model"], "engine": spec.get("engine", {"type": "hf"})})
        factory = get_registry().get("inference_engines", config.engine.type)
        _ENGINES[key] = await asyncio.to_thread(factory, config)
    return _ENGINES[key]


def chat_for(engine: Any):
    """The (probed once) chat format of an engine's tokenizer."""
    from skyrl_core.default_plugins.chat.template import ChatFormat

    if id(engine) not in _CHATS:
        _CHATS[id(engine)] = ChatFormat(engine.tokenizer)
    return _CHATS[id(engine)]


async def complete(engine: Any, messages: list[dict], max_tokens: int = 256) -> str:
    """One greedy chat completion from ``engine``: text of at most ``max_tokens`` tokens."""
    from skyrl_core.inference.base import SamplingParams

    chat = chat_for(engine)
    ids = chat.render_ids(messages)
    out = await engine.generate(ids, SamplingParams(temperature=0.0, max_tokens=max_tokens, logprobs=False))
    return (out.text if out.text is not None else chat.decode(out.output_ids)).strip()


def chunk_text(text: str, chunk_chars: int) -> list[str]:
    """``text`` cut into pieces of at most ``chunk_chars`` characters, on paragraph then sentence boundaries
    where possible (a longer sentence is cut hard)."""
    import re

    if chunk_chars < 100:
        raise ValueError(f"chunk_chars must be at least 100, got {chunk_chars}")
    pieces = [p for p in re.split(r"\n\s*\n|(?<=[.!?])\s+", text) if p.strip()]
    chunks: list[str] = []
    current = ""
    for piece in pieces:
        while len(piece) > chunk_chars:
            if current:
                chunks.append(current)
                current = ""
            chunks.append(piece[:chunk_chars])
            piece = piece[chunk_chars:]
        if current and len(current) + 1 + len(piece) > chunk_chars:
            chunks.append(current)
            current = ""
        current = f"{current} {piece}".strip() if current else piece
    if current:
        chunks.append(current)
    return chunks


CHUNK_PROMPT = ("Goal: {goal}\n\nBelow is part {n} of {total} of the page {url}. Write the facts from it that "
                "help with the goal, in at most three sentences. If it has none, write NONE.\n\n{chunk}")
MERGE_PROMPT = ("Goal: {goal}\n\nNotes taken from the page {url}, each tagged with its part:\n{notes}\n\n"
                "Combine them into one short summary for the goal. Keep the [n] tags of the facts you use.")


async def two_stage_summary(engine: Any, url: str, title: str, text: str, goal: str, chunk_chars: int = 2000,
                            max_tokens: int = 192) -> dict[str, Any]:
    """Summarise a long page for ``goal``: per-chunk notes (stage 1, concurrently), then one merge (stage 2).
    Returns ``{"summary": str, "chunks": int, "used": [chunk numbers with notes]}``; the summary ends with
    ``Source: <url> (parts ...)``."""
    chunks = chunk_text(text, chunk_chars)
    notes = await asyncio.gather(*(complete(engine, [{"role": "user", "content": CHUNK_PROMPT.format(
        goal=goal, n=i + 1, total=len(chunks), url=url, chunk=chunk)}], max_tokens) for i, chunk in enumerate(chunks)))
    kept = [(i + 1, n) for i, n in enumerate(notes) if n and n.strip().upper().rstrip(".") != "NONE"]
    if not kept:
        summary = f"Nothing on this page ({title or url}) answers the goal."
    elif len(kept) == 1:
        summary = f"{kept[0][1]} [{kept[0][0]}]"
    else:
        merged = await complete(engine, [{"role": "user", "content": MERGE_PROMPT.format(
            goal=goal, url=url, notes="\n".join(f"[{i}] {n}" for i, n in kept))}], max_tokens)
        summary = merged or "\n".join(f"[{i}] {n}" for i, n in kept)
    parts = ", ".join(str(i) for i, _ in kept) or "none"
    return {"summary": f"{summary}\n\nSource: {url} (parts used: {parts} of {len(chunks)})", "chunks": len(chunks),
            "used": [i for i, _ in kept]}
