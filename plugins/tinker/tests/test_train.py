"""End to end against the local Tinker-compatible server on 127.0.0.1 (CPU, JAX): ``skyrl train`` of 2 steps
with engine and backend ``tinker``, the loss and the adapter's logprobs changing, Datums from the run's real
rollouts, and ``--resume`` from the Tinker checkpoint (the restored adapter gives the saved adapter's logprobs).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tinker

from skyrl_core.postprocess import build_training_batch
from skyrl_core.transitions import Trajectory, Transition

pytestmark = pytest.mark.slow

CONFIG = """\
model: {model}
engine: {{type: tinker, max_batch: 12, timeout_s: 300}}
tasks:
  - name: gsm8k_steps
    data: {{split: train, limit: 1}}   # one prompt: one sequence-length bucket to compile on the server
    tools: [finish]
    verifier: short_reply
    runtime: {{type: local}}
agent: {{max_turns: 1, max_context_tokens: 2048, on_no_tool_call: stop}}
# 12 samples of a reply that is short with p ~ 0.58: a group with equal rewards (no signal) has p ~ 0.001
sampling: {{temperature: 1.0, max_tokens: 6, n_samples: 12}}
dispatcher: {{type: async_pipeline, max_parallel_agents: 12}}
# Adam moves every LoRA weight by ~lr in its first steps: 2e-3 changes logprobs without wrecking the tiny model
backend: {{type: tinker, lr: 2.0e-3, lora: {{r: 8}}, mini_batches: 2, options: {{loss: ppo}}}}
train: {{steps: 2, batch_size: 1, eval_every: 0, eval_at_start: false, checkpoint_every: 1, keep_checkpoints: 3}}
"""


def skyrl_train(*args: str) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "skyrl_core.cli", "train", *args], env=dict(os.environ),
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-6000:]
    return proc


def train_records(out: Path) -> list[dict]:
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return [r for r in rows if r.get("kind") == "train"]


def checkpoint_state(out: Path, step: int) -> dict:
    return json.loads((out / "checkpoints" / f"step-{step:06d}" / "backend" / "tinker.json").read_text())


def read_trajectories(path: Path) -> list[Trajectory]:
    out = []
    for line in path.read_text().splitlines():
        row = json.loads(line)
        row.pop("id")
        row["transitions"] = [Transition(**t) for t in row["transitions"]]
        out.append(Trajectory(**row))
    return out


def prompt_logprobs(model_path: str | None, base_model: str, tokens: list[int]) -> np.ndarray:
    """Logprobs of ``tokens[1:]`` under the sampler weights at ``model_path`` (None: the base model)."""
    service = tinker.ServiceClient(base_url=os.environ["TINKER_BASE_URL"], api_key=os.environ["TINKER_API_KEY"])
    if model_path is None:
        client = service.create_sampling_client(base_model=base_model)
    else:
        client = service.create_sampling_client(model_path=model_path)
    client = client.result() if hasattr(client, "result") and not hasattr(client, "sample") else client
    # bounded: a server that died (e.g. stopped by its memory cap) must fail the test, not hang it
    values = client.compute_logprobs(tinker.ModelInput.from_ints(tokens)).result(timeout=600)
    return np.asarray([np.nan if v is None else v for v in values[1:]], dtype=np.float64)


@pytest.fixture(scope="module")
def run(local_server, tiny_model_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("tinker-run")
    config = root / "tinker.yaml"
    config.write_text(CONFIG.format(model=tiny_model_dir))
    out = root / "out"
    proc = skyrl_train(str(config), "--output", str(out))
    return config, out, proc.stdout


def test_two_steps_train_the_adapter(run, tiny_model_dir, local_server):
    config, out, log = run
    peak = local_server.peak_rss_mb()
    print(f"local Tinker server peak resident memory after 2 steps: {peak} MiB")
    assert peak is not None and 300 < peak < 4500  # the fixture's cap; measured figures in the README
    records = train_records(out)
    assert [r["step"] for r in records] == [1, 2]
    for r in records:
        assert r["train/datums"] > 0
        assert r["train/optim_steps"] == 2.0
        assert np.isfinite(r["train/loss"]) and r["train/loss"] != 0.0
        # the first mini-batch is trained on the sampler's own weights: the ratio starts at 1
        assert 0.5 < r["train/ratio_mean"] < 2.0
        assert 0.0 < r["reward_mean"] < 1.0  # some replies short, some not: a real learning signal
    assert records[0]["train/loss"] != records[1]["train/loss"]
    first, second = checkpoint_state(out, 1), checkpoint_state(out, 2)
    for state in (first, second):
        assert state["state_path"].startswith("tinker://") and state["sampler_path"].startswith("tinker://")
        assert state["base_model"] == tiny_model_dir and state["rank"] == 8 and state["loss"] == "ppo"
    assert first["sampler_path"] != second["sampler_path"]
    assert second["steps"] == 2
    # the API key never lands in the run directory
    for path in out.rglob("*"):
        if path.is_file() and path.suffix in (".json", ".jsonl", ".yaml"):
            assert "tml-local" not in path.read_text(errors="replace"), path


def test_the_adapters_sampled_logprobs_change(run, tiny_model_dir):
    _, out, _ = run
    trajectory = read_trajectories(out / "rollouts" / "step-000002.jsonl")[0]
    t = trajectory.transitions[0]
    tokens = list(t.input_ids) + list(t.output_ids)
    # newest first: the local server samples a saved checkpoint by loading it into the training adapter's slot
    # and skips the load when that checkpoint id was the last one loaded, even if training has moved the slot on
    # since (so asking for step 1 first would give the live step-2 weights); the bridge only ever samples the
    # newest save, which this does not affect
    step2 = prompt_logprobs(checkpoint_state(out, 2)["sampler_path"], tiny_model_dir, tokens)
    step1 = prompt_logprobs(checkpoint_state(out, 1)["sampler_path"], tiny_model_dir, tokens)
    base = prompt_logprobs(None, tiny_model_dir, tokens)
    assert np.nanmax(np.abs(step1 - base)) > 1e-4
    assert np.nanmax(np.abs(step2 - step1)) > 1e-4
    # the engine's logprobs of the step-2 rollout came from the step-1 adapter
    sampled = np.asarray(t.output_logprobs)
    assert np.allclose(step1[-len(sampled):], sampled, atol=2e-2)


def test_datums_from_the_runs_real_rollouts(run):
    from skyrl_tinker.datums import convert_batch

    _, out, _ = run
    trajectories = read_trajectories(out / "rollouts" / "step-000001.jsonl")
    assert {t.finish_reason for t in trajectories} <= {"no_tool_call", "max_tokens"}
    batch = build_training_batch(trajectories, "rloo")
    converted = convert_batch(batch)
    assert converted.datums and converted.skipped == sum(d.loss_mask == 0 for d in batch.data)
    for i, datum in zip(converted.sources, converted.datums):
        d = batch.data[i]
        tokens = d.prompt_ids + d.response_ids
        inputs = datum.loss_fn_inputs
        assert datum.model_input.to_ints() == tokens[:-1]
        assert inputs["target_tokens"].to_numpy().tolist() == tokens[1:]
        w = inputs["weights"].to_numpy()
        assert w.dtype == np.float32 and w.shape == (len(tokens) - 1,)
        assert w[: len(d.prompt_ids) - 1].sum() == 0 and w[len(d.prompt_ids) - 1:].tolist() == d.response_mask
        lp = inputs["logprobs"].to_numpy()
        assert np.allclose(lp[len(d.prompt_ids) - 1:], d.rollout_logprobs, atol=1e-6)
        assert np.all(lp[len(d.prompt_ids) - 1:] <= 0)
        assert np.allclose(inputs["advantages"].to_numpy(), w * d.advantage)


async def test_resume_restores_the_saved_adapter(run, tiny_model_dir):
    from skyrl_core.config import load_config
    from skyrl_core.plugins import get_registry
    from skyrl_tinker.backend import TinkerBackend
    from skyrl_tinker.engine import TinkerEngine

    config_path, out, _ = run
    saved = checkpoint_state(out, 2)
    config = load_config(config_path)
    assert get_registry().get("backends", "tinker") is not None
    engine = TinkerEngine(config)
    backend = TinkerBackend(config, engine)
    backend.load(out / "checkpoints" / "step-000002" / "backend")
    await backend.sync_weights(engine)  # restores the training client from the state, saves it for sampling
    assert engine.model_path is not None and engine.model_path != saved["sampler_path"]
    trajectory = read_trajectories(out / "rollouts" / "step-000001.jsonl")[0]
    tokens = list(trajectory.transitions[0].input_ids) + list(trajectory.transitions[0].output_ids)
    restored = prompt_logprobs(engine.model_path, tiny_model_dir, tokens)
    original = prompt_logprobs(saved["sampler_path"], tiny_model_dir, tokens)
    assert np.allclose(restored, original, atol=1e-5, equal_nan=True)
    await backend.close()
    await engine.close()


def test_cli_resume_continues_from_the_tinker_checkpoint(run):
    config, out, _ = run
    proc = skyrl_train(str(config), "train.steps=3", "--output", str(out), "--resume")
    assert "restored the adapter and optimizer state" in proc.stdout
    records = train_records(out)
    assert [r["step"] for r in records] == [1, 2, 3]
    third = checkpoint_state(out, 3)
    assert third["steps"] == 3
    assert third["state_path"] != checkpoint_state(out, 2)["state_path"]
