"""SkyRL-train's CPU route (``skyrl_skyrl_train.cpu``): the CUDA-to-CPU shim on SkyRL-train's own calls, and two
real SkyRL-train training steps (``RayPPOTrainer.train``, FSDP2 policy and reference workers on gloo) with skyrl's
generator on the hf engine."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU route: this machine has CUDA")

# SkyRL-train's own calls, as its worker and FSDP strategy make them (the file:line the shim names)
_UPSTREAM_CALLS = textwrap.dedent("""
    import os, sys, torch, torch.distributed as dist
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=sys.argv[1], WORLD_SIZE="1", RANK="0")
    def attempt(name, fn):
        try:
            out = fn()
            print(name, "ok", out)
        except Exception as exc:
            print(name, "fails", type(exc).__name__)
    if sys.argv[2] == "shim":
        from skyrl_skyrl_train.cpu import install_cuda_to_cpu_shim
        print("installed", install_cuda_to_cpu_shim(), install_cuda_to_cpu_shim())
    attempt("init_process_group", lambda: dist.init_process_group(backend="cpu:gloo,cuda:nccl")
            or dist.get_backend())                                            # workers/worker.py:124-126
    attempt("current_device", lambda: torch.cuda.current_device())              # distributed/fsdp_utils.py:83
    attempt("set_device", lambda: torch.cuda.set_device(0))                     # distributed/fsdp_strategy.py:109
    attempt("synchronize", lambda: torch.cuda.synchronize())                    # distributed/fsdp_strategy.py:132
    attempt("device_count", lambda: 1 % torch.cuda.device_count())              # workers/worker.py:427
    attempt("tensor_cuda", lambda: torch.ones(2).cuda().device)                 # distributed/fsdp_utils.py:125
    from torch.distributed.device_mesh import init_device_mesh
    attempt("mesh", lambda: init_device_mesh("cuda", mesh_shape=(1, 1), mesh_dim_names=("dp", "sp")).device_type)
    def wrapper():
        import skyrl.backends.skyrl_train.workers.model_wrapper as mw               # workers/model_wrapper.py:13
        import importlib.util
        return importlib.util.find_spec("flash_attn")
    attempt("model_wrapper", wrapper)
    print("cuda_available", torch.cuda.is_available())
""")


def _run(mode: str, port: int) -> dict[str, str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    if mode == "plain":  # without the shim the import needs compat's TypedDict fix to reach flash_attn at all
        code = "from skyrl_skyrl_train import compat; compat._patch_typeddict()\n" + _UPSTREAM_CALLS
    else:
        code = _UPSTREAM_CALLS
    out = subprocess.run([sys.executable, "-c", code, str(port), mode], capture_output=True, text=True,
                         timeout=600, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    return {line.split()[0]: " ".join(line.split()[1:]) for line in out.stdout.splitlines() if line.strip()}


def test_shim_turns_skyrl_trains_cuda_calls_into_cpu_calls():
    plain = _run("plain", 29611)
    # the old code: each of SkyRL-train's CUDA calls fails on a CPU torch
    for name in ("init_process_group", "current_device", "set_device", "synchronize", "device_count",
                 "tensor_cuda", "model_wrapper"):
        assert plain[name].startswith("fails"), (name, plain[name])
    shim = _run("shim", 29612)
    assert shim["installed"] == "True False"  # installs once, then is a no-op
    assert shim["init_process_group"] == "ok gloo"
    assert shim["current_device"] == "ok cpu"
    assert shim["set_device"] == "ok None" and shim["synchronize"] == "ok None"
    assert shim["device_count"] == "ok 0"  # 1 % 1
    assert shim["tensor_cuda"] == "ok cpu"
    assert shim["mesh"] == "ok cpu"
    # model_wrapper imports; afterwards no flash_attn is visible (the stand-in lived only for that import)
    assert shim["model_wrapper"] == "ok None"
    assert shim["cuda_available"] == "False"


def test_flash_attn_stand_in_raises_naming_the_key():
    code = ("from skyrl_skyrl_train.cpu import install_cuda_to_cpu_shim; install_cuda_to_cpu_shim()\n"
            "import skyrl.backends.skyrl_train.workers.model_wrapper as mw\n"
            "try:\n    mw.unpad_input(None, None)\nexcept RuntimeError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert "trainer.remove_microbatch_padding=false" in out.stdout, out.stderr[-2000:]


def test_cpu_route_config(plugins):
    from skyrl_core.config import load_config
    from skyrl_skyrl_train.launcher import build_skyrl_train_config, device_of

    config = load_config("skyrl-train:gsm8k-cpu", [])
    assert device_of(config) == "cpu"
    cfg = build_skyrl_train_config(config, device="cpu")
    t = cfg.trainer
    assert (t.flash_attn, t.bf16, t.remove_microbatch_padding, t.placement.colocate_all) == (False, False, False, False)
    assert t.placement.policy_num_gpus_per_node == 1 and t.algorithm.use_kl_loss
    # fp32 forwards in SkyRL-train's FSDP workers: without a mixed_precision section its strategy casts the
    # parameters to bf16 (fsdp_strategy.py:209), whatever trainer.bf16 says
    for role in (t.policy, t.ref):
        mp = role.fsdp_config.mixed_precision
        assert (mp.param_dtype, mp.reduce_dtype, mp.buffer_dtype) == ("fp32", "fp32", "fp32")
    assert cfg.generator.inference_engine.backend == "vllm"  # SkyRL-train's sampling format; hf serves it


def test_cpu_route_errors_name_the_key(plugins):
    from skyrl_core.config import load_config
    from skyrl_core.errors import ConfigError
    from skyrl_skyrl_train.launcher import check_supported, device_of

    with pytest.raises(ConfigError, match="engine.type"):
        check_supported(load_config("skyrl-train:gsm8k-cpu", ["engine.type=vllm"]), device="cpu")
    with pytest.raises(ConfigError, match="backend.options.device"):
        device_of(load_config("skyrl-train:gsm8k-cpu", ["backend.options.device=tpu"]))


@pytest.mark.slow
def test_two_skyrl_train_steps_on_cpu(plugins, tmp_path):
    """``skyrl train skyrl-train:gsm8k-cpu``'s launch: SkyRL-train's RayPPOTrainer.train runs two steps, the
    policy's weights change (its export, loaded into the rollout engine), every rollout hands skyrl's dispatcher
    the whole batch (all groups at once), every runtime started is released and the rollout session is closed."""
    from skyrl_core.config import load_config
    from skyrl_skyrl_train.launcher import launch

    config = load_config("skyrl-train:gsm8k-cpu", [])
    report = launch(config, output=tmp_path / "out")
    assert report["steps"] == 2
    assert report["weight_syncs"] == 3  # the initial sync, then one after each step
    assert report["checksum_after"] != report["checksum_before"]
    assert report["sessions"] == report["sessions_closed"] == 1
    # SkyRL-train's recomputed logprobs equal the hf engine's sampled ones to float32 noise (its bf16 FSDP
    # default gave a mean of 0.04-0.05 per token, max 0.29; the engine's batched decoding itself differs from a
    # fresh forward by up to 2e-3 on a token); a step without trainable tokens logs no value
    key = "policy/rollout_train_logprobs_abs_diff_"
    gaps = [(m[key + "mean"], m[key + "max"]) for m in report["metrics"] if key + "mean" in m]
    print("logprob gaps (mean, max) per step:", gaps)
    assert gaps and all(mean < 1e-3 and top < 1e-2 for mean, top in gaps), gaps
    rows = config.train.batch_size * config.sampling.n_samples
    assert [r["rows"] for r in report["rollouts"]] == [rows, rows]
    assert [r["groups"] for r in report["rollouts"]] == [config.train.batch_size] * 2
    for r in report["rollouts"]:
        assert r["runtime_starts"] == r["runtime_releases"] == rows  # no runtime outlives its rollout


async def test_generator_close_closes_its_rollout_session(plugins):
    """The launcher closes every generator it built (``_run_experiment``); a closed one refuses to roll out."""
    from skyrl_core.config import load_config
    from skyrl_core.default_plugins.engines.models import load_tokenizer
    from skyrl_skyrl_train.generator import SkyrlAgentGenerator

    config = load_config("skyrl-train:gsm8k-cpu", [])
    gen = SkyrlAgentGenerator(config, object(), load_tokenizer(config.model))
    closed = []
    session_close = gen.session.close

    async def close():
        closed.append(True)
        await session_close()

    gen.session.close = close
    await gen.close()
    await gen.close()  # twice: closes once
    assert gen.closed and closed == [True]
    with pytest.raises(RuntimeError, match="after close"):
        await gen.generate({"prompts": [[{"role": "user", "content": "1+1"}]]})
