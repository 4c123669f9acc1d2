"""Train-step throughput of the local backend against plain transformers code doing the same work.

All sides see identical micro-batches (same rows, same padding, ``backend.micro_batch_tokens``) of real
GSM8K-shaped sequences (a ChatML prompt with a GSM8K question from the bundled test split, a response of
``--resp`` tokens) and run AdamW steps on SmolLM2-135M-Instruct.

- "plain_pg" (the like-for-like baseline): a hand-written policy-gradient step in plain transformers/torch — the
  decoder's hidden states, the LM head on the response positions only, token logprobs, the on-policy PG loss
  ``-A * exp(lp - lp.detach())`` token-mean, ``backward``, AdamW. The same work as "local", so their ratio is
  what the trainer's own code (collation, micro-batch planning, clipping, metrics) costs or saves.
- "local": ``LocalBackend.train_step_sync`` (PPO-clipped PG loss over response tokens, logits for response
  positions only). Target: local >= 0.9x plain_pg.
- "plain_lm" (for scale, not a like-for-like comparison): ``model(input_ids, labels=...)``, the standard
  causal-LM loss with the LM head over *every* position. Being faster than it says the trainer computes less
  (no logits for prompt positions), not that it implements the same thing faster.

Run: python tests/benchmarks/bench_train_step.py [--data 16] [--resp 160] [--repeat 3] [--micro-batch-tokens 4096]

Memory across steps of the real loop (rollouts on the in-process hf engine, then a local train step on those
trajectories with advantages forced to +-0.5 so every step trains every datum), current and peak RSS per phase:
    OMP_NUM_THREADS=1 python tests/benchmarks/bench_train_step.py --loop-memory 3 [--no-trim]
(``--no-trim`` disables ``skyrl_core.default_plugins.trainer.memory.release_freed_memory`` to show the growth it prevents).

Packing saving on real trajectories (the ``rollouts/step-*.jsonl`` a ``skyrl train`` run writes):
    python tests/benchmarks/bench_train_step.py --packing runs/quickstart
prints, over all trajectories of the run, the tokens a trainer processes with packing (one datum per trajectory
unless a context reset splits it) against one datum per LLM call, and the multi-turn share.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import statistics
import time
from pathlib import Path

import torch

from skyrl_core.config import Config
from skyrl_core.default_plugins.engines.models import load_tokenizer
from skyrl_core.default_plugins.trainer.local import LocalBackend, plan_micro_batches
from skyrl_core.transitions import Datum, TrainingBatch

# the GSM8K test split bundled in the package (MIT, see skyrl_core/default_plugins/gsm8k/data/LICENSE):
# runs from a fresh clone
GSM8K = Path(__file__).resolve().parents[2] / "skyrl_core" / "default_plugins" / "gsm8k" / "data" / "test.jsonl"


def make_batch(tok, n: int, resp: int, seed: int = 0) -> TrainingBatch:
    rng = random.Random(seed)
    questions = [json.loads(line)["question"] for line in GSM8K.read_text().splitlines()[:200]]
    data = []
    for i in range(n):
        msgs = [{"role": "system", "content": "Solve the problem. You may call the python tool."},
                {"role": "user", "content": rng.choice(questions)}]
        ids = tok.apply_chat_template(msgs, add_generation_prompt=True)
        prompt = list(ids["input_ids"] if hasattr(ids, "keys") else ids)
        r = rng.randint(resp // 2, resp * 3 // 2)
        response = [rng.randrange(100, 40000) for _ in range(r)]
        data.append(Datum(prompt_ids=prompt, response_ids=response, response_mask=[1] * r,
                          rollout_logprobs=[-1.0] * r, reward=float(i % 2), advantage=0.5 if i % 2 else -0.5,
                          trajectory_id=f"t{i}", group_id=f"g{i // 4}", is_last_step=True))
    return TrainingBatch(data=data)


def _optimiser_step(backend: LocalBackend, opt: torch.optim.Optimizer) -> None:
    """What both plain baselines do after the backward: clip at 1.0, one AdamW step, eval mode again."""
    torch.nn.utils.clip_grad_norm_(backend.params, 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    backend.model.eval()


def plain_step(backend: LocalBackend, batch: TrainingBatch, opt: torch.optim.Optimizer) -> int:
    """Same micro-batches as the backend; standard HF causal-LM loss; one AdamW step."""
    model = backend.model
    model.train()
    opt.zero_grad(set_to_none=True)
    lengths = [len(d.prompt_ids) + len(d.response_ids) for d in batch.data]
    tokens = 0
    for idx in plan_micro_batches(lengths, backend.bc.micro_batch_tokens):
        mb = backend._collate([batch.data[i] for i in idx])
        labels = mb["input_ids"].masked_fill(mb["attention_mask"] == 0, -100)
        out = model(input_ids=mb["input_ids"], attention_mask=mb["attention_mask"],
                    position_ids=mb["position_ids"], labels=labels, use_cache=False)
        (out.loss * len(idx) / len(batch.data)).backward()
        tokens += int(mb["attention_mask"].sum())
    _optimiser_step(backend, opt)
    return tokens


def plain_pg_step(backend: LocalBackend, batch: TrainingBatch, opt: torch.optim.Optimizer) -> int:
    """Same micro-batches and work as the backend's step, written plainly: hidden states, LM head on response
    positions, token logprobs, on-policy PG loss token-mean over the batch, one AdamW step."""
    model = backend.model
    model.train()
    opt.zero_grad(set_to_none=True)
    lengths = [len(d.prompt_ids) + len(d.response_ids) for d in batch.data]
    n_loss_tokens = sum(len(d.response_ids) for d in batch.data)
    tokens = 0
    for idx in plan_micro_batches(lengths, backend.bc.micro_batch_tokens):
        rows = [batch.data[i] for i in idx]
        mb = backend._collate(rows)
        hidden = model.model(input_ids=mb["input_ids"], attention_mask=mb["attention_mask"],
                             position_ids=mb["position_ids"], use_cache=False).last_hidden_state
        loss = hidden.new_zeros(())
        seq = hidden.shape[1]
        for r, d in enumerate(rows):  # rows are left-padded: each response ends at the last column
            n = len(d.response_ids)
            logits = model.lm_head(hidden[r, seq - n - 1:seq - 1]).float()  # position t predicts token t + 1
            targets = torch.tensor(d.response_ids, device=logits.device)
            lp = torch.log_softmax(logits, -1).gather(-1, targets[:, None])[:, 0]
            loss = loss - (d.advantage * torch.exp(lp - lp.detach())).sum()
        (loss / n_loss_tokens).backward()
        tokens += int(mb["attention_mask"].sum())
    _optimiser_step(backend, opt)
    return tokens


def packing_report(run_dir: Path) -> None:
    from skyrl_core.postprocess import build_training_batch
    from skyrl_core.transitions import Trajectory, Transition

    trajectories = []
    for f in sorted((run_dir / "rollouts").glob("step-*.jsonl")):
        for line in f.read_text().splitlines():
            raw = json.loads(line)
            raw.pop("id", None)
            raw["transitions"] = [Transition(**t) for t in raw["transitions"]]
            trajectories.append(Trajectory(**raw))
    if not trajectories:
        raise SystemExit(f"no rollouts under {run_dir / 'rollouts'}")
    m = build_training_batch(trajectories, skip_zero_advantage=False).metrics
    multi = sum(len(t.transitions) > 1 for t in trajectories)
    print(f"{len(trajectories)} trajectories ({multi} multi-call), {m['calls']:.0f} LLM calls -> {m['data']:.0f} data")
    print(f"tokens one-datum-per-call {m['tokens_unpacked']:.0f}, packed {m['tokens_packed']:.0f}: "
          f"packing saving {m['packing_saving']:.1%}")


def _rss() -> str:
    from skyrl_core.default_plugins.trainer.memory import current_rss_mb

    return (f"RSS {current_rss_mb():.0f} MiB, peak {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} "
            f"MiB")


async def loop_memory(steps: int, batch_size: int, n_samples: int) -> None:
    """Rollouts + train steps as ``skyrl train examples/quickstart.yaml`` runs them, RSS after each phase."""
    from skyrl_core.backends import create_backend
    from skyrl_core.config import load_config
    from skyrl_core.postprocess import build_training_batch
    from skyrl_core.rollout import RolloutSession
    from skyrl_core.default_plugins.trainer.memory import release_freed_memory

    repo = Path(__file__).resolve().parents[2]
    cfg = load_config(str(repo / "examples" / "quickstart.yaml"), ["data.limit=64"])
    session = await RolloutSession.create(cfg)
    backend = create_backend(cfg, session.engine)
    items = session.load_instances("train")
    print(f"setup: {_rss()}", flush=True)
    for step in range(1, steps + 1):
        t0 = time.perf_counter()
        trajectories, _ = await session.rollout(items[(step - 1) * batch_size:step * batch_size], n_samples)
        print(f"step {step} rollouts ({len(trajectories)}, {time.perf_counter() - t0:.0f} s): {_rss()}", flush=True)
        release_freed_memory()  # what the train loop does after a step's rollouts
        print(f"step {step} after trim: {_rss()}", flush=True)
        batch = build_training_batch(trajectories, "rloo", skip_zero_advantage=False)
        for i, d in enumerate(batch.data):
            d.advantage, d.loss_mask = (0.5 if i % 2 else -0.5), 1
        t0 = time.perf_counter()
        m = await backend.train_step(batch)
        await backend.sync_weights(session.engine)
        print(f"step {step} train ({m['train_data']:.0f} data, {m['train_tokens']:.0f} tokens, "
              f"{time.perf_counter() - t0:.0f} s): {_rss()}", flush=True)
    await backend.close()
    await session.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--packing", type=Path, default=None, help="report packing saving of a run dir and exit")
    parser.add_argument("--data", type=int, default=16)
    parser.add_argument("--resp", type=int, default=160)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--micro-batch-tokens", type=int, default=4096)
    parser.add_argument("--local-only", action="store_true", help="time only the local step (memory checks)")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    parser.add_argument("--loop-memory", type=int, default=0, metavar="STEPS",
                        help="RSS over STEPS steps of real rollouts + train steps (quickstart config) and exit")
    parser.add_argument("--loop-batch", type=int, default=4, help="--loop-memory: instances per step")
    parser.add_argument("--loop-samples", type=int, default=4, help="--loop-memory: samples per instance")
    parser.add_argument("--no-trim", action="store_true", help="--loop-memory: never return freed memory")
    ns = parser.parse_args()
    if ns.loop_memory:
        if ns.no_trim:
            import skyrl_core.default_plugins.trainer.local as local_mod
            import skyrl_core.default_plugins.trainer.memory as memory_mod

            memory_mod.release_freed_memory = local_mod.release_freed_memory = lambda: False
        import asyncio

        asyncio.run(loop_memory(ns.loop_memory, ns.loop_batch, ns.loop_samples))
        return
    if ns.packing is not None:
        packing_report(ns.packing)
        return
    if ns.threads:
        torch.set_num_threads(ns.threads)
    config = Config()
    config.backend.lr = 1e-7
    config.backend.micro_batch_tokens = ns.micro_batch_tokens
    backend = LocalBackend(config)
    plain_opt = torch.optim.AdamW(backend.params, lr=1e-7)
    batch = make_batch(load_tokenizer(config.model), ns.data, ns.resp)
    n_tokens = sum(len(d.prompt_ids) + len(d.response_ids) for d in batch.data)
    print(f"device {backend.device}, {len(batch.data)} sequences, {n_tokens} tokens "
          f"({sum(len(d.response_ids) for d in batch.data)} response), micro_batch_tokens {ns.micro_batch_tokens}, "
          f"torch threads {torch.get_num_threads()}")
    if ns.local_only:
        t0 = time.perf_counter()
        backend.train_step_sync(batch)
        print(f"local step {time.perf_counter() - t0:.1f} s; peak RSS "
              f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")
        return
    steps = {"plain_pg": lambda: plain_pg_step(backend, batch, plain_opt),
             "local": lambda: backend.train_step_sync(batch),
             "plain_lm": lambda: plain_step(backend, batch, plain_opt)}
    for run in steps.values():  # warm-up every path (allocator, kernels)
        run()
    times: dict[str, list[float]] = {k: [] for k in steps}
    for _ in range(ns.repeat):  # interleaved, so a noisy neighbour hits every side alike
        for name, run in steps.items():
            t0 = time.perf_counter()
            run()
            times[name].append(time.perf_counter() - t0)
    med = {k: statistics.median(v) for k, v in times.items()}
    for k, v in times.items():
        print(f"{k:8s} median {med[k]:.2f} s  ({n_tokens / med[k]:.0f} tokens/s)  runs {[round(x, 2) for x in v]}")
    print(f"local / plain_pg throughput (same work): {med['plain_pg'] / med['local']:.2f}x (target >= 0.9x)")
    print(f"local / plain_lm throughput (plain_lm also computes prompt-position logits: different work): "
          f"{med['plain_lm'] / med['local']:.2f}x")
    print(f"peak RSS of this process: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")


if __name__ == "__main__":
    main()
