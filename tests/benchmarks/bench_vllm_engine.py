"""Generation throughput of the hf engine vs the vllm engine (in-process vLLM on the CPU), in one run.

    python tests/benchmarks/bench_vllm_engine.py [--max-tokens 48] [--requests 16] [--threads 1] [--json out.json]

Needs vLLM: run it with the venv ``scripts/vllm-env`` builds (``.venv-vllm/bin/python``). Both engines get the
same chat prompts with greedy decoding (so both do nearly the same work) one request at a time, then 8 and 16
concurrently (``max_batch`` 16 for both), one engine after the other (never both generating at once). Reports
generated tokens per second of wall time; the hf engine's rows also give its decode steps and mean decode batch.
Start-up time of each engine is reported separately. The settings are those ``docs/engines.md`` lists for vLLM on
a CPU host (float32, 1 GiB KV cache, eager mode).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time

from bench_engine import QUESTIONS, run


async def bench(engine, prompts, max_tokens: int) -> list[dict]:
    from skyrl_core.inference import SamplingParams

    sampling = SamplingParams(temperature=0.0, max_tokens=max_tokens)
    await engine.generate(prompts[0], SamplingParams(max_tokens=4))  # warm-up (first forward is slow)
    rows = []
    for conc in (1, 8, 16):
        r = await run(engine, prompts, sampling, conc)
        r["engine"] = engine.name
        r["setting"] = "single" if conc == 1 else f"concurrent {conc}"
        rows.append(r)
        print(f"{engine.name:>5} {r['setting']:>14}: {r['tokens']} tokens in {r['wall_s']} s = "
              f"{r['tokens_per_s']} tokens/s", flush=True)
    return rows


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--requests", type=int, default=16)
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads for the hf engine")
    ap.add_argument("--json", default=None, help="also write the results here")
    args = ap.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    from skyrl_core.default_plugins.engines.hf import HFEngine
    from skyrl_core.default_plugins.engines.vllm import VLLMEngine
    from skyrl_core.default_plugins.engines.models import load_tokenizer

    tok = load_tokenizer(args.model)
    prompts = []
    for i in range(args.requests):
        out = tok.apply_chat_template([{"role": "user", "content": QUESTIONS[i % len(QUESTIONS)]}],
                                      add_generation_prompt=True, tokenize=True)
        prompts.append(list(out["input_ids"] if hasattr(out, "keys") else out))
    results, startup = [], {}
    for make in (lambda: HFEngine(model=args.model, max_batch=16, device="cpu"),
                 lambda: VLLMEngine(model=args.model, max_batch=16)):
        t0 = time.perf_counter()
        engine = await asyncio.to_thread(make)
        startup[engine.name] = round(time.perf_counter() - t0, 1)
        print(f"{engine.name}: started in {startup[engine.name]} s", flush=True)
        try:
            results += await bench(engine, prompts, args.max_tokens)
        finally:
            await engine.close()
    import vllm

    meta = {"cpus": os.cpu_count(), "load_avg_1m": os.getloadavg()[0], "max_tokens": args.max_tokens,
            "requests": args.requests, "hf_torch_threads": args.threads, "model": args.model,
            "vllm": vllm.__version__, "startup_s": startup}
    print("| setting | hf tokens/s | vllm tokens/s | vllm / hf |\n|---|---|---|---|")
    for hf_row, v_row in zip(results[:3], results[3:]):
        print(f"| {hf_row['setting']} | {hf_row['tokens_per_s']} | {v_row['tokens_per_s']} | "
              f"{v_row['tokens_per_s'] / hf_row['tokens_per_s']:.2f}x |")
    print(json.dumps(meta))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "results": results}, f, indent=1)


if __name__ == "__main__":
    asyncio.run(main())
