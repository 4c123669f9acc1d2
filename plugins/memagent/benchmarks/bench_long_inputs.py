"""Long inputs cost linear time: build one RULER-HotpotQA document at 8k, 28k, 56k and 112k tokens (SmolLM2's
tokenizer) and walk the whole scaffold over it — every ``next`` call's context rebuild plus the chat-template
tokenisation of the new context — timing each part.

    python plugins/memagent/benchmarks/bench_long_inputs.py [--chunk-tokens 4096] [--repeats 3]

Prints a table (seconds, and microseconds per document token: flat = linear) and writes ``results.json`` beside
it unless ``--no-save``. The piece-token cache is warmed first (one tokenisation of the 800 paragraphs, paid once
per process).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from pathlib import Path

TARGETS = (8192, 28672, 57344, 114688)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--chunk-tokens", type=int, default=4096)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--no-save", action="store_true")
    args = ap.parse_args()

    from rich.console import Console
    from rich.table import Table

    from skyrl_core import DataSpec, ToolContext
    from skyrl_core.default_plugins.chat.template import ChatFormat
    from skyrl_memagent import data as mdata
    from skyrl_memagent.tasks import build_memagent_instructions, memagent_hotpotqa_task
    from skyrl_memagent.tools import next_tool

    tokenizer = mdata._tokenizer(mdata.DEFAULT_TOKENIZER)
    chat = ChatFormat(tokenizer)
    warm = time.perf_counter()
    mdata.ensure_document(memagent_hotpotqa_task.select(DataSpec(split="test", limit=1))[0])
    warm = time.perf_counter() - warm
    rows = []
    for target in TARGETS:
        spec = DataSpec(split="test", limit=1, options={"target_tokens": target, "chunk_tokens": args.chunk_tokens,
                                                         "memory_tokens": 256})
        build_s, walk_s = [], []
        for _ in range(args.repeats):
            [inst] = memagent_hotpotqa_task.select(spec)
            mdata._documents.clear()
            t0 = time.perf_counter()
            doc = mdata.ensure_document(inst)
            build_s.append(time.perf_counter() - t0)

            async def walk() -> int:
                ctx = ToolContext(instance=inst)
                msgs = await build_memagent_instructions(inst)
                ids = chat.start(msgs)
                longest = len(ids)
                for k in range(len(doc.chunks)):
                    result = await next_tool.call({"memory": f"notes after section {k + 1}"}, ctx)
                    ids = chat.start(result.reset_messages)
                    longest = max(longest, len(ids))
                return longest

            t0 = time.perf_counter()
            longest = asyncio.run(walk())
            walk_s.append(time.perf_counter() - t0)
        b, w = statistics.median(build_s), statistics.median(walk_s)
        rows.append({"target_tokens": target, "doc_tokens": doc.tokens, "chunks": len(doc.chunks),
                     "build_s": b, "rebuild_s": w, "build_us_per_token": 1e6 * b / doc.tokens,
                     "rebuild_us_per_token": 1e6 * w / doc.tokens, "longest_context_tokens": longest,
                     "repeated_paragraphs": doc.repeated_paragraphs})
    table = Table(title=f"memagent: long inputs (chunk_tokens={args.chunk_tokens}, median of {args.repeats})")
    for col in ("doc tokens", "chunks", "build s", "µs/token", "rebuild s", "µs/token", "longest context"):
        table.add_column(col, justify="right")
    for r in rows:
        table.add_row(str(r["doc_tokens"]), str(r["chunks"]), f"{r['build_s']:.2f}", f"{r['build_us_per_token']:.1f}",
                      f"{r['rebuild_s']:.2f}", f"{r['rebuild_us_per_token']:.1f}", str(r["longest_context_tokens"]))
    console = Console()
    console.print(table)
    console.print(f"piece-token cache warm-up (once per process): {warm:.1f} s")
    if not args.no_save:
        out = Path(__file__).with_name("results.json")
        out.write_text(json.dumps({"chunk_tokens": args.chunk_tokens, "warmup_s": warm, "rows": rows}, indent=2))
        console.print(f"wrote {out}")


if __name__ == "__main__":
    main()
