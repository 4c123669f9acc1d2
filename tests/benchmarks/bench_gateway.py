"""Recording gateway overhead per call (docs/gateway.md): a multi-turn conversation through the gateway on
127.0.0.1 (real HTTP client, real server, real hf engine) against the engine called directly on the same ids.

Each turn sends the conversation so far (continued with the gateway's own reply, so every call after the first
extends the previous one's ids) and then, interleaved, calls the engine directly with the ids the gateway
recorded (greedy, the same ``max_tokens``: the same tokens are generated). Reports per call, in ms:

- ``gateway_ms``: the client's wall time for the HTTP call;
- ``engine_in_gateway_ms``: the engine's own time inside that call (timed around ``generate``);
- ``overhead_ms``: gateway_ms - engine_in_gateway_ms (HTTP, JSON, message comparison, tokenising the new
  suffix, parsing, recording), the figure docs/gateway.md quotes;
- ``direct_ms``: the direct engine call, and ``gateway_minus_direct_ms`` (noisier: two separate generations).

    python tests/benchmarks/bench_gateway.py [--turns 16] [--gen-tokens 8] [--model smollm2-135m-instruct]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import threading
import time


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--turns", type=int, default=16)
    ap.add_argument("--gen-tokens", type=int, default=8)
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--json", help="write the figures to this file")
    args = ap.parse_args(argv)
    result = run(args.turns, args.gen_tokens, args.model)
    print(json.dumps(result, indent=2))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
    return result


class Timed:
    """The engine with the seconds of each ``generate`` kept."""

    def __init__(self, engine) -> None:
        self.engine, self.tokenizer, self.max_context = engine, engine.tokenizer, engine.max_context
        self.seconds: list[float] = []

    async def generate(self, ids, sampling):
        t0 = time.perf_counter()
        out = await self.engine.generate(ids, sampling)
        self.seconds.append(time.perf_counter() - t0)
        return out


def run(turns: int, gen_tokens: int, model: str) -> dict:
    import httpx
    import torch

    from skyrl_core.default_plugins.engines.gateway import Gateway
    from skyrl_core.default_plugins.engines.hf import HFEngine
    from skyrl_core.inference.base import SamplingParams

    torch.set_num_threads(1)
    engine = HFEngine(model=model, max_batch=4, device="cpu")
    timed = Timed(engine)
    gateway = Gateway(timed)
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    url = asyncio.run_coroutine_threadsafe(gateway.start(), loop).result(120)
    sampling = SamplingParams(temperature=0.0, max_tokens=gen_tokens)
    gw_ms, direct_ms = [], []
    messages = [{"role": "system", "content": "You are a helpful assistant."},
                {"role": "user", "content": "Tell me about the sea."}]
    with httpx.Client(base_url=url, timeout=300) as client:
        client.post("/sessions/warmup/v1/chat/completions",
                    json={"messages": messages, "temperature": 0.0, "max_tokens": gen_tokens})
        timed.seconds.clear()
        for turn in range(turns):
            t0 = time.perf_counter()
            r = client.post("/sessions/bench/v1/chat/completions",
                            json={"messages": messages, "temperature": 0.0, "max_tokens": gen_tokens})
            gw_ms.append(1000 * (time.perf_counter() - t0))
            r.raise_for_status()
            reply = {k: v for k, v in r.json()["choices"][0]["message"].items() if v is not None}
            messages = messages + [reply, {"role": "user", "content": f"Go on ({turn})."}]
            ids = gateway.sessions["bench"].transitions[-1].input_ids
            t0 = time.perf_counter()
            asyncio.run_coroutine_threadsafe(engine.generate(ids, sampling), loop).result(300)
            direct_ms.append(1000 * (time.perf_counter() - t0))
    asyncio.run_coroutine_threadsafe(gateway.stop(), loop).result(30)
    asyncio.run_coroutine_threadsafe(engine.close(), loop).result(30)
    loop.call_soon_threadsafe(loop.stop)
    engine_ms = [1000 * s for s in timed.seconds]
    overhead = [g - e for g, e in zip(gw_ms, engine_ms)]
    session = gateway.sessions["bench"]
    return {
        "model": model, "turns": turns, "gen_tokens": gen_tokens,
        "final_prompt_tokens": len(session.transitions[-1].input_ids),
        "extended_calls": session.metrics["extended"], "drift": session.metrics["drift"],
        "gateway_ms_median": statistics.median(gw_ms),
        "engine_in_gateway_ms_median": statistics.median(engine_ms),
        "overhead_ms_median": statistics.median(overhead), "overhead_ms_mean": statistics.mean(overhead),
        "overhead_ms_max": max(overhead),
        "direct_ms_median": statistics.median(direct_ms),
        "gateway_minus_direct_ms_median": statistics.median(g - d for g, d in zip(gw_ms, direct_ms)),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }


if __name__ == "__main__":
    main()
