"""The local web's figures: index build, BM25 recall of gold paragraphs, and per-call latency of each path
(in-process BM25, the Serper client over HTTP, HTTP + trafilatura page reads, the Jina client, cache hits).

    python plugins/deep-research/benchmarks/web_bench.py [--calls 40]

Prints a table and writes nothing. Latencies are medians over ``--calls`` calls on distinct gold titles.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=40)
    args = parser.parse_args()

    from rich.console import Console
    from rich.table import Table

    from skyrl_deep_research.corpus import Corpus, documents_from_hotpotqa, hotpotqa_rows, title_to_path
    from skyrl_deep_research.providers import HttpReader, JinaReader, LocalSearch, SerperSearch
    from skyrl_deep_research.runtime import WebRuntime
    from skyrl_core.runtime import RuntimeSpec
    from skyrl_deep_research.server import LocalWeb

    rows = hotpotqa_rows()
    t0 = time.perf_counter()
    corpus = Corpus(documents_from_hotpotqa(rows))
    build_s = time.perf_counter() - t0
    golds = sorted({t for r in rows for t in r["supporting_facts"]["title"]})
    top1 = sum(corpus.search(t, 5)[0].document.title == t for t in golds)
    top5 = sum(t in [h.document.title for h in corpus.search(t, 5)] for t in golds)
    sample = golds[: args.calls]

    web = LocalWeb(corpus, api_key="bench")
    web.start()

    async def median_ms(fn) -> float:
        times = []
        for title in sample:
            t = time.perf_counter()
            await fn(title)
            times.append(time.perf_counter() - t)
        return 1000 * statistics.median(times)

    async def run() -> list[tuple[str, float]]:
        local = LocalSearch(corpus)
        serper = SerperSearch(base_url=web.base_url, api_key="bench")
        http = HttpReader()
        jina = JinaReader(base_url=web.base_url + "/reader")
        with tempfile.TemporaryDirectory() as tmp:
            rt = WebRuntime(RuntimeSpec(type="web", options={
                "search": {"provider": "serper", "base_url": web.base_url, "api_key": "bench"}, "open_page": "http",
                "allow_hosts": [f"127.0.0.1:{web.port}"], "cache": {"path": str(Path(tmp) / "c.sqlite")}}))
            await rt.start()
            out = [
                ("search, in-process BM25 (local)", await median_ms(lambda t: local.search(t, 5))),
                ("search, Serper client over HTTP (local_web)", await median_ms(lambda t: serper.search(t, 5))),
                ("open_page, HTTP + trafilatura (local_web)",
                 await median_ms(lambda t: http.open(web.base_url + title_to_path(t)))),
                ("open_page, Jina client (local stand-in)",
                 await median_ms(lambda t: jina.open("https://en.wikipedia.org" + title_to_path(t)))),
                ("search via the runtime, cache miss", await median_ms(lambda t: rt.search(t, 5))),
                ("search via the runtime, cache hit", await median_ms(lambda t: rt.search(t, 5))),
                ("open_page via the runtime, cache miss",
                 await median_ms(lambda t: rt.open_page(web.base_url + title_to_path(t), "x"))),
                ("open_page via the runtime, cache hit",
                 await median_ms(lambda t: rt.open_page(web.base_url + title_to_path(t), "x"))),
            ]
            out.append(("cache: hits / misses / saved s",
                        f"{rt.metrics['cache_hits']} / {rt.metrics['cache_misses']} / {rt.metrics['cache_saved_s']:.2f}"))
            return out

    results = asyncio.run(run())
    web.stop()

    table = Table(title=f"deep-research local web: {len(corpus)} pages, {len(golds)} gold titles")
    table.add_column("figure")
    table.add_column("value", justify="right")
    table.add_row("BM25 index build (s)", f"{build_s:.2f}")
    table.add_row("gold title query: gold page first", f"{top1}/{len(golds)}")
    table.add_row("gold title query: gold page in top 5", f"{top5}/{len(golds)}")
    for name, value in results:
        table.add_row(name + ("" if isinstance(value, str) else " (ms, median)"),
                      value if isinstance(value, str) else f"{value:.1f}")
    Console().print(table)


if __name__ == "__main__":
    main()
