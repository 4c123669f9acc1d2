"""Runtime placement on Ray: trajectories per minute with 1 and 2 Ray runtime workers (and local placement) on a
CPU-bound init/eval workload, and what one remote tool call costs over a local one.

Workload (one trajectory): init starts a bubblewrap sandbox and burns ``--burn-s`` CPU seconds in it (a
repository's environment being built); run is two scripted turns (a python tool call, then finish); eval burns
``--burn-s`` CPU seconds in the sandbox again (a test run) and checks the answer. The engine is a scripted
stand-in (replies from a fixed script, tokenised with SmolLM2's tokenizer): the model is not what is measured.
Every placement runs the same dispatcher (async_pipeline, 4 agents) on a local Ray cluster of 2 CPUs; each
measured rollout follows a warm-up rollout in the same session (actors already started; the cold start is
reported apart).

Tool-call overhead: the median of ``--calls`` calls of the python tool (``print(1)`` in the sandbox) and of the
finish tool (no runtime work), on a local sandbox and on a sandbox in a Ray actor.

Run: OMP_NUM_THREADS=1 python plugins/ray/benchmarks/bench_ray_runtime.py [--trajectories 12] [--burn-s 1.0]
(skyrl-ray installed: pip install -e plugins/ray)
Figures go to docs/scale-out.md by hand, with the machine they came from.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time
from typing import Any

from skyrl_core import hookimpl
from skyrl_core.inference.base import Engine, GenerationOutput
from skyrl_core.default_plugins.runtimes.sandbox import LocalSandbox
from skyrl_core.tasks import DataSpec, Instance, Task, VerifierResult

BURN = "import time\nt = time.process_time()\nwhile time.process_time() - t < {s}:\n    pass\nprint('burnt')\n"
BURN_S = {"value": 1.0}


class BurnSandbox(LocalSandbox):
    """The sandbox whose ``prepare`` burns CPU seconds inside it (``options.burn_s``)."""

    name = "burn_sandbox"

    async def prepare(self, instance: Any) -> None:
        await self.write_file("burn.py", BURN.format(s=self.spec.options.get("burn_s", 1.0)))
        res = await self.exec(["python3", "burn.py"], timeout_s=120)
        assert "burnt" in res.output, res.output


async def burn_verifier(trajectory: Any, runtime: Any, instance: Instance) -> VerifierResult:
    res = await runtime.exec(["python3", "burn.py"], timeout_s=120)
    ok = "burnt" in res.output and str(trajectory.answer) == instance.data["answer"]
    return VerifierResult(reward=float(ok))


def load(spec: DataSpec) -> list[Instance]:
    return [Instance(id=str(i), data={"question": f"What is {i} * 7? (q{i})", "answer": str(i * 7)})
            for i in range(spec.limit or 8)]


def builder(instance: Instance, task: Task) -> list[dict]:
    return [{"role": "user", "content": instance.data["question"]}]


class BenchPlugin:
    @hookimpl
    def register_tasks(self, register):
        register(Task(name="burn", description="CPU-bound init and eval", load=load, instruction_builder="burn",
                      tools=("python", "finish"), verifier="burn_verifier", runtime="burn_sandbox"), name="burn")

    @hookimpl
    def register_instruction_builders(self, register):
        register(builder, name="burn")

    @hookimpl
    def register_verifiers(self, register):
        register(burn_verifier, name="burn_verifier")

    @hookimpl
    def register_runtimes(self, register):
        register(BurnSandbox, name="burn_sandbox")


class ScriptedEngine(Engine):
    """A stand-in engine: turn 0 calls python on the question's product, turn 1 finishes with what it printed."""

    name = "scripted"

    def __init__(self) -> None:
        super().__init__()
        from skyrl_core.default_plugins.engines.models import load_tokenizer

        self.tokenizer = load_tokenizer("smollm2-135m-instruct")
        self.max_context = 8192
        self.stats.capacity = 16

    async def generate(self, input_ids, sampling):
        import re

        text = self.tokenizer.decode(input_ids)
        if text.count("<|im_start|>assistant") <= 1:
            a, b = re.findall(r"What is (\d+) \* (\d+)", text)[-1]
            reply = json.dumps({"name": "python", "arguments": {"code": f"print('R=%d' % ({a} * {b}))"}})
        else:
            reply = json.dumps({"name": "finish", "arguments": {"answer": re.findall(r"R=(\d+)", text)[-1]}})
        ids = self.tokenizer(f"<tool_call>\n{reply}\n</tool_call>", add_special_tokens=False)["input_ids"]
        ids.append(self.tokenizer.convert_tokens_to_ids("<|im_end|>"))
        return GenerationOutput(output_ids=ids, output_logprobs=[0.0] * len(ids), finish_reason="stop")


def config(placement: str, n: int, burn_s: float, max_actors: int | None):
    from skyrl_core.config import load_config

    runtime = f"{{type: burn_sandbox, cpu_time_s: 120, placement: {placement}, options: {{burn_s: {burn_s}}}"
    if max_actors:
        runtime += f", max_actors: {max_actors}"
    return load_config(None, ["tasks.0.name=burn", f"tasks.0.data={{limit: {n}}}", f"tasks.0.runtime={runtime}}}",
                              "sampling.n_samples=1", "agent.max_turns=3", "agent.hints.turns_left=false",
                              "dispatcher.max_parallel_agents=4", "dispatcher.remember_costs=false"])


async def throughput(registry, engine, placement: str, n: int, burn_s: float, max_actors: int | None) -> dict:
    from skyrl_core.rollout import RolloutSession

    session = await RolloutSession.create(config(placement, n, burn_s, max_actors), engine=engine, registry=registry)
    try:
        items = session.load_instances("train")
        t0 = time.perf_counter()
        warm, _ = await session.rollout(items[:max(max_actors or 2, 2)], 1)
        cold_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        trajs, metrics = await session.rollout(items, 1)
        wall = time.perf_counter() - t0
    finally:
        await session.close()
    rewards = [t.reward for t in trajs]
    assert rewards == [1.0] * n, [(t.finish_reason, t.error) for t in trajs]
    return {"placement": placement, "workers": max_actors, "trajectories": n, "wall_s": round(wall, 2),
            "trajectories_per_min": round(60 * n / wall, 1), "warmup_s": round(cold_s, 2),
            "mean_reward": sum(rewards) / n, "peak_runtimes": metrics["peak_runtimes"]}


async def tool_overhead(calls: int) -> dict:
    from skyrl_core.config import Config
    from skyrl_core.default_plugins.generic_tools import finish_tool, python_tool
    from skyrl_core.runtime import RuntimeSpec
    from skyrl_core.tools import ToolContext
    from skyrl_ray.placement import RayPlacement

    out: dict[str, float] = {}
    local = LocalSandbox(RuntimeSpec())
    spec = RuntimeSpec(placement="ray")
    placed = RayPlacement().place_task(spec, LocalSandbox, {"python": python_tool, "finish": finish_tool},
                                       burn_verifier, "v", Config())
    tools, placement = placed.tools, placed.runtime_cls
    remote = placement(spec)
    t0 = time.perf_counter()
    await remote.start()
    out["ray_runtime_start_cold_ms"] = 1000 * (time.perf_counter() - t0)
    await local.start()
    try:
        for label, rt, table in (("local", local, {"python": python_tool, "finish": finish_tool}),
                                 ("ray", remote, tools)):
            ctx = ToolContext(runtime=rt)
            for name, args in (("python", {"code": "print(1)"}), ("finish", {"answer": "1"})):
                times = []
                for _ in range(calls):
                    t0 = time.perf_counter()
                    await table[name].call(args, ctx)
                    times.append(time.perf_counter() - t0)
                out[f"{label}_{name}_ms"] = 1000 * statistics.median(times)
        await remote.close()
        t0 = time.perf_counter()  # a second lease reuses the idle actor
        again = placement(spec)
        await again.start()
        out["ray_runtime_start_warm_ms"] = 1000 * (time.perf_counter() - t0)
        await again.close()
    finally:
        await local.close()
        await placed.close()
    out["python_overhead_ms"] = out["ray_python_ms"] - out["local_python_ms"]
    out["finish_overhead_ms"] = out["ray_finish_ms"] - out["local_finish_ms"]
    return {k: round(v, 2) for k, v in out.items()}


async def main(args) -> dict:
    import ray

    from skyrl_core import plugins as plugins_mod

    os.environ["SKYRL_LOAD_PLUGINS"] = "skyrl-ray"  # the ray placement, and no other installed plugin
    ray.init(num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1",
             object_store_memory=128 * 1024 * 1024, log_to_driver=False)
    try:
        plugins_mod.reset_plugins()
        pm = plugins_mod.get_plugins()
        pm.register_plugin(BenchPlugin(), "bench-burn")
        engine = ScriptedEngine()
        rows = [await throughput(pm.registry, engine, "local", args.trajectories, args.burn_s, None)]
        for workers in (1, 2):
            rows.append(await throughput(pm.registry, engine, "ray", args.trajectories, args.burn_s, workers))
        overhead = await tool_overhead(args.calls)
    finally:
        ray.shutdown()
    return {"throughput": rows, "tool_call": overhead, "burn_s": args.burn_s}


def show(result: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"CPU-bound init/eval ({result['burn_s']} CPU-s each), 2-CPU local Ray cluster")
    for col in ("placement", "workers", "trajectories", "wall s", "trajectories/min", "warm-up s", "reward"):
        table.add_column(col)
    for r in result["throughput"]:
        table.add_row(r["placement"], str(r["workers"] or "-"), str(r["trajectories"]), f"{r['wall_s']:.1f}",
                      f"{r['trajectories_per_min']:.1f}", f"{r['warmup_s']:.1f}", f"{r['mean_reward']:.2f}")
    console = Console()
    console.print(table)
    tc = Table(title="one tool call, median ms")
    for col in ("tool", "local", "ray actor", "overhead"):
        tc.add_column(col)
    o = result["tool_call"]
    for name in ("python", "finish"):
        tc.add_row(name, f"{o[f'local_{name}_ms']:.1f}", f"{o[f'ray_{name}_ms']:.1f}", f"{o[f'{name}_overhead_ms']:.1f}")
    console.print(tc)
    console.print(f"ray runtime start: cold {o['ray_runtime_start_cold_ms']:.0f} ms (new actor), warm "
                  f"{o['ray_runtime_start_warm_ms']:.0f} ms (idle actor reused)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trajectories", type=int, default=12)
    parser.add_argument("--burn-s", type=float, default=1.0)
    parser.add_argument("--calls", type=int, default=30)
    parser.add_argument("--json", action="store_true", help="print the figures as JSON instead of tables")
    args = parser.parse_args()
    result = asyncio.run(main(args))
    print(json.dumps(result, indent=2)) if args.json else show(result)
