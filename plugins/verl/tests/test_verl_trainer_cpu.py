"""VeRL's own trainer on this CPU: ``skyrl verl launch verl:gsm8k-cpu`` runs VeRL's RayPPOTrainer (main_ppo_v0),
its FSDP2 actor and reference policy on gloo, its agent-loop workers running skyrl's agent loop, and rollouts
served by skyrl's hf engine as VeRL rollout ``skyrl`` (skyrl_verl/rollout.py) — two training steps, the weights
synced into the rollout server change, and nothing the run started outlives it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("verl")


def _processes_with(marker: str) -> list[str]:
    """Command lines of live processes whose environment holds ``marker`` (Ray's raylet, GCS, workers and every
    actor inherit the launcher's environment)."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            env = Path(f"/proc/{pid}/environ").read_bytes()
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if marker.encode() in env:
            found.append(f"{pid}: {cmd[:160]}")
    return found


def test_rollout_registers_in_verls_own_registries():
    from verl.workers.rollout.base import get_rollout_class
    from verl.workers.rollout.replica import get_rollout_replica_class

    from skyrl_verl import rollout

    assert get_rollout_class("skyrl", "async") is rollout.SkyrlServerAdapter
    assert get_rollout_replica_class("skyrl") is rollout.SkyrlReplica


def test_launcher_maps_engine_hf_to_the_skyrl_rollout(plugins):
    from skyrl_core.config import load_config
    from skyrl_verl.launcher import build_verl_config

    cfg = build_verl_config(load_config("verl:gsm8k-cpu", []), on_cpu=True)
    assert cfg.actor_rollout_ref.rollout.name == "skyrl"
    assert cfg.trainer.use_v1 is False and cfg.actor_rollout_ref.actor.strategy == "fsdp2"
    assert list(cfg.trainer.logger) == ["console", "file"]


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU route: this machine has CUDA")
def test_two_verl_trainer_steps_on_cpu_and_nothing_outlives_the_run(tmp_path):
    marker = f"SKYRL_VERL_TEST_{uuid.uuid4().hex}"
    env = {**os.environ, marker: "1", "OMP_NUM_THREADS": "1", "SKYRL_LOAD_PLUGINS": "verl"}
    out = tmp_path / "run"
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "skyrl_core.cli", "verl", "launch", "verl:gsm8k-cpu",
                           "--output", str(out)], env=env, capture_output=True, text=True, timeout=1500)
    elapsed = time.monotonic() - start
    assert proc.returncode == 0, (proc.stdout[-3000:], proc.stderr[-6000:])
    assert "VeRL trained 2 steps" in proc.stdout, proc.stdout[-3000:]
    from skyrl_verl.launcher import run_report

    report = run_report(out)
    assert report["steps"] == 2
    train = [m for m in report["metrics"] if "actor/pg_loss" in m]
    assert [m["step"] for m in train] == [1, 2]
    for m in train:
        # VeRL's actor ran its PPO update on a real batch: finite loss, a real gradient, rewards from skyrl's
        # verifier (gsm8k_steps scores in [0, 1])
        assert torch.isfinite(torch.tensor(m["actor/pg_loss"])) and m["actor/grad_norm"] > 0
        assert 0.0 <= m["critic/score/mean"] <= 1.0
    syncs = report["weight_syncs"]
    # VeRL's weight syncs into skyrl's engine: before step 1, then after each step; the first loads the initial
    # weights, every later one moves them
    assert [s["global_steps"] for s in syncs][-2:] == [1, 2] and len(syncs) == 3
    assert syncs[0]["max_abs_change_from_initial"] == 0.0
    assert syncs[-1]["max_abs_change_from_initial"] > 0.0
    rows = 2 * 2  # train.batch_size x sampling.n_samples, per step
    assert syncs[-1]["requests_served"] >= 2 * rows  # each trajectory called the engine at least once
    # every Ray process (workers, rollout server, agent-loop workers, raylet) and every sandbox is gone
    deadline = time.monotonic() + 30
    while _processes_with(marker) and time.monotonic() < deadline:
        time.sleep(1)
    assert _processes_with(marker) == []
    print(f"two VeRL trainer steps on the CPU in {elapsed:.0f} s")
