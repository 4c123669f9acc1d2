"""Launch VeRL's own PPO trainer (Ray, FSDP actors, vLLM/SGLang rollout servers) on a skyrl config.

:func:`build_verl_config` turns a skyrl :class:`~skyrl_core.config.Config` into VeRL's Hydra config
(``verl/trainer/config/ppo_trainer.yaml`` composed with overrides). Every mapped key is in :data:`KEY_MAP`, which
the plugin README documents (a test keeps the two in step). Settings VeRL cannot honour raise ConfigError naming
the skyrl key. The rollout inside VeRL is skyrl's: VeRL's agent-loop workers run
:class:`skyrl_verl.agent_loop.SkyrlAgentLoop` (registered as agent loop ``skyrl``), which runs one trajectory with
skyrl's agent loop, tools, runtime and verifier against VeRL's inference servers, token ids in and out. The task
instances reach VeRL as a parquet file of rows that name their task and instance (:func:`write_task_parquet`).

CLI: ``skyrl verl config CONFIG [overrides]`` prints the VeRL config; ``skyrl verl launch CONFIG [overrides]``
writes the data files and runs ``verl.trainer.main_ppo.run_ppo`` (vllm or sglang in
VeRL's environment; without CUDA through the CPU platform of :mod:`skyrl_verl.cpu`).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, Optional

import typer

from skyrl_core.errors import ConfigError
from skyrl_core.default_plugins.trainer.keymap import KeyMapping, hydra_overrides, model_path, task_rows

log = logging.getLogger(__name__)

AGENT_LOOP_NAME = "skyrl"
AGENT_LOOP_TARGET = "skyrl_verl.agent_loop.SkyrlAgentLoop"
ROLLOUT_ENGINES = ("vllm", "sglang", "hf")
# engine.type -> VeRL's rollout name: hf is skyrl's own engine served to VeRL as rollout ``skyrl``
# (skyrl_verl.rollout, registered in VeRL's rollout registries)
ROLLOUT_NAMES = {"vllm": "vllm", "sglang": "sglang", "hf": "skyrl"}
ROLLOUT_MODULE = "skyrl_verl.rollout"
# VeRL's file logger writes one JSON line per step here, in the run directory
METRICS_FILE = "verl_metrics.jsonl"
# the example config this plugin documents and ships (``skyrl train verl:gsm8k``)
REPO_EXAMPLE = Path(__file__).resolve().parent / "examples" / "gsm8k.yaml"


KEY_MAP: tuple[KeyMapping, ...] = (
    KeyMapping("model", "actor_rollout_ref.model.path", "a local HF directory; the bundled name resolves to its "
               "cached safetensors directory"),
    KeyMapping("engine.type", "actor_rollout_ref.rollout.name", "vllm or sglang (VeRL's inference servers); hf -> "
               "skyrl (skyrl's hf engine as a VeRL rollout server, skyrl_verl.rollout); openai is an error"),
    KeyMapping("sampling.temperature", "actor_rollout_ref.rollout.temperature", "same meaning"),
    KeyMapping("sampling.top_p", "actor_rollout_ref.rollout.top_p", "same meaning"),
    KeyMapping("sampling.top_k", "actor_rollout_ref.rollout.top_k", "same meaning (-1 = off)"),
    KeyMapping("sampling.n_samples", "actor_rollout_ref.rollout.n", "rollouts per instance (the group)"),
    KeyMapping("sampling.max_tokens", "skyrl.sampling.max_tokens", "per LLM call, enforced by skyrl's agent loop"),
    KeyMapping("agent.max_context_tokens", "data.max_prompt_length, data.max_response_length",
               "both set to it: a datum's prompt and its packed multi-turn response each fit the context"),
    KeyMapping("agent.max_turns", "actor_rollout_ref.rollout.multi_turn.max_assistant_turns",
               "informational for VeRL; skyrl's agent loop enforces it"),
    KeyMapping("dispatcher.max_parallel_agents", "actor_rollout_ref.rollout.agent.num_workers",
               "agent-loop workers = ceil(max_parallel_agents / 8); each runs its trajectories concurrently"),
    KeyMapping("train.batch_size", "data.train_batch_size", "instances per step"),
    KeyMapping("train.steps", "trainer.total_training_steps", "same meaning"),
    KeyMapping("train.eval_every", "trainer.test_freq", "0 -> -1 (never)"),
    KeyMapping("train.checkpoint_every", "trainer.save_freq", "0 -> -1 (never)"),
    KeyMapping("train.eval_at_start", "trainer.val_before_train", "same meaning"),
    KeyMapping("train.seed", "data.seed, actor_rollout_ref.rollout.seed", "same seed"),
    KeyMapping("backend.advantage", "algorithm.adv_estimator", "rloo -> rloo, grpo -> grpo; none is an error"),
    KeyMapping("backend.std_normalize", "algorithm.norm_adv_by_std_in_grpo", "grpo only (VeRL divides by the "
               "unbiased group std); with rloo it is an error"),
    KeyMapping("backend.lr", "actor_rollout_ref.actor.optim.lr", "same meaning"),
    KeyMapping("backend.betas", "actor_rollout_ref.actor.optim.betas", "same meaning"),
    KeyMapping("backend.weight_decay", "actor_rollout_ref.actor.optim.weight_decay", "same meaning"),
    KeyMapping("backend.max_grad_norm", "actor_rollout_ref.actor.grad_clip", "same meaning"),
    KeyMapping("backend.clip", "actor_rollout_ref.actor.clip_ratio, clip_ratio_low", "PPO epsilon"),
    KeyMapping("backend.clip_high", "actor_rollout_ref.actor.clip_ratio_high", "defaults to backend.clip"),
    KeyMapping("backend.kl_coef", "actor_rollout_ref.actor.use_kl_loss, kl_loss_coef, kl_loss_type=low_var_kl",
               "KL as a loss term (k3 estimator), never in the reward"),
    KeyMapping("backend.entropy_coef", "actor_rollout_ref.actor.entropy_coeff", "same meaning"),
    KeyMapping("backend.tis_cap", "algorithm.rollout_correction.rollout_is=token, rollout_is_threshold",
               "truncated importance sampling per token"),
    KeyMapping("backend.mini_batches", "actor_rollout_ref.actor.ppo_mini_batch_size",
               "train.batch_size / mini_batches instances; must divide train.batch_size"),
    KeyMapping("backend.micro_batch_tokens", "actor_rollout_ref.actor.use_dynamic_bsz=true, "
               "ppo_max_token_len_per_gpu (and log_prob_max_token_len_per_gpu)", "tokens per forward/backward"),
    KeyMapping("backend.gradient_checkpointing", "actor_rollout_ref.model.enable_gradient_checkpointing",
               "same meaning"),
    KeyMapping("backend.lora.r / alpha / target_modules", "actor_rollout_ref.model.lora_rank / lora_alpha / "
               "target_modules", "LoRA through VeRL's peft path; backend.lora.dropout must be 0"),
    KeyMapping("backend.options.loss_mode", "actor_rollout_ref.actor.policy_loss.loss_mode",
               "any VeRL policy loss (vanilla, gspo, cispo, ...)"),
    KeyMapping("backend.options.loss_agg_mode", "actor_rollout_ref.actor.loss_agg_mode", "default token-mean"),
    KeyMapping("backend.options.clip_ratio_c", "actor_rollout_ref.actor.clip_ratio_c", "dual-clip bound, "
               "default 3.0"),
    KeyMapping("backend.options.verl_overrides", "any", "a list of raw Hydra overrides applied last"),
    KeyMapping("logging.wandb, logging.wandb_project", "trainer.logger, trainer.project_name",
               "console and file (VeRL's file logger: `verl_metrics.jsonl` in the run directory) always; wandb "
               "when enabled"),
    KeyMapping("tasks", "data.train_files, data.val_files", "a parquet of rows naming task and instance; "
               "agent_name=skyrl"),
)


def check_supported(config: Any) -> None:
    """Raise ConfigError naming the skyrl key for every setting a VeRL launch cannot honour."""
    from .backend import check_backend_config

    if config.engine.type not in ROLLOUT_ENGINES:
        raise ConfigError(f"config key 'engine.type' is '{config.engine.type}', but VeRL's trainer needs a rollout it "
                          f"can sync weights into: set engine.type to one of {', '.join(ROLLOUT_ENGINES)} for "
                          f"`skyrl verl launch` (or keep the engine and use `skyrl train ... backend=verl`)")
    check_backend_config(config.backend)
    bc = config.backend
    if config.train.batch_size % bc.mini_batches:
        raise ConfigError(f"config key 'backend.mini_batches' ({bc.mini_batches}) must divide train.batch_size "
                          f"({config.train.batch_size}): VeRL's ppo_mini_batch_size counts whole instances")
    if bc.lora is not None and bc.lora.dropout != 0:
        raise ConfigError("config key 'backend.lora.dropout' must be 0 with VeRL (its LoRA path has no dropout)")
    if bc.bf16 == "off":
        raise ConfigError("config key 'backend.bf16' off is not supported by the VeRL launcher (its FSDP actor "
                          "trains in bf16 mixed precision); use auto or on")


def verl_overrides(config: Any, *, train_files: str, val_files: str, n_gpus_per_node: int = 1, nnodes: int = 1,
                   output_dir: str | None = None, on_cpu: bool = False) -> list[str]:
    """Hydra overrides for VeRL's ``ppo_trainer`` config from a skyrl Config (see :data:`KEY_MAP`); with
    ``on_cpu`` the :func:`cpu_overrides` come before ``backend.options.verl_overrides`` (which win)."""
    check_supported(config)
    bc, s, t = config.backend, config.sampling, config.train
    ctx = config.agent.max_context_tokens
    workers = max(1, -(-config.dispatcher.max_parallel_agents // 8))
    a, r = "actor_rollout_ref.actor.", "actor_rollout_ref.rollout."
    tokens_per_gpu = max(bc.micro_batch_tokens, 2 * ctx)
    ov: dict[str, Any] = {
        "actor_rollout_ref.model.path": model_path(config.model, "VeRL"),
        f"{r}name": ROLLOUT_NAMES[config.engine.type], f"{r}mode": "async",
        f"{r}temperature": s.temperature, f"{r}top_p": s.top_p, f"{r}top_k": s.top_k, f"{r}n": s.n_samples,
        f"{r}calculate_log_probs": True,
        f"{r}multi_turn.max_assistant_turns": config.agent.max_turns,
        f"{r}agent.default_agent_loop": AGENT_LOOP_NAME, f"{r}agent.num_workers": workers,
        f"{r}seed": t.seed,
        "data.max_prompt_length": ctx, "data.max_response_length": ctx,
        "data.train_batch_size": t.batch_size, "data.seed": t.seed,
        "data.train_files": train_files, "data.val_files": val_files,
        "data.return_raw_chat": True,
        "trainer.total_training_steps": t.steps,
        "trainer.test_freq": t.eval_every or -1, "trainer.save_freq": t.checkpoint_every or -1,
        "trainer.val_before_train": t.eval_at_start,
        "trainer.n_gpus_per_node": n_gpus_per_node, "trainer.nnodes": nnodes,
        "trainer.project_name": config.logging.wandb_project,
        "trainer.logger": ["console", "file", "wandb"] if config.logging.wandb else ["console", "file"],
        "algorithm.adv_estimator": bc.advantage,
        "algorithm.norm_adv_by_std_in_grpo": bc.std_normalize,
        "algorithm.use_kl_in_reward": False,
        f"{a}optim.lr": bc.lr, f"{a}optim.betas": list(bc.betas[:2]),
        f"{a}optim.weight_decay": bc.weight_decay, f"{a}grad_clip": bc.max_grad_norm,
        f"{a}clip_ratio": bc.clip, f"{a}clip_ratio_low": bc.clip,
        f"{a}clip_ratio_high": bc.clip if bc.clip_high is None else bc.clip_high,
        f"{a}use_kl_loss": bc.kl_coef > 0, f"{a}kl_loss_coef": bc.kl_coef,
        f"{a}kl_loss_type": "low_var_kl", f"{a}entropy_coeff": bc.entropy_coef,
        f"{a}ppo_mini_batch_size": t.batch_size // bc.mini_batches,
        f"{a}use_dynamic_bsz": True, f"{a}ppo_max_token_len_per_gpu": tokens_per_gpu,
        f"{r}log_prob_max_token_len_per_gpu": tokens_per_gpu,
        f"{a}policy_loss.loss_mode": bc.options.get("loss_mode", "vanilla"),
        f"{a}loss_agg_mode": bc.options.get("loss_agg_mode", "token-mean"),
        f"{a}clip_ratio_c": float(bc.options.get("clip_ratio_c", 3.0)),
        "actor_rollout_ref.model.enable_gradient_checkpointing": bc.gradient_checkpointing,
    }
    if bc.tis_cap is not None:
        ov.update({"algorithm.rollout_correction.rollout_is": "token",
                   "algorithm.rollout_correction.rollout_is_threshold": bc.tis_cap})
    if bc.lora is not None:
        ov.update({"actor_rollout_ref.model.lora_rank": bc.lora.r, "actor_rollout_ref.model.lora_alpha": bc.lora.alpha,
                   "actor_rollout_ref.model.target_modules": list(bc.lora.target_modules)})
    if output_dir is not None:
        ov["trainer.default_local_dir"] = Path(output_dir).resolve() / "checkpoints"
    extra = bc.options.get("verl_overrides", [])
    if not isinstance(extra, list) or not all(isinstance(x, str) and "=" in x for x in extra):
        raise ConfigError("config key 'backend.options.verl_overrides' must be a list of 'key=value' strings")
    return hydra_overrides(ov) + (cpu_overrides(n_gpus_per_node) if on_cpu else []) + list(extra)


def build_verl_config(config: Any, *, train_files: str = "train.parquet", val_files: str = "val.parquet",
                      n_gpus_per_node: int = 1, nnodes: int = 1, output_dir: str | None = None,
                      on_cpu: bool = False):
    """Compose VeRL's ``ppo_trainer`` Hydra config for ``config``; the skyrl config rides along under the
    top-level key ``skyrl`` (the agent loop reads tools, task, agent and sampling settings from it).

    Returns an omegaconf DictConfig. Raises ConfigError naming the skyrl key for unsupported settings, and for a
    raw override VeRL rejects (``backend.options.verl_overrides``)."""
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf import OmegaConf, open_dict

    import verl.trainer

    overrides = verl_overrides(config, train_files=train_files, val_files=val_files,
                               n_gpus_per_node=n_gpus_per_node, nnodes=nnodes, output_dir=output_dir,
                               on_cpu=on_cpu)
    config_dir = str(Path(verl.trainer.__file__).parent / "config")
    try:
        with initialize_config_dir(config_dir=config_dir, version_base=None):
            cfg = compose(config_name="ppo_trainer", overrides=overrides)
    except HydraException as exc:
        raise ConfigError(f"VeRL rejected the config built from backend/engine/sampling settings (check "
                          f"backend.options.verl_overrides): {exc}") from None
    with open_dict(cfg):
        cfg.skyrl = OmegaConf.create(json.loads(json.dumps(config.to_dict())))
    return cfg


def write_task_parquet(config: Any, split: str, path: str | Path) -> int:
    """Write one parquet row per task instance for VeRL's dataset: ``prompt`` (the instruction builder's
    messages, which VeRL's RLHFDataset tokenises to filter over-long prompts), ``agent_name`` ``skyrl``,
    ``data_source`` (task name) and ``extra_info`` (``task_index``, ``instance_id``, ``split``, ``index``). Returns the row
    count. Raises ConfigError naming ``tasks.N`` when a task yields no instances."""
    import pandas as pd

    rows = [{"prompt": messages, "agent_name": AGENT_LOOP_NAME, "data_source": name,
             "extra_info": {"task_index": ti, "instance_id": inst.id, "split": split, "index": index}}
            for index, (ti, name, inst, messages) in enumerate(task_rows(config, split))]
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_parquet(path)
    return len(rows)


def agent_loop_config_file(directory: str | Path) -> Path:
    """Write the YAML that registers skyrl's agent loop with VeRL's workers (they run in other processes, where
    the ``register`` decorator's in-process registry is empty)."""
    path = Path(directory) / "skyrl_agent_loop.yaml"
    path.write_text(f"- name: {AGENT_LOOP_NAME}\n  _target_: {AGENT_LOOP_TARGET}\n")
    return path


verl_app = typer.Typer(help="Train with VeRL: print the VeRL config built from a skyrl config, or launch VeRL.",
                       no_args_is_help=True)


@verl_app.command("config")
def config_command(config_path: str = typer.Argument(..., help="skyrl YAML config"),
                   overrides: Optional[list[str]] = typer.Argument(None, help="key.sub=value overrides"),
                   n_gpus: int = typer.Option(1, "--gpus", help="GPUs per node"),
                   nnodes: int = typer.Option(1, "--nodes", help="nodes"),
                   cpu: bool = typer.Option(False, "--cpu", help="with the CPU overrides a launch without CUDA adds")
                   ) -> None:
    """Print VeRL's config (YAML) for CONFIG."""
    from omegaconf import OmegaConf

    from skyrl_core.config import load_config

    cfg = build_verl_config(load_config(config_path, list(overrides or [])), n_gpus_per_node=n_gpus, nnodes=nnodes,
                            on_cpu=cpu)
    typer.echo(OmegaConf.to_yaml(cfg))


@verl_app.command("launch")
def launch_command(config_path: str = typer.Argument(..., help="skyrl YAML config"),
                   overrides: Optional[list[str]] = typer.Argument(None, help="key.sub=value overrides"),
                   output: str = typer.Option("runs/verl", "--output", help="run directory"),
                   n_gpus: int = typer.Option(1, "--gpus", help="GPUs per node"),
                   nnodes: int = typer.Option(1, "--nodes", help="nodes")) -> None:
    """Write the task data and run VeRL's PPO trainer with skyrl's agent loop (engine.type vllm, sglang or hf)."""
    from skyrl_core.config import load_config

    report = launch(load_config(config_path, list(overrides or [])), output_dir=output, n_gpus_per_node=n_gpus,
                    nnodes=nnodes)
    keys = ("actor/pg_loss", "actor/grad_norm", "critic/score/mean")
    for row in report["metrics"]:
        typer.echo(f"step {row['step']}: " + ", ".join(f"{k}={row[k]:.4g}" for k in keys if k in row))
    for sync in report["weight_syncs"]:
        typer.echo(f"weight sync {sync['update']} (step {sync['global_steps']}): max |w - w0| = "
                   f"{sync['max_abs_change_from_initial']:.3g}")
    typer.echo(f"VeRL trained {report['steps']} steps; metrics in {Path(output) / METRICS_FILE}")


# VeRL on a CPU (no CUDA here): the skyrl_verl.cpu platform (CPU_ENV), Ray's GPU slots as logical ones, FSDP2 on
# gloo (FSDP1 wants an accelerator device_id), eager attention, one rank per rollout replica, no dataloader
# processes, no rollout sleep mode, and VeRL's Ray PPO trainer of main_ppo_v0 (the V1 runner needs the
# transfer_queue package, which verl 0.9.1 does not install)
CPU_OVERRIDES = (
    "+ray_kwargs.ray_init.num_gpus={gpus}", "+ray_kwargs.ray_init.num_cpus={cpus}",
    "actor_rollout_ref.actor.strategy=fsdp2", "actor_rollout_ref.ref.strategy=fsdp2",
    "+actor_rollout_ref.model.override_config.attn_implementation=eager",
    "actor_rollout_ref.rollout.tensor_model_parallel_size=1", "data.dataloader_num_workers=0",
    # vLLM's CPU platform refuses sleep mode, which VeRL turns on by default (verl/workers/config/rollout.py:268)
    "+actor_rollout_ref.rollout.enable_sleep_mode=false", "actor_rollout_ref.rollout.free_cache_engine=false",
    "trainer.device=cpu", "trainer.use_v1=false",
)


def cpu_overrides(n_gpus_per_node: int = 1) -> list[str]:
    """The Hydra overrides that put VeRL's trainer on the CPU (see :data:`CPU_OVERRIDES`); Ray gets
    ``n_gpus_per_node`` logical GPU slots (one per FSDP rank) and 4 logical CPUs per rank plus 4."""
    return [o.format(gpus=n_gpus_per_node, cpus=4 * n_gpus_per_node + 4) for o in CPU_OVERRIDES]


def launch(config: Any, *, output_dir: str, n_gpus_per_node: int = 1, nnodes: int = 1) -> dict[str, Any]:
    """Run VeRL's trainer on ``config``. Without CUDA it runs on the CPU through :mod:`skyrl_verl.cpu` and
    :func:`cpu_overrides` (one node). ``engine.type: hf`` serves the rollouts from skyrl's hf engine through
    :mod:`skyrl_verl.rollout` (VeRL's rollout ``skyrl``). Ray is shut down on return (every VeRL worker, rollout
    server and agent-loop actor ends with it) unless it was running before. Returns :func:`run_report`. Raises
    ConfigError for unsupported
    settings and SkyrlError when the inference engine's package (vllm, sglang) is not importable."""
    import importlib.util
    import os

    import ray
    import torch
    from omegaconf import open_dict

    from skyrl_core.errors import SkyrlError

    check_supported(config)
    on_cpu = not torch.cuda.is_available()
    if on_cpu and nnodes != 1:
        raise SkyrlError("skyrl verl launch on a CPU runs on one node: drop --nodes")
    if config.engine.type != "hf" and importlib.util.find_spec(config.engine.type) is None:
        raise SkyrlError(f"engine.type '{config.engine.type}' needs the python package '{config.engine.type}' in "
                         f"VeRL's environment (VeRL 0.9.1 serves rollouts with vllm, sglang or trtllm: "
                         f"verl/workers/rollout/base.py:89), which is not installed; engine.type hf serves them "
                         f"from skyrl's hf engine")
    out = Path(output_dir)
    data_dir = out / "verl_data"
    write_task_parquet(config, "train", data_dir / "train.parquet")
    write_task_parquet(config, "eval", data_dir / "val.parquet")
    # before Ray starts: every VeRL worker inherits the environment and imports these modules with verl
    modules = [m for m in os.environ.get("VERL_USE_EXTERNAL_MODULES", "").split(",") if m]
    if on_cpu:
        from .cpu import CPU_ENV

        os.environ.update(CPU_ENV)
        modules += CPU_ENV["VERL_USE_EXTERNAL_MODULES"].split(",")
    if config.engine.type == "hf":
        from . import rollout  # noqa: F401  registers rollout "skyrl" in this process too

        modules.append(ROLLOUT_MODULE)
        os.environ[rollout.RUN_DIR_ENV] = str(out.resolve())
    os.environ["VERL_USE_EXTERNAL_MODULES"] = ",".join(dict.fromkeys(modules))
    cfg = build_verl_config(config, train_files=str(data_dir / "train.parquet"),
                            val_files=str(data_dir / "val.parquet"), n_gpus_per_node=n_gpus_per_node,
                            nnodes=nnodes, output_dir=str(out), on_cpu=on_cpu)
    with open_dict(cfg):
        cfg.actor_rollout_ref.rollout.agent.agent_loop_config_path = str(agent_loop_config_file(data_dir))
    from verl.trainer.main_ppo import TaskRunnerV1, run_ppo
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    validate_config(config=cfg, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg))
    metrics_path = out.resolve() / METRICS_FILE
    metrics_path.unlink(missing_ok=True)
    os.environ["VERL_FILE_LOGGER_PATH"] = str(metrics_path)  # VeRL's own file logger (verl/utils/tracking.py)
    owns_ray = not ray.is_initialized()
    try:
        if cfg.trainer.use_v1:
            run_ppo(cfg, task_runner_class=TaskRunnerV1)
        else:
            from verl.trainer.main_ppo_v0 import TaskRunner

            run_ppo(cfg, task_runner_class=TaskRunner)
    finally:
        if owns_ray and ray.is_initialized():
            ray.shutdown()  # VeRL's run_ppo leaves its Ray (workers, servers, agent-loop actors) running
    return run_report(out)


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def run_report(output_dir: str | Path) -> dict[str, Any]:
    """What a finished launch in ``output_dir`` did: ``steps`` (VeRL's logged training steps), ``metrics`` (one dict
    per step as VeRL's file logger wrote it: ``actor/pg_loss``, ``actor/grad_norm``, ``critic/score/mean``, ...;
    a final validation row, when VeRL logs one, is kept too) and ``weight_syncs`` (with ``engine.type: hf``: one
    row per weight sync into the rollout server, see :data:`skyrl_verl.rollout.RECORD_FILE`)."""
    out = Path(output_dir)
    rows = _jsonl(out / METRICS_FILE)
    train = [r for r in rows if any(k.startswith("actor/") for k in r.get("data", {}))]
    syncs = _jsonl(out / "rollout_weight_syncs.jsonl")  # skyrl_verl.rollout.RECORD_FILE (no VeRL import here)
    return {"steps": len(train), "metrics": [dict(r["data"], step=r["step"]) for r in rows], "weight_syncs": syncs}
