"""Greedy pass@1 of the base model on GSM8K data, prompted directly with no tools.

It tells whether a GSM8K variant suits the training quickstart (the base model should solve 10-60 %): for each
set, ``--n`` questions (shuffled with ``--seed``) are rendered with the model's chat template, answered with
``model.generate`` (greedy, ``--max-new-tokens``), and scored by the ``gsm8k_answer`` verifier (last number in the
reply vs the reference).

Sets: ``gsm8k_steps`` (every calculation step), ``gsm8k_steps single_op`` (one operator), ``gsm8k single-step``
(word problems whose worked answer has one calculation).

Run: python tests/benchmarks/bench_gsm8k_base.py [--n 100] [--split train] [--model smollm2-135m-instruct]
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import time

from skyrl_core.default_plugins.gsm8k.dataset import load_gsm8k, load_gsm8k_steps
from skyrl_core.default_plugins.gsm8k.verifiers import gsm8k_answer
from skyrl_core.tasks import DataSpec
from skyrl_core.transitions import Trajectory

log = logging.getLogger("bench_gsm8k_base")

SYSTEM = "Answer the question. End your reply with the final answer as a number."


def sets(split: str, n: int, seed: int) -> dict:
    """Each set's first ``n`` instances after a seeded shuffle (Task.select's order for shuffle=True)."""
    def pick(instances):
        random.Random(seed).shuffle(instances)
        return instances[:n]

    return {
        "gsm8k_steps": lambda: pick(load_gsm8k_steps(DataSpec(split=split))),
        "gsm8k single-step": lambda: pick(load_gsm8k(DataSpec(split=split, options={"max_steps": 1}))),
        "gsm8k_steps single_op": lambda: pick(load_gsm8k_steps(DataSpec(split=split, options={"single_op": True}))),
    }


def score(model, tokenizer, instances, batch: int, max_new_tokens: int) -> tuple[float, list[dict]]:
    import torch

    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    rows = []
    for start in range(0, len(instances), batch):
        chunk = instances[start:start + batch]
        prompts = [tokenizer.apply_chat_template(
            [{"role": "system", "content": SYSTEM}, {"role": "user", "content": inst.data["question"]}],
            tokenize=False, add_generation_prompt=True) for inst in chunk]
        enc = tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
        with torch.no_grad():
            out = model.generate(**enc, max_new_tokens=max_new_tokens, do_sample=False,
                                 pad_token_id=tokenizer.pad_token_id)
        log.info("  %d/%d answered", start + len(chunk), len(instances))
        replies = tokenizer.batch_decode(out[:, enc["input_ids"].shape[1]:], skip_special_tokens=True)
        for inst, reply in zip(chunk, replies):
            traj = Trajectory(instance_id=inst.id, sample_index=0, task="bench", group_id=inst.id)
            traj.messages = [{"role": "assistant", "content": reply}]
            result = gsm8k_answer(traj, None, inst)
            rows.append({"id": inst.id, "question": inst.data["question"][:80], "reference": inst.data["answer"],
                         "parsed": result.metrics["parsed_answer"], "reward": result.reward, "reply": reply})
    return sum(r["reward"] for r in rows) / max(1, len(rows)), rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--split", default="train", choices=["train", "test"])
    parser.add_argument("--n", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--batch", type=int, default=50)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--sets", default="gsm8k_steps,gsm8k single-step,gsm8k_steps single_op",
                        help="comma-separated sets to run, in order")
    parser.add_argument("--json", help="write per-question results to this file")
    ns = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")

    import torch

    from skyrl_core.default_plugins.engines.models import load_causal_lm, load_tokenizer

    torch.manual_seed(ns.seed)
    model = load_causal_lm(ns.model)
    model.eval()
    tokenizer = load_tokenizer(ns.model)
    report = {}
    available = sets(ns.split, ns.n, ns.seed)
    for name in [x.strip() for x in ns.sets.split(",") if x.strip()]:
        instances = available[name]()
        t0 = time.perf_counter()
        acc, rows = score(model, tokenizer, instances, ns.batch, ns.max_new_tokens)
        report[name] = {"pass@1": acc, "n": len(rows), "seconds": time.perf_counter() - t0, "rows": rows}
        log.info("%-24s pass@1 %.2f  (%d/%d, %.0f s)", name, acc, int(acc * len(rows) + 0.5), len(rows),
                 report[name]["seconds"])
        if ns.json:  # after every set, so a long run that is stopped keeps what it finished
            with open(ns.json, "w", encoding="utf-8") as fh:
                json.dump({"args": vars(ns), "results": report}, fh, indent=1)


if __name__ == "__main__":
    main()
