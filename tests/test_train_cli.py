"""`skyrl train`: data cursor, checkpoints (atomic, disk full), metrics, plot, and end-to-end runs with the real
rollout session on a tiny randomly initialised model (kill and --resume give the same step k+1 inputs)."""

from __future__ import annotations

import errno
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from skyrl_core.checkpoint import (CheckpointError, latest_checkpoint, list_checkpoints, load_checkpoint,
                                   save_checkpoint)
from skyrl_core.default_plugins.trainer.metrics import read_jsonl
from skyrl_core.default_plugins.trainer.runlog import MetricsLogger
from skyrl_core.training import DataCursor

REPO = Path(__file__).resolve().parents[1]


class FileBackend:
    """A minimal real Backend-shaped object for checkpoint tests: it saves and loads one file."""

    def __init__(self, payload: str = "", fail: Exception | None = None) -> None:
        self.payload = payload
        self.fail = fail

    def save(self, directory):
        (Path(directory) / "weights.txt").write_text(self.payload)
        if self.fail is not None:
            raise self.fail

    def load(self, directory):
        self.payload = (Path(directory) / "weights.txt").read_text()


def test_data_cursor_is_deterministic_and_resumable():
    a = DataCursor(10, seed=7)
    steps = [a.take(4) for _ in range(5)]  # crosses two epoch boundaries
    assert sorted(steps[0] + steps[1] + steps[2][:2]) == list(range(10))  # epoch 0 is a permutation
    b = DataCursor(10, seed=7, position=12)
    assert b.take(4) == steps[3]
    assert DataCursor(10, seed=8).take(10) != DataCursor(10, seed=7).take(10)


def test_checkpoint_is_atomic_and_keeps_the_newest(tmp_path):
    import torch

    random.seed(1)
    torch.manual_seed(1)
    for step in (1, 2, 3):
        save_checkpoint(tmp_path, step, FileBackend(f"w{step}"), {"cursor": step * 4}, keep=2)
    assert [s for s, _ in list_checkpoints(tmp_path)] == [2, 3]
    expected = (random.random(), float(torch.rand(1)))
    # a full disk while writing step 4: the error names the directory, step 3 stays intact and latest
    disk_full = OSError(errno.ENOSPC, "No space left on device")
    with pytest.raises(CheckpointError, match="step-000004.*No space left.*previous checkpoint is intact"):
        save_checkpoint(tmp_path, 4, FileBackend("w4", fail=disk_full), {"cursor": 16})
    assert latest_checkpoint(tmp_path).name == "step-000003"
    assert not list(tmp_path.glob(".tmp-*"))
    backend = FileBackend()
    state = load_checkpoint(latest_checkpoint(tmp_path), backend)
    assert state == {"cursor": 12, "step": 3} and backend.payload == "w3"
    assert (random.random(), float(torch.rand(1))) == expected  # RNG restored to the checkpoint's state
    with pytest.raises(CheckpointError, match="not a checkpoint"):
        load_checkpoint(tmp_path, backend)


def test_metrics_jsonl_truncates_on_resume_and_plot(tmp_path):
    from skyrl_core.config import Config, LoggingConfig
    from skyrl_core.default_plugins.trainer.plots import plot_run

    logger = MetricsLogger(tmp_path, Config(logging=LoggingConfig(tensorboard=True)))
    for step in range(4):
        logger.log({"kind": "train", "step": step, "reward_mean": step / 4, "mean_turns": 2.0,
                    "tool_calls_per_trajectory": 1.0, "nan": float("nan")})
        if step % 2 == 0:
            logger.log({"kind": "eval", "step": step, "pass@1": 0.1 * step})
    with (tmp_path / "metrics.jsonl").open("a") as f:
        f.write('{"kind": "train", "st')  # torn line from a kill mid-write
    kept = logger.truncate_after(2)
    logger.close()
    # the built-in logger ``plot`` (always on) drew the kept records when the loggers closed
    assert (tmp_path / "training.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert [(r["kind"], r["step"]) for r in kept] == [("train", 0), ("eval", 0), ("train", 1), ("train", 2),
                                                      ("eval", 2)]
    assert read_jsonl(tmp_path / "metrics.jsonl")[0]["nan"] is None
    assert list((tmp_path / "tensorboard").glob("events.out.tfevents.*"))
    png = plot_run(kept, tmp_path / "training.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000


def test_the_logger_keeping_the_runs_record_stops_the_run_when_it_fails(tmp_path):
    """Loggers come from the registry by name (here a plugin's ``jsonl`` and ``plot``): the one with
    ``truncate_after`` keeps the run's record (resume reads it back), so its failure raises; another is dropped."""
    from skyrl_core.config import LoggingConfig

    class Record:
        def __init__(self, output, config):
            self.rows = []

        def truncate_after(self, step):
            self.rows = [r for r in self.rows if r["step"] <= step]
            return list(self.rows)

        def log(self, record):
            if record.get("disk_full"):
                raise OSError("no space left on device")
            self.rows.append(record)

        def close(self):
            pass

    class Flaky:
        def __init__(self, output, config):
            pass

        def log(self, record):
            raise RuntimeError("flaky")

        def close(self):
            pass

    class Registry:
        def get(self, kind, name):
            assert kind == "loggers"
            return {"jsonl": Record, "plot": Flaky}[name]

    logger = MetricsLogger(tmp_path, registry=Registry())
    for step in (1, 2, 3):
        logger.log({"kind": "train", "step": step, "nan": float("nan")})
    assert list(logger.sinks) == ["jsonl"]  # the flaky one was dropped at the first record
    assert logger.truncate_after(2) == [{"kind": "train", "step": 1, "nan": None}, {"kind": "train", "step": 2,
                                                                                    "nan": None}]
    with pytest.raises(OSError, match="no space left"):
        logger.log({"kind": "train", "step": 3, "disk_full": True})


# -- end to end through the CLI, real rollout session, tiny random model ----------------------------------------
@pytest.fixture(scope="module")
def tiny_run_config(tiny_chat_model_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("tiny-train")
    config = root / "tiny.yaml"
    config.write_text(f"""\
model: {tiny_chat_model_dir}
engine: {{type: hf, max_batch: 8}}
tasks:
  - name: gsm8k_steps
    data: {{split: train, limit: 6}}
    eval_data: {{split: test, limit: 3}}
agent: {{max_turns: 2, max_context_tokens: 1024}}
sampling: {{max_tokens: 8, n_samples: 2}}
dispatcher: {{type: async_pipeline, max_parallel_agents: 4}}
train: {{steps: 4, batch_size: 2, eval_every: 0, eval_at_start: false, checkpoint_every: 2}}
""")
    return config


def interruptible() -> None:
    """In the child before exec: Ctrl-C back to its default. A shell without job control starts background jobs
    with SIGINT ignored, and an ignored signal stays ignored across exec (Python then installs no handler)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def skyrl(*args, **kw):
    env = {**os.environ, "SKYRL_LOAD_PLUGINS": ""}
    return subprocess.Popen([sys.executable, "-m", "skyrl_core.cli", *map(str, args)], env=env, cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            preexec_fn=interruptible, **kw)


def train_records(out: Path) -> list[dict]:
    return [r for r in read_jsonl(out / "metrics.jsonl") if r["kind"] == "train"]


def ran_to_the_end(returncode: int, log: str) -> bool:
    """A run that finished its steps: exit 0, or exit 1 because no step had trainable data (the tiny random
    model earns reward 0 on every sample, so no group has an advantage; see
    test_a_run_that_trains_nothing_says_why_and_exits_nonzero)."""
    return returncode == 0 or (returncode == 1 and "no step of this run updated the policy" in log)


def wait_for(predicate, proc, timeout=240.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        if proc.poll() is not None:
            pytest.fail(f"run ended before the expected point:\n{proc.stdout.read()}")
        time.sleep(0.05)
    proc.kill()
    pytest.fail("timed out waiting for the run")


@pytest.mark.slow
def test_kill_and_resume_gives_the_same_next_step_inputs(tiny_run_config, tmp_path):
    straight = tmp_path / "straight"
    p = skyrl("train", tiny_run_config, "--output", straight)
    log = p.communicate(timeout=400)[0]
    assert ran_to_the_end(p.returncode, log), log
    ref = train_records(straight)
    assert [r["step"] for r in ref] == [1, 2, 3, 4]
    assert (straight / "training.png").is_file() and latest_checkpoint(straight / "checkpoints").name == "step-000004"
    model_dir = straight / "checkpoints" / "step-000004" / "backend" / "model"
    assert (model_dir / "config.json").is_file() and list(model_dir.glob("*.safetensors"))

    killed = tmp_path / "killed"
    p = skyrl("train", tiny_run_config, "--output", killed)
    wait_for(lambda: (killed / "checkpoints" / "step-000002" / "state.json").is_file(), p)
    p.send_signal(signal.SIGKILL)
    p.communicate(timeout=60)
    assert latest_checkpoint(killed / "checkpoints").name == "step-000002"
    # without --resume an existing run is refused, naming the flag
    p = skyrl("train", tiny_run_config, "--output", killed)
    out = p.communicate(timeout=120)[0]
    assert p.returncode == 2 and "--resume" in out
    p = skyrl("train", tiny_run_config, "--output", killed, "--resume")
    out = p.communicate(timeout=400)[0]
    assert ran_to_the_end(p.returncode, out), out
    resumed = train_records(killed)
    assert [r["step"] for r in resumed] == [1, 2, 3, 4]  # nothing lost, nothing repeated
    assert [r["instances"] for r in resumed] == [r["instances"] for r in ref]
    # steps 1-3 cover the 6 instances once (epoch 0), step 4 starts epoch 1
    seen = [i for r in ref[:3] for i in r["instances"]]
    assert len(set(seen)) == 6
    # stage-cost memory (skyrl_core/default_plugins/dispatchers/stage_costs.py): nothing known at step 1, the mean
    # of known instances for new ones in steps 2-3, each instance's own measured cost when it comes back in
    # epoch 1; checkpoints carry it (state.json's dispatch_memory)
    assert [r["dispatch/priority_from_unset"] for r in ref] == [4, 0, 0, 0]
    assert [r["dispatch/priority_from_mean"] for r in ref] == [0, 4, 4, 0]
    assert [r["dispatch/priority_from_memory"] for r in ref] == [0, 0, 0, 4]
    assert [r["dispatch/costs_remembered_instances"] for r in ref] == [2, 4, 6, 6]
    costs = json.loads((straight / "checkpoints" / "step-000004" / "state.json").read_text())["dispatch_memory"]
    assert sorted(e["n"] for e in costs["entries"].values()) == [2, 2, 2, 2, 4, 4]
    # the resumed run restored the 4 instances its step-2 checkpoint remembered
    assert [r["dispatch/costs_remembered_instances"] for r in resumed] == [2, 4, 6, 6]
    assert resumed[3]["dispatch/priority_from_memory"] == 4


@pytest.mark.slow
def test_ctrl_c_saves_a_checkpoint(tiny_run_config, tmp_path):
    out = tmp_path / "interrupted"
    p = skyrl("train", tiny_run_config, "train.checkpoint_every=100", "--output", out)
    wait_for(lambda: len(train_records(out)) >= 1, p)
    p.send_signal(signal.SIGINT)
    log = p.communicate(timeout=120)[0]
    assert p.returncode == 130, log
    ckpt = latest_checkpoint(out / "checkpoints")
    assert ckpt is not None, log
    state = json.loads((ckpt / "state.json").read_text())
    assert state["cursor"] == state["step"] * 2 and state["step"] == len(train_records(out))


def test_sampled_eval_is_seeded_so_evals_compare_on_common_random_numbers(tiny_run_config, tmp_path):
    """With ``sampling.seed`` unset, two step-0 evals at temperature 1 draw the same tokens per instance (a
    fixed eval seed from ``train.seed``); another ``train.seed`` draws others."""
    outputs = {}
    for name, seed in (("a", 0), ("b", 0), ("c", 5)):
        proc = skyrl("train", tiny_run_config, "train.steps=0", "train.eval_at_start=true",
                     "train.eval_temperature=1.0", f"train.seed={seed}", "--output", tmp_path / name)
        out, _ = proc.communicate(timeout=240)
        assert proc.returncode == 0, out
        rows = read_jsonl(tmp_path / name / "rollouts" / "eval-000000.jsonl")
        outputs[name] = [[t["output_ids"] for t in r["transitions"]] for r in rows]
    assert len(outputs["a"]) == 3 and all(outputs["a"])
    assert outputs["a"] == outputs["b"]
    assert outputs["a"] != outputs["c"]


def test_a_run_that_trains_nothing_says_why_and_exits_nonzero(tiny_run_config, tmp_path):
    """A random model earns reward 0 on every sample: every group has zero advantage and no step has trainable
    data. This printed ``done: 1 steps`` and exited 0; now each such step is a warning naming why, and the
    summary says the policy was never updated, with exit status 1."""
    out = tmp_path / "nothing"
    proc = skyrl("train", tiny_run_config, "train.steps=1", "train.batch_size=1", "train.checkpoint_every=0",
                 "--output", out)
    log = proc.communicate(timeout=300)[0]
    assert proc.returncode == 1, log
    why = "all 1 groups had zero advantage (every sample of a group got the same reward; rewards seen: 0)"
    assert f"step 1 trained nothing: {why}" in log
    assert f"1 of 1 steps trained nothing: {why} (1 step)" in log
    assert "no step of this run updated the policy" in log
    (record,) = train_records(out)
    assert record["trainable_data"] == 0 and record["no_update"] == why


def test_the_run_writes_to_the_logger_the_registry_names_run(tiny_run_config, tmp_path, plugins):
    """The core asks the registry for the logger ``run`` (training.RUN_LOG): a plugin's replaces the built-in
    fan-out, receives every record and every rollout (its ``log_rollout`` figures go into the records), and its
    ``truncate_after`` is what a run starts from; the built-in's files (metrics.jsonl, rollouts/) are then not
    written. A logger without ``log_rollout`` (the contract's optional member) gives records without figures."""
    import asyncio

    from skyrl_core import hookimpl
    from skyrl_core.config import load_config
    from skyrl_core.training import RUN_LOG, TrainRun

    seen: dict = {"records": [], "rollouts": [], "truncated": [], "closed": 0}

    class Recording:
        def __init__(self, output, config):
            seen["built"] = (output, config.train.steps)

        def truncate_after(self, step):
            seen["truncated"].append(step)
            return []

        def log_rollout(self, name, trajectories):
            seen["rollouts"].append((name, len(trajectories)))
            return {"my_figure": 7.0}

        def log(self, record):
            seen["records"].append(record)

        def close(self):
            seen["closed"] += 1

    class Plugin:
        @hookimpl(tryfirst=True)
        def register_loggers(self, register):
            register(Recording, name=RUN_LOG)

    plugins.register_plugin(Plugin(), "my-run-log")
    assert plugins.registry.entries["loggers"]["run"].plugin == "my-run-log"
    cfg = load_config(tiny_run_config, ["train.steps=1", "train.batch_size=1", "sampling.n_samples=1",
                                        "train.eval_at_start=true", "train.checkpoint_every=0"])
    summary = asyncio.run(TrainRun(cfg, tmp_path / "run").run())
    assert summary["steps"] == 1 and seen["built"] == (tmp_path / "run", 1)
    assert seen["truncated"] == [-1] and seen["closed"] == 1
    assert seen["rollouts"] == [("eval-000000", 3), ("step-000001", 1), ("eval-000001", 3)]  # the last step evals
    assert [(r["kind"], r["step"], r["my_figure"]) for r in seen["records"]] == [("eval", 0, 7.0), ("train", 1, 7.0),
                                                                                 ("eval", 1, 7.0)]
    assert "reward_mean" not in seen["records"][1]  # the figures are the logger's
    assert not (tmp_path / "run" / "metrics.jsonl").exists() and not (tmp_path / "run" / "rollouts").exists()

    del Recording.log_rollout  # a logger that keeps no rollouts: records without figures, pass@1 0
    seen["records"].clear()
    asyncio.run(TrainRun(cfg, tmp_path / "bare").run())
    assert seen["records"][0]["pass@1"] == 0.0 and "my_figure" not in seen["records"][1]


def test_progress_names_each_phase_and_checkpoints_are_announced_with_size(tiny_run_config, tmp_path):
    import asyncio
    import logging

    from skyrl_core.config import load_config
    from skyrl_core.training import TrainRun

    phases: list[str] = []
    notes: list[str] = []
    catch = logging.Handler()
    catch.emit = lambda record: notes.append(record.getMessage())
    note_log = logging.getLogger("skyrl.note")
    level = note_log.level
    note_log.addHandler(catch)
    note_log.setLevel(logging.INFO)  # notes are INFO: the CLI turns them on (skyrl_core.notes.show_notes)
    cfg = load_config(tiny_run_config, ["train.steps=1", "train.batch_size=1", "sampling.n_samples=1",
                                        "train.eval_at_start=true", "train.eval_every=1", "train.checkpoint_every=1"])
    try:
        asyncio.run(TrainRun(cfg, tmp_path / "run", on_rollout=lambda p, d, t: phases.append(p)).run())
    finally:
        note_log.removeHandler(catch)
        note_log.setLevel(level)
    assert list(dict.fromkeys(phases)) == ["eval before training", "rollouts for step 1", "eval after step 1"]
    ckpt = tmp_path / "run" / "checkpoints" / "step-000001"
    (line,) = [n for n in notes if n.startswith("checkpoint of step 1: ")]
    assert line.startswith(f"checkpoint of step 1: {ckpt} (") and line.endswith(("kB)", "MB)"))


def test_no_data_reason_names_failed_masked_and_cut_trajectories():
    from skyrl_core.postprocess import build_training_batch
    from skyrl_core.training import no_data_reason, trainable_data
    from skyrl_core.transitions import Trajectory, Transition

    def traj(k, reward, reason=None, error=None, tokens=True):
        t = Trajectory(instance_id="i", sample_index=k, task="t", group_id="t:i", reward=reward,
                       finish_reason=reason, error=error, masked=reason in ("max_tokens", "error_init"))
        if tokens:
            t.transitions = [Transition(input_ids=[1, 2], output_ids=[3, 4], output_logprobs=[-1.0, -1.0],
                                        finish_reason="length")]
        return t

    failed = [traj(k, 0.0, "error_init", "init raised OSError: no such file", tokens=False) for k in range(2)]
    assert no_data_reason(failed, build_training_batch(failed)) == \
        "none of the 2 trajectories produced a token (first error: init raised OSError: no such file)"
    cut = [traj(0, 1.0, "max_tokens", "hit max_tokens"), traj(1, 0.0, "max_tokens", "hit max_tokens")]
    batch = build_training_batch(cut)
    assert trainable_data(batch) == 0 and len(batch.data) == 2  # data there, all loss-masked
    assert no_data_reason(cut, batch) == ("every trajectory with a non-zero advantage was loss-masked (finish "
                                          "reasons: max_tokens 2) (max_tokens: cut at sampling.max_tokens)")
    fine = [traj(0, 1.0, "finished"), traj(1, 0.0, "finished")]
    assert trainable_data(build_training_batch(fine)) == 2


def test_resume_refuses_a_changed_data_order_naming_the_keys(tiny_run_config, tmp_path):
    """A checkpoint stores the data fingerprint; --resume with another train.seed or data.limit is an error
    naming those keys (the cursor would index another order), unless the change is accepted explicitly."""
    import asyncio

    from skyrl_core.config import load_config
    from skyrl_core.errors import SkyrlError
    from skyrl_core.training import TrainRun

    out = tmp_path / "run"
    base = ["train.steps=1", "train.checkpoint_every=1", "sampling.n_samples=1", "train.batch_size=1"]
    asyncio.run(TrainRun(load_config(tiny_run_config, base), out).run())
    state = json.loads((latest_checkpoint(out / "checkpoints") / "state.json").read_text())
    assert state["data_fingerprint"]["train.seed"] == 0
    assert state["data_fingerprint"]["tasks.0.data.limit"] == 6
    assert state["data_fingerprint"]["train_instances"].startswith("6:")

    changed = load_config(tiny_run_config, base + ["train.steps=2", "train.seed=3", "data.limit=5"])
    with pytest.raises(SkyrlError) as err:
        asyncio.run(TrainRun(changed, out, resume=True).run())
    message = str(err.value)
    assert "train.seed: 0 -> 3" in message and "tasks.0.data.limit: 6 -> 5" in message
    assert "train_instances" in message and "--accept-data-change" in message
    assert len(train_records(out)) == 1  # nothing ran
    # the same config resumes; a changed one resumes when accepted
    summary = asyncio.run(TrainRun(changed, out, resume=True, accept_data_change=True).run())
    assert summary["steps"] == 2 and [r["step"] for r in train_records(out)] == [1, 2]
