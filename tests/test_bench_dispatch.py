"""The dispatch simulation: the engine stand-in's step model, determinism, and ``skyrl bench dispatch``."""

from __future__ import annotations

import asyncio
import json

import pytest

from skyrl_core.default_plugins.bench.clock import run_virtual
from skyrl_core.default_plugins.bench.dispatch import PROFILES, dispatcher_variants, make_workload, simulate
from skyrl_core.default_plugins.bench.engine import StandInEngine
from skyrl_core.inference.base import SamplingParams


def test_stand_in_engine_step_model():
    """Up to ``capacity`` requests per decode step; a step takes base + per_seq * batch seconds."""

    async def main():
        loop = asyncio.get_running_loop()
        engine = StandInEngine(capacity=2, base_s=0.1, per_seq_s=0.01)
        t0 = loop.time()
        done = {}

        async def req(name, tokens):
            out = await engine.generate([1, 2, 3], SamplingParams(max_tokens=tokens))
            done[name] = (loop.time() - t0, len(out.output_ids))

        await asyncio.gather(req("a", 3), req("b", 5), req("c", 2))
        await engine.close()
        return done, engine

    done, engine = run_virtual(main())
    full, single = 0.1 + 0.01 * 2, 0.1 + 0.01 * 1
    # a and b share steps; c waits in the queue and joins when a finishes after 3 steps
    assert done["a"] == (pytest.approx(3 * full), 3)
    assert done["b"] == (pytest.approx(5 * full), 5)
    assert done["c"] == (pytest.approx(5 * full), 2)
    assert engine.steps == 5
    stats = engine.stats.snapshot()
    assert stats["requests"] == 3 and stats["tokens_out"] == 10 and stats["in_flight"] == 0
    assert stats["busy_s"] == pytest.approx(5 * full)
    assert stats["occupancy_integral"] == pytest.approx(5 * full)  # always 2 of 2 slots busy
    del single


def test_workload_is_deterministic_and_profile_shaped():
    swe = PROFILES["swe"]
    a, b = make_workload(swe, 3), make_workload(swe, 3)
    assert [(s.init_s, s.turns, s.eval_s) for s in a] == [(s.init_s, s.turns, s.eval_s) for s in b]
    assert len(a) == swe.instances * swe.samples == 128
    step = swe.step_base_s + swe.step_per_seq_s * swe.capacity
    gen = sum(sum(t for t, _ in s.turns) * step for s in a) / len(a)
    init_eval = sum(s.init_s + s.eval_s for s in a) / len(a)
    assert 0.6 < init_eval / gen < 1.4  # "init + eval about as long as generation"
    light = make_workload(PROFILES["light"], 3)
    assert sum(s.init_s + s.eval_s for s in light) / len(light) < 0.2 * init_eval


@pytest.mark.timeout(120)
def test_simulation_same_seed_same_result_and_no_leak():
    profile = PROFILES["light"]
    cfg = dispatcher_variants(profile)["async_pipeline_auto"]
    m1 = run_virtual(simulate(profile, cfg, 0))
    m2 = run_virtual(simulate(profile, cfg, 0))
    assert m1["wall_s"] == m2["wall_s"] and m1["peak_runtimes"] == m2["peak_runtimes"]
    assert m1["leaked_runtimes"] == 0 and m1["n_failed"] == 0 and m1["n_ok"] == 128
    assert 0 < m1["mean_occupancy"] <= m1["engine_busy"] <= 1.0
    bounded = run_virtual(simulate(profile, dispatcher_variants(profile)["async_batch_bounded"], 0))
    assert bounded["peak_runtimes"] == 32
    assert m1["wall_s"] <= bounded["wall_s"]  # light profile: the pipeline is never slower than bounded batch


@pytest.mark.timeout(300)
def test_bench_dispatch_cli_writes_results_and_png(tmp_path):
    from click.testing import CliRunner

    from skyrl_core.cli import build_cli

    result = CliRunner().invoke(build_cli(), ["bench", "dispatch", "--quick", "--profile", "light",
                                              "--output", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "async_pipeline_auto" in result.output
    data = json.loads((tmp_path / "results.json").read_text())
    rows = data["dispatchers"]
    assert set(rows) == {"async_batch", "async_batch_bounded", "async_pipeline", "async_pipeline_auto", "priority",
                         "priority_first_epoch", "priority_remembered"}
    first = rows["priority_first_epoch"]  # nothing remembered: every priority unset, the group-cost fallback
    assert first["remembered_instances"] == [0] and first["priority_sources"]["unset"] == 128
    assert "previous_epoch_wall_s" not in first
    assert first["per_seed_wall_s"] == rows["async_pipeline_auto"]["per_seed_wall_s"]
    assert first["per_seed_peak_runtimes"] == rows["async_pipeline_auto"]["per_seed_peak_runtimes"]
    remembered = rows["priority_remembered"]
    assert remembered["remembered_instances"] == [16] and len(remembered["previous_epoch_wall_s"]) == 1
    assert remembered["priority_sources"]["memory"] == 128  # every trajectory ordered by what it cost before
    assert remembered["per_seed_wall_s"] == [remembered["wall_s"]] and remembered["per_seed_peak_runtimes"]
    for row in rows.values():
        for key in ("wall_s", "speedup_vs_bounded", "engine_busy", "mean_occupancy", "peak_runtimes",
                    "runtime_s_per_traj"):
            assert row[key] > 0
    assert rows["async_batch_bounded"]["speedup_vs_bounded"] == 1.0
    assert rows["async_batch"]["peak_runtimes"] == 128
    assert any(t["target"].startswith("light:") for t in data["targets"])
    png = (tmp_path / "dispatch_timeline.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 20_000


def test_previous_epoch_keeps_instances_and_redraws_samples():
    """epoch != 0: the same instances (medians, turn means, parametric priority), fresh per-sample draws;
    epoch 0 is the workload every variant measures (the ideal-wall pin below guards it)."""
    swe = PROFILES["swe"]
    now, before = make_workload(swe, 2), make_workload(swe, 2, epoch=-1)
    assert len(before) == len(now) == 128
    assert [s.priority for s in before] == [s.priority for s in now]
    assert all(a.init_s != b.init_s and a.eval_s != b.eval_s for a, b in zip(before, now))
    assert [(s.init_s, s.turns) for s in before] == [(s.init_s, s.turns) for s in make_workload(swe, 2, epoch=-1)]
    # per instance the epochs' sample means agree within the per-sample spread (sigma 0.25 / 0.2, 8 samples)
    for k in range(swe.instances):
        a = sum(s.eval_s for s in now[8 * k:8 * k + 8]) / 8
        b = sum(s.eval_s for s in before[8 * k:8 * k + 8]) / 8
        assert 0.7 < a / b < 1.4


@pytest.mark.timeout(120)
def test_remembered_priorities_come_from_the_previous_epochs_measurements():
    from skyrl_core.default_plugins.bench.dispatch import remembered_variants, simulate_remembered
    from skyrl_core.default_plugins.dispatchers.stage_costs import StageCostMemory

    profile = PROFILES["light"]
    cfg, previous = remembered_variants(profile)["priority_remembered"]
    assert cfg.type == "priority" and previous.auto and previous.type == "async_pipeline"
    m = run_virtual(simulate_remembered(profile, cfg, previous, 0))
    assert m["remembered_instances"] == 16 and m["priority_sources"]["memory"] == 128
    assert m["n_ok"] == 128 and m["leaked_runtimes"] == 0 and m["previous_wall_s"] > 0
    # the previous epoch alone, recorded the same way: its per-instance means are what the measured epoch used
    memory = StageCostMemory()
    run_virtual(simulate(profile, previous, 0, epoch=-1, memory=memory))
    specs = make_workload(profile, 0, epoch=-1)
    for k in range(profile.instances):
        means = memory.stage_means(f"sim-light:sim-{k}")
        assert means["init"] == pytest.approx(sum(s.init_s for s in specs[8 * k:8 * k + 8]) / 8, rel=1e-6)
        assert means["eval"] == pytest.approx(sum(s.eval_s for s in specs[8 * k:8 * k + 8]) / 8, rel=1e-6)
        assert memory.count(f"sim-light:sim-{k}") == 8


def test_bench_rejects_unknown_profile(tmp_path):
    from click.testing import CliRunner

    from skyrl_core.cli import build_cli

    result = CliRunner().invoke(build_cli(), ["bench", "dispatch", "--profile", "gpu", "--output", str(tmp_path)])
    assert result.exit_code != 0
    assert "valid: swe, light" in str(result.exception) + result.output


def test_real_bench_rejects_bad_spec():
    from skyrl_core.default_plugins.bench.real import RealBenchSpec, real_variants
    from skyrl_core.errors import ConfigError

    with pytest.raises(ConfigError, match="valid: gsm8k, gsm8k_steps"):
        RealBenchSpec(task="swe").validate()
    with pytest.raises(ConfigError, match="--max-tokens must be at least 1"):
        RealBenchSpec(max_tokens=0).validate()
    with pytest.raises(ConfigError, match="async_batch_bounded"):
        real_variants(RealBenchSpec(dispatchers=("async_batch",)))
    with pytest.raises(ConfigError, match="valid: async_batch, async_batch_bounded"):
        real_variants(RealBenchSpec(dispatchers=("fifo", "async_batch_bounded")))
    variants = real_variants(RealBenchSpec(max_parallel_agents=3))
    assert set(variants) == {"async_batch", "async_batch_bounded", "async_pipeline", "async_pipeline_auto",
                             "priority"}
    assert all(v.max_parallel_agents == 3 for v in variants.values())
    assert variants["async_pipeline_auto"].auto and variants["priority"].auto


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_bench_dispatch_real_cpu_stack(tmp_path):
    """Every dispatcher on the real stack (hf SmolLM2, gsm8k_steps, python tool in bubblewrap): every trajectory
    accounted for and released, no sandbox workspace left behind, the real engine's metrics in range."""
    from click.testing import CliRunner

    from skyrl_core.cli import build_cli

    args = ["bench", "dispatch", "--real", "--task", "gsm8k_steps", "--instances", "2", "--samples", "2",
            "--max-turns", "2", "--max-tokens", "16", "--max-batch", "2", "--max-parallel-agents", "2",
            "--threads", "1", "--output", str(tmp_path)]
    result = CliRunner().invoke(build_cli(), args)
    assert result.exit_code == 0, result.output
    data = json.loads((tmp_path / "results_real.json").read_text())
    assert data["mode"] == "real" and data["torch_threads"] == 1
    rows = data["dispatchers"]
    assert set(rows) == {"async_batch", "async_batch_bounded", "async_pipeline", "async_pipeline_auto", "priority"}
    for name, row in rows.items():
        assert row["n_trajectories"] == 4 and row["n_ok"] + row["n_failed"] == 4, name
        assert sum(row["finish_reasons"].values()) == 4 and "None" not in row["finish_reasons"], name
        assert not any(k.startswith("error_") for k in row["failures"]), (name, row["failures"])
        assert row["runtime_starts"] == row["runtime_releases"] == row["released_callbacks"] == 4, name
        assert row["leftover_workspaces"] == 0 and row["leaked_runtimes"] == 0 and row["accounted"], name
        assert row["release_errors"] == 0
        assert 0 < row["mean_occupancy"] <= row["engine_busy"] <= 1.0, name
        assert row["wall_s"] > 0 and row["runtime_s_per_traj"] > 0 and row["speedup_vs_bounded"] > 0
        assert 1 <= row["peak_runtimes"] <= 4
        assert row["tokens_out"] >= row["engine_requests"] >= 4  # at least one turn per trajectory
        assert 1 <= row["turns_mean"] <= 2
    assert rows["async_batch_bounded"]["speedup_vs_bounded"] == 1.0
    assert rows["async_batch_bounded"]["peak_runtimes"] <= 2  # max_parallel_agents honoured for real
    assert "async_pipeline_auto" in result.output and "leaked" in result.output
    assert json.loads((tmp_path / "timelines_real.json").read_text())["async_batch"]["runtimes"][0] == 0


def test_ideal_wall_is_a_lower_bound():
    """No dispatcher beats the engine-saturated / critical-path lower bound on the same workload."""
    from skyrl_core.default_plugins.bench.dispatch import ideal_wall_s

    profile = PROFILES["light"]
    bound = ideal_wall_s(profile, 0)
    assert bound["ideal"] == max(bound["engine_bound"], bound["critical_path"]) > 0
    for name in ("async_batch", "async_pipeline_auto"):
        m = run_virtual(simulate(profile, dispatcher_variants(profile)[name], 0))
        assert m["wall_s"] >= bound["ideal"]
    swe = ideal_wall_s(PROFILES["swe"], 0)
    assert swe["engine_bound"] == pytest.approx(621, abs=1)  # the figure docs/dispatchers.md quotes


class SerialDispatcher:
    """A test plugin's dispatcher on the bare public base: one trajectory at a time, init -> run -> eval, release
    always; it returns no figures of its own, so every one in the bench's row is measured by the bench."""

    def __init__(self) -> None:
        from skyrl_core.dispatchers import Dispatcher

        class Serial(Dispatcher):
            name = "serial_test"

            async def dispatch(self, trajectories, stages):
                for traj in trajectories:
                    try:
                        await stages.init(traj)
                        await stages.run(traj)
                        await stages.eval(traj)
                    finally:
                        await stages.release(traj)
                return {"dispatcher": self.name}

        self.cls = Serial

    @property
    def hookimpls(self):
        from skyrl_core import hookimpl

        cls = self.cls

        class Plugin:
            @hookimpl
            def register_dispatchers(self, register):
                register(cls)

        return Plugin()


def test_bench_dispatch_runs_a_plugins_dispatcher_from_the_registry(plugins, tmp_path):
    from click.testing import CliRunner

    from skyrl_core import plugins as plugins_mod
    from skyrl_core.cli import build_cli

    plugin = SerialDispatcher()
    plugins.register_plugin(plugin.hookimpls, "serial-test-plugin")
    assert plugins_mod.get_plugins() is plugins  # the CLI reads the process-wide manager
    assert plugins.registry.entries["dispatchers"]["serial_test"].plugin == "serial-test-plugin"
    result = CliRunner().invoke(build_cli(), ["bench", "dispatch", "--quick", "--profile", "light",
                                              "--dispatcher", "serial_test", "--output", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "serial_test" in result.output
    data = json.loads((tmp_path / "results.json").read_text())
    rows = data["dispatchers"]
    assert set(rows) == {"serial_test", "async_batch_bounded"}  # the baseline always runs beside it
    serial, bounded = rows["serial_test"], rows["async_batch_bounded"]
    assert serial["config"]["type"] == "serial_test"
    assert serial["config"]["max_parallel_agents"] == PROFILES["light"].max_parallel_agents
    assert serial["peak_runtimes"] == 1 and serial["leaked_runtimes"] == 0 and serial["n_failed"] == 0
    # one at a time is slower than max_parallel_agents at a time, on the same workload
    assert serial["wall_s"] > bounded["wall_s"] > 0 and serial["speedup_vs_bounded"] < 1.0
    assert data["command"].endswith("--dispatcher serial_test")
    assert (tmp_path / "dispatch_timeline.png").read_bytes()[:4] == b"\x89PNG"


def test_bench_dispatch_names_the_valid_dispatchers_for_an_unknown_one(plugins, tmp_path):
    from click.testing import CliRunner

    from skyrl_core.cli import build_cli

    result = CliRunner().invoke(build_cli(), ["bench", "dispatch", "--quick", "--profile", "light",
                                              "--dispatcher", "no_such", "--output", str(tmp_path)])
    assert result.exit_code != 0
    message = str(result.exception) + result.output
    assert "'no_such': not a registered dispatcher" in message
    assert "async_pipeline" in message and "priority_remembered" in message
    assert not (tmp_path / "results.json").exists()
