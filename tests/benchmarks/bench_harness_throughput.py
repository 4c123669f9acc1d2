"""Throughput of an external harness through the recording gateway beside skyrl's in-loop agent, on the same
workload (docs/gateway.md, "Throughput beside the in-loop agent").

Both paths run ``run_eval`` on the same task rows with the same engine (one hf engine, loaded once and shared),
the same sampling (greedy, the same ``max_tokens``, one sample per row), the same messages and the same tool
offered, the same dispatcher (``async_pipeline``, the same ``max_parallel_agents``) and the same runtime
(``local``: no sandbox cost on either side):

- ``loop``: skyrl's agent loop (one turn: ``agent.max_turns: 1``);
- ``gateway``: a harness task whose callable sends the same messages and tool through the OpenAI Python SDK
  (``AsyncOpenAI``, as harnesses use) to its recording-gateway session: HTTP, JSON, message comparison,
  rendering and recording on top of the same engine call.

One untimed one-row run of each path comes first (the first run in a process imports the gateway's server;
its wall time is reported as ``warmup_wall_s``). Runs alternate (loop, gateway, loop, gateway, ...) so drifting machine load hits both alike. Reports per path
the median over ``--reps`` of trajectories per minute and generated tokens per second (rollout wall time of the
whole ``run_eval``), the prompt and generated tokens per run, and the load average around the runs.

    python tests/benchmarks/bench_harness_throughput.py [--rows 16] [--max-tokens 32] [--reps 2]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

PROMPTS = [f"Write one sentence about the number {k}." for k in range(64)]
SYSTEM = "You are a helpful assistant."


def _plugin():
    from skyrl_core import DataSpec, Instance, Task, Tool, ToolResult, VerifierResult, hookimpl

    note = Tool(name="bench_note", description="Write a note (never needed here).",
                parameters={"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
                handler=lambda args, ctx: ToolResult(output="noted"))

    def rows(spec: DataSpec):
        return [Instance(id=f"r{k}", data={"prompt": p}) for k, p in enumerate(PROMPTS[:spec.limit])]

    def messages(instance: Instance, task=None) -> list[dict]:
        return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": instance.data["prompt"]}]

    async def openai_sdk_harness(base_url, trajectory, runtime, instance, sampling):
        from openai import AsyncOpenAI

        async with AsyncOpenAI(base_url=base_url, api_key="unused", max_retries=0, timeout=1800) as client:
            await client.chat.completions.create(model="skyrl", messages=messages(instance), tools=[note.schema()],
                                                 max_tokens=sampling.max_tokens, temperature=sampling.temperature)

    def scored(trajectory, runtime, instance):
        return VerifierResult(reward=0.0)

    class Bench:
        @hookimpl
        def register_tools(self, register):
            register(note)

        @hookimpl
        def register_instruction_builders(self, register):
            register(messages, name="bench_messages")

        @hookimpl
        def register_verifiers(self, register):
            register(scored, name="bench_zero")

        @hookimpl
        def register_tasks(self, register):
            common = dict(load=rows, instruction_builder="bench_messages", verifier="bench_zero", runtime="local",
                          default_data=DataSpec(split="test"))
            register(Task(name="bench_loop", description="in-loop agent", tools=("bench_note",), **common))
            register(Task(name="bench_gateway", description="external harness via the gateway", tools=(),
                          harness=openai_sdk_harness, **common))

    return Bench()


def _config(tmp: Path, task: str, model: str, rows: int, max_tokens: int, parallel: int):
    from skyrl_core.config import load_config

    path = tmp / f"{task}.yaml"
    path.write_text(f"model: {model}\nengine: {{type: hf, device: cpu, max_batch: {parallel}}}\n"
                    f"tasks:\n  - name: {task}\n    data: {{limit: {rows}}}\n"
                    f"agent: {{max_turns: 1}}\n"
                    f"sampling: {{temperature: 0.0, max_tokens: {max_tokens}, n_samples: 1, seed: 0}}\n"
                    f"dispatcher: {{type: async_pipeline, max_parallel_agents: {parallel}}}\n")
    return load_config(str(path))


def run(model: str, rows: int, max_tokens: int, reps: int, parallel: int) -> dict:
    import torch

    from skyrl_core import plugins as plugins_mod
    from skyrl_core.default_plugins.engines.hf import HFEngine
    from skyrl_core.default_plugins.eval.run import run_eval

    import openai  # noqa: F401  (imported once before timing: a one-off cost of the process, not of a run)

    torch.set_num_threads(1)
    plugins_mod.get_plugins().register_plugin(_plugin(), "bench-harness-throughput")
    engine = HFEngine(model=model, max_batch=parallel, device="cpu")
    out: dict = {path: [] for path in ("loop", "gateway")}
    load_before = os.getloadavg()
    warmup: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        for path in ("loop", "gateway"):  # untimed: the first run in a process imports the server (fastapi, uvicorn)
            t0 = time.perf_counter()
            asyncio.run(run_eval(_config(Path(tmp), f"bench_{path}", model, 1, max_tokens, parallel),
                                 Path(tmp) / f"warmup-{path}", engine=engine))
            warmup[path] = round(time.perf_counter() - t0, 2)
        for rep in range(reps):
            for path in ("loop", "gateway"):
                config = _config(Path(tmp), f"bench_{path}", model, rows, max_tokens, parallel)
                done = []
                t0 = time.perf_counter()
                asyncio.run(run_eval(config, Path(tmp) / f"{path}-{rep}", engine=engine,
                                     on_trajectory_done=done.append))
                wall = time.perf_counter() - t0
                gen = sum(len(t.output_ids) for traj in done for t in traj.transitions)
                prompt = sum(len(t.input_ids) for traj in done for t in traj.transitions)
                calls = sum(len(traj.transitions) for traj in done)
                harness_s = [traj.metrics["harness_s"] for traj in done if "harness_s" in traj.metrics]
                assert len(done) == rows and calls == rows, (path, len(done), calls)
                out[path].append({"wall_s": round(wall, 2), "trajectories_per_min": round(60 * rows / wall, 2),
                                  "gen_tokens_per_s": round(gen / wall, 2), "gen_tokens": gen,
                                  "prompt_tokens": prompt,
                                  "harness_s_median": round(statistics.median(harness_s), 2) if harness_s else None,
                                  "loadavg_1m": round(os.getloadavg()[0], 2)})
    asyncio.run(engine.close())
    summary = {path: {"trajectories_per_min_median": statistics.median(r["trajectories_per_min"] for r in runs),
                      "gen_tokens_per_s_median": statistics.median(r["gen_tokens_per_s"] for r in runs),
                      "runs": runs} for path, runs in out.items()}
    loop, gw = summary["loop"], summary["gateway"]
    return {"model": model, "rows": rows, "max_tokens": max_tokens, "reps": reps, "max_parallel_agents": parallel,
            **summary, "warmup_wall_s": warmup,
            "gateway_over_loop_trajectories_per_min": round(
                gw["trajectories_per_min_median"] / loop["trajectories_per_min_median"], 3),
            "loadavg_before": [round(x, 2) for x in load_before],
            "loadavg_after": [round(x, 2) for x in os.getloadavg()], "cpus": os.cpu_count(),
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--rows", type=int, default=16)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--parallel", type=int, default=8, help="max_parallel_agents and the engine's max_batch")
    ap.add_argument("--json", help="write the figures to this file")
    args = ap.parse_args(argv)
    result = run(args.model, args.rows, args.max_tokens, args.reps, args.parallel)
    print(json.dumps(result, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
