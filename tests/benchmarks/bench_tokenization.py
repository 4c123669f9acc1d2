"""Tokenisation share of a long agent conversation (target: < 2 % of wall time).

Runs the real agent loop for ``--turns`` turns (default 128) against the real hf engine. Each LLM call really
generates ``--gen-tokens`` tokens; the reply is then replaced by a scripted tool call so the conversation has a
fixed, realistic shape (a call, an observation, a hint) and runs all turns. The tool answers instantly (no
sandbox), so wall time is engine + tokenisation + loop overhead: the strictest setting for the share.

Reports: wall seconds, engine seconds, tokenisation seconds (the chat template and tokenizer work the loop does,
``trajectory.metrics["tokenize_s"]``), the share, the mean continuation cost over the first and last 16 turns
(flat = linear total), and what re-rendering the whole conversation every turn would have cost instead.

    python tests/benchmarks/bench_tokenization.py [--turns 128] [--gen-tokens 16] [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time

import attrs


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--turns", type=int, default=128)
    ap.add_argument("--gen-tokens", type=int, default=16, help="tokens the model really generates per call")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--no-model", action="store_true",
                    help="skip the model call (the scripted reply only): measures the loop's tokenisation over "
                         "many turns where the real engine would take too long on this machine")
    ap.add_argument("--json", help="write the figures to this file")
    args = ap.parse_args(argv)
    result = asyncio.run(run(args.turns, args.gen_tokens, args.device, not args.no_model))
    print(json.dumps(result, indent=2))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
    return result


async def run(turns: int, gen_tokens: int, device: str, use_model: bool = True) -> dict:
    from skyrl_core.agent import run_agent
    from skyrl_core.default_plugins.chat.template import ChatFormat
    from skyrl_core.config import AgentConfig, HintsConfig
    from skyrl_core.inference.base import Engine, GenerationOutput, SamplingParams
    from skyrl_core.default_plugins.engines.hf import HFEngine
    from skyrl_core.default_plugins.parsers import HermesParser
    from skyrl_core.tools import Tool, ToolContext
    from skyrl_core.transitions import Trajectory

    inner = HFEngine(model="smollm2-135m-instruct", max_batch=1, device=device)
    tok = inner.tokenizer
    im_end = tok.convert_tokens_to_ids("<|im_end|>")

    class TimedScriptedReplies(Engine):
        name = "bench"

        def __init__(self) -> None:
            super().__init__()
            self.tokenizer, self.max_context, self.engine_s, self.n = tok, inner.max_context, 0.0, 0

        async def generate(self, input_ids, sampling):
            t0 = time.perf_counter()
            if use_model:
                await inner.generate(input_ids, attrs.evolve(sampling, max_tokens=gen_tokens))
            self.engine_s += time.perf_counter() - t0
            self.n += 1
            if self.n % 16 == 0:  # progress, so a long run on a slow machine shows its figures as it goes
                wall = time.perf_counter() - self.t_start
                print(f"turn {self.n}: prompt {len(input_ids)} tokens, wall {wall:.1f} s, engine "
                      f"{self.engine_s:.1f} s, continuations {sum(per_turn):.4f} s", file=sys.stderr, flush=True)
            reply = (f"Step {self.n}.\n<tool_call>\n"
                     f"{json.dumps({'name': 'note', 'arguments': {'text': f'x{self.n}'}})}\n</tool_call>")
            ids = tok(reply, add_special_tokens=False)["input_ids"] + [im_end]
            return GenerationOutput(output_ids=ids, output_logprobs=[0.0] * len(ids), finish_reason="stop")

    def note(args, ctx):
        return f"noted {args['text']}"

    note_tool = Tool(name="note", description="Write a note.", handler=note,
                     parameters={"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]})
    chat = ChatFormat(tok)
    # time each continuation separately to show the per-turn cost does not grow with the conversation
    per_turn: list[float] = []
    original = chat.continuation_ids

    def timed(*a, **kw):
        t0 = time.perf_counter()
        out = original(*a, **kw)
        per_turn.append(time.perf_counter() - t0)
        return out

    chat.continuation_ids = timed
    engine = TimedScriptedReplies()
    engine.t_start = time.perf_counter()
    traj = Trajectory(instance_id="bench", sample_index=0, task="bench", group_id="bench",
                      messages=[{"role": "system", "content": "Take notes."},
                                {"role": "user", "content": "Write one note per turn."}])
    cfg = AgentConfig(max_turns=turns, max_context_tokens=inner.max_context,
                      hints=HintsConfig(repeated_action=0, context_almost_full=False))
    t0 = time.perf_counter()
    await run_agent(traj, engine=engine, tools={"note": note_tool}, parser=HermesParser(), chat=chat,
                    agent_config=cfg, sampling=SamplingParams(temperature=0.0, max_tokens=64),
                    ctx=ToolContext())
    wall = time.perf_counter() - t0
    await inner.close()

    # the alternative: re-render and re-tokenise the whole conversation before every call
    t1 = time.perf_counter()
    msgs = traj.messages
    calls = [i for i, m in enumerate(msgs) if m["role"] == "assistant"]
    for i in calls:
        chat.render_ids(msgs[:i], [note_tool.schema()])
    rerender_s = time.perf_counter() - t1

    tok_s = traj.metrics["tokenize_s"]
    k = min(16, len(per_turn) // 2) or 1
    return {
        "turns": traj.turns,
        "finish_reason": traj.finish_reason,
        "final_prompt_tokens": len(traj.transitions[-1].input_ids),
        "gen_tokens_per_call": gen_tokens if use_model else 0,
        "model": use_model,
        "device": device,
        "wall_s": round(wall, 3),
        "engine_s": round(engine.engine_s, 3),
        "tokenize_s": round(tok_s, 4),
        "tokenize_share": round(tok_s / wall, 5),
        "continuation_ms_first16": round(1000 * sum(per_turn[:k]) / k, 3),
        "continuation_ms_last16": round(1000 * sum(per_turn[-k:]) / k, 3),
        "rerender_every_turn_s": round(rerender_s, 3),
        "rerender_share_if_used": round(rerender_s / wall, 5),
    }


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
