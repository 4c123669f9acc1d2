"""Generation throughput of the hf engine: one request at a time vs 8 and 16 concurrent requests.

    python tests/benchmarks/bench_engine.py [--max-tokens 48] [--requests 16] [--device cpu] [--threads N]
                                            [--json out.json]

Each setting generates ``--requests`` completions (chat prompts of different lengths, temperature 1 with fixed
seeds so the same amount of work is done) and reports generated tokens per second of wall time, the decode steps
taken and the mean decode batch. ``single`` awaits the requests one after another; ``concurrent N`` keeps N in
flight (continuous batching joins them into one decode batch).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time

QUESTIONS = ["What is 2+2?", "Name a color.", "Write a haiku about the sea.", "Hi", "What is the capital of France?",
             "Count from one to five.", "Say something nice about cats, dogs and birds in one sentence.", "Why?",
             "Explain photosynthesis briefly.", "What is a prime number?", "Give me a synonym for happy.",
             "How many legs does a spider have?", "Translate 'good morning' to French.", "What is Python?",
             "Tell me a fun fact.", "What day comes after Monday?"]


async def run(engine, prompts, sampling, concurrency: int) -> dict:
    from skyrl_core.inference import SamplingParams

    s0 = engine.stats.snapshot()
    sem = asyncio.Semaphore(concurrency)

    async def one(i, p):
        async with sem:
            sp = SamplingParams(temperature=sampling.temperature, max_tokens=sampling.max_tokens, seed=1000 + i)
            return await engine.generate(p, sp)

    t0 = time.perf_counter()
    outs = await asyncio.gather(*[one(i, p) for i, p in enumerate(prompts)])
    wall = time.perf_counter() - t0
    s1 = engine.stats.snapshot()
    tokens = sum(len(o.output_ids) for o in outs)
    steps = s1["decode_steps"] - s0["decode_steps"]
    return {"concurrency": concurrency, "requests": len(prompts), "tokens": tokens, "wall_s": round(wall, 2),
            "tokens_per_s": round(tokens / wall, 1), "decode_steps": steps,
            "mean_decode_batch": round((s1["decode_rows"] - s0["decode_rows"]) / max(steps, 1), 2)}


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--requests", type=int, default=16)
    ap.add_argument("--threads", type=int, default=None,
                    help="torch intra-op threads (default: torch's choice; 1 is far faster on a busy machine)")
    ap.add_argument("--json", default=None, help="also write the results here")
    args = ap.parse_args()

    import torch

    if args.threads:
        torch.set_num_threads(args.threads)

    from skyrl_core.inference import SamplingParams
    from skyrl_core.default_plugins.engines.hf import HFEngine

    engine = HFEngine(model=args.model, max_batch=16, device=args.device)
    tok = engine.tokenizer
    prompts = []
    for i in range(args.requests):
        out = tok.apply_chat_template([{"role": "user", "content": QUESTIONS[i % len(QUESTIONS)]}],
                                      add_generation_prompt=True, tokenize=True)
        prompts.append(list(out["input_ids"] if hasattr(out, "keys") else out))
    sampling = SamplingParams(temperature=1.0, max_tokens=args.max_tokens)
    await engine.generate(prompts[0], SamplingParams(max_tokens=4))  # warm-up (first forward is slow)
    results = []
    for conc in (1, 8, 16):
        r = await run(engine, prompts, sampling, conc)
        r["setting"] = "single" if conc == 1 else f"concurrent {conc}"
        results.append(r)
        print(f"{r['setting']:>14}: {r['tokens']} tokens in {r['wall_s']} s = {r['tokens_per_s']} tokens/s "
              f"({r['decode_steps']} decode steps, mean decode batch {r['mean_decode_batch']})", flush=True)
    await engine.close()
    meta = {"device": args.device, "torch_threads": torch.get_num_threads(), "cpus": os.cpu_count(),
            "load_avg_1m": os.getloadavg()[0], "max_tokens": args.max_tokens, "model": args.model}
    print(json.dumps(meta))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "results": results}, f, indent=1)


if __name__ == "__main__":
    asyncio.run(main())
