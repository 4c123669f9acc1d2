"""Launch SkyRL-train's own PPO trainer (Ray, FSDP or Megatron workers, vLLM servers) on a skyrl config.

``skyrl train CONFIG backend=skyrl-train`` runs :func:`launch`: it writes the task instances as SkyRL-train
datasets (:func:`write_dataset`), builds SkyRL-train's ``SkyRLTrainConfig`` from the skyrl config
(:func:`build_skyrl_train_config`; every mapped key is in :data:`KEY_MAP`, which the README's table mirrors and
a test keeps in step) and runs :class:`SkyrlPPOExp` — SkyRL-train's ``BasePPOExp`` with
:class:`~skyrl_skyrl_train.generator.SkyrlAgentGenerator` as its generator — inside a Ray task, as SkyRL-train's
own entrypoint does. ``skyrl skyrl-train config CONFIG`` prints that config without running anything.

The ``n_samples`` rollouts of an instance are made in exactly one place: SkyRL-train's trainer repeats each
dataset row ``generator.n_samples_per_prompt`` times (set from ``sampling.n_samples``) before calling the
generator, which rolls every row out once.

Only the current API generation (``skyrl`` 0.4.0, ``skyrl.train``) is launched; 0.3.1's Hydra config has other key
names and is documented as unsupported for launching (its generator path works).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, Optional

import typer

from skyrl_core.errors import ConfigError, SkyrlError
from skyrl_core.default_plugins.trainer.keymap import KeyMapping, model_path, task_rows

from . import compat
from .generator import ENV_CLASS

log = logging.getLogger(__name__)

INFERENCE_BACKENDS = ("vllm",)


KEY_MAP: tuple[KeyMapping, ...] = (
    KeyMapping("model", "trainer.policy.model.path", "a local HF directory or hub name; the bundled name "
               "resolves to its cached safetensors directory"),
    KeyMapping("engine.type", "generator.inference_engine.backend", "vllm (SkyRL-train's servers) on CUDA; hf on "
               "the CPU route (skyrl's in-process engine behind SkyRL-train's client; the key stays vllm, its "
               "sampling format); others are errors for a launch"),
    KeyMapping("sampling.temperature", "generator.sampling_params.temperature", "same meaning"),
    KeyMapping("sampling.top_p", "generator.sampling_params.top_p", "same meaning"),
    KeyMapping("sampling.top_k", "generator.sampling_params.top_k", "same meaning (-1 = off)"),
    KeyMapping("sampling.max_tokens", "generator.sampling_params.max_generate_length", "per LLM call"),
    KeyMapping("sampling.n_samples", "generator.n_samples_per_prompt", "the group: SkyRL-train repeats each row "
               "this many times, the generator rolls each row out once"),
    KeyMapping("agent.max_context_tokens", "trainer.max_prompt_length, generator.max_input_length",
               "a datum's prompt fits the context; skyrl's agent loop enforces the limit"),
    KeyMapping("agent.max_turns", "generator.max_turns", "informational for SkyRL-train; skyrl's agent loop "
               "enforces it"),
    KeyMapping("train.batch_size", "trainer.train_batch_size", "instances per step"),
    KeyMapping("train.steps", "trainer.max_training_steps", "same meaning; trainer.epochs is raised to cover it"),
    KeyMapping("train.eval_every", "trainer.eval_interval", "0 -> -1 (never)"),
    KeyMapping("train.checkpoint_every", "trainer.ckpt_interval", "0 -> -1 (never)"),
    KeyMapping("train.eval_at_start", "trainer.eval_before_train", "same meaning"),
    KeyMapping("train.keep_checkpoints", "trainer.max_ckpts_to_keep", "same meaning"),
    KeyMapping("train.seed", "trainer.seed", "same seed"),
    KeyMapping("backend.advantage", "trainer.algorithm.advantage_estimator", "rloo -> rloo, grpo -> grpo; none is "
               "an error"),
    KeyMapping("backend.std_normalize", "trainer.algorithm.grpo_norm_by_std", "grpo only (SkyRL-train divides by "
               "the unbiased group std); with rloo it is an error"),
    KeyMapping("backend.lr", "trainer.policy.optimizer_config.lr", "same meaning"),
    KeyMapping("backend.betas", "trainer.policy.optimizer_config.adam_betas", "same meaning"),
    KeyMapping("backend.weight_decay", "trainer.policy.optimizer_config.weight_decay", "same meaning"),
    KeyMapping("backend.max_grad_norm", "trainer.policy.optimizer_config.max_grad_norm", "same meaning"),
    KeyMapping("backend.clip", "trainer.algorithm.eps_clip_low", "PPO epsilon"),
    KeyMapping("backend.clip_high", "trainer.algorithm.eps_clip_high", "defaults to backend.clip"),
    KeyMapping("backend.kl_coef", "trainer.algorithm.use_kl_loss, kl_loss_coef, kl_estimator_type=k3",
               "KL as a loss term (k3), never in the reward; 0 turns the reference model off"),
    KeyMapping("backend.entropy_coef", "trainer.algorithm.use_entropy_loss, entropy_loss_coef", "same meaning"),
    KeyMapping("backend.tis_cap", "trainer.algorithm.off_policy_correction.tis_ratio_type=token, "
               "token_tis_ratio_clip_high", "truncated importance sampling per token, on the real rollout "
               "logprobs"),
    KeyMapping("backend.mini_batches", "trainer.policy_mini_batch_size", "train.batch_size / mini_batches "
               "instances; must divide train.batch_size"),
    KeyMapping("backend.micro_batch_tokens", "trainer.max_tokens_per_microbatch", "tokens per forward/backward"),
    KeyMapping("backend.gradient_checkpointing", "trainer.gradient_checkpointing", "same meaning"),
    KeyMapping("backend.bf16", "trainer.bf16", "auto/on -> true, off -> false"),
    KeyMapping("backend.lora.r / alpha / dropout / target_modules", "trainer.policy.model.lora.rank / alpha / "
               "dropout / target_modules", "LoRA through SkyRL-train's peft path"),
    KeyMapping("backend.options.step_wise", "generator.step_wise_trajectories", "default true: one row per "
               "datum, so context resets train every datum"),
    KeyMapping("backend.options.num_engines / tensor_parallel_size", "generator.inference_engine.num_engines / "
               "tensor_parallel_size", "default GPUs / TP engines, TP 1; engines x TP must equal the GPUs "
               "(colocated)"),
    KeyMapping("backend.options.strategy", "trainer.strategy", "fsdp (default) or megatron"),
    KeyMapping("backend.options.device", "trainer.flash_attn, bf16, remove_microbatch_padding, placement.*",
               "cuda (default with CUDA) or cpu (default without): the CPU route (skyrl_skyrl_train.cpu)"),
    KeyMapping("backend.options.skyrl_train_overrides", "any", "a dict of raw dotted SkyRL-train keys applied "
               "last"),
    KeyMapping("logging.wandb, logging.wandb_project", "trainer.logger, trainer.project_name",
               "console unless wandb is enabled"),
    KeyMapping("tasks", "data.train_data, data.val_data, environment.env_class=skyrl", "a jsonl of rows naming "
               "task and instance (skyrl_task_index, skyrl_instance_id, skyrl_split)"),
)

# SkyRL-train's own settings the launcher fixes (not mapped from a skyrl key)
FIXED = {
    "trainer.algorithm.policy_loss_type": "regular",
    "trainer.algorithm.loss_reduction": "token_mean",
    "trainer.algorithm.use_kl_in_reward": False,
    "generator.sampling_params.logprobs": 1,
    "generator.inference_engine.run_engines_locally": True,
    "trainer.placement.colocate_all": True,
}

_OPTIONS = {"step_wise", "num_engines", "tensor_parallel_size", "strategy", "skyrl_train_overrides", "device"}
DEVICES = ("cuda", "cpu")


def device_of(config: Any) -> str:
    """``backend.options.device``, or ``cuda`` when torch sees CUDA and ``cpu`` otherwise. Raises ConfigError
    for another value."""
    device = config.backend.options.get("device")
    if device is None:
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
    if device not in DEVICES:
        raise ConfigError(f"config key 'backend.options.device' is {device!r}; valid: {', '.join(DEVICES)}")
    return device


def check_supported(config: Any, *, launching: bool = True, device: str = "cuda") -> None:
    """Raise ConfigError naming the skyrl key for every setting SkyRL-train cannot honour (on ``device``)."""
    bc = config.backend
    if launching and device == "cpu":
        if config.engine.type != "hf":
            raise ConfigError(f"config key 'engine.type' is '{config.engine.type}', but SkyRL-train's CPU route "
                              f"(backend.options.device: cpu) rolls out with skyrl's in-process hf engine: set "
                              f"engine.type to hf")
        if bc.options.get("strategy", "fsdp") != "fsdp":
            raise ConfigError("config key 'backend.options.strategy' must be fsdp on the CPU route (megatron needs "
                              "CUDA)")
    elif launching and config.engine.type not in INFERENCE_BACKENDS:
        raise ConfigError(f"config key 'engine.type' is '{config.engine.type}', but SkyRL-train serves rollouts with "
                          f"its own inference servers: set engine.type to {' or '.join(INFERENCE_BACKENDS)} for a "
                          f"SkyRL-train launch")
    if bc.advantage not in ("rloo", "grpo"):
        raise ConfigError(f"config key 'backend.advantage' is '{bc.advantage}'; SkyRL-train's step-wise training "
                          f"supports rloo and grpo here")
    if bc.std_normalize and bc.advantage != "grpo":
        raise ConfigError("config key 'backend.std_normalize' applies to grpo only in SkyRL-train "
                          "(trainer.algorithm.grpo_norm_by_std)")
    if bc.mini_batches < 1 or config.train.batch_size % bc.mini_batches:
        raise ConfigError(f"config key 'backend.mini_batches' ({bc.mini_batches}) must divide train.batch_size "
                          f"({config.train.batch_size}): SkyRL-train's policy_mini_batch_size counts whole prompts")
    unknown = sorted(set(bc.options) - _OPTIONS)
    if unknown:
        raise ConfigError(f"config key 'backend.options' has unknown option(s) {', '.join(unknown)} for "
                          f"skyrl-train; valid: {', '.join(sorted(_OPTIONS))}")
    strategy = bc.options.get("strategy", "fsdp")
    if strategy not in ("fsdp", "megatron"):
        raise ConfigError(f"config key 'backend.options.strategy' is {strategy!r}; valid: fsdp, megatron")
    extra = bc.options.get("skyrl_train_overrides", {})
    if not isinstance(extra, dict):
        raise ConfigError("config key 'backend.options.skyrl_train_overrides' must be a mapping of dotted "
                          "SkyRL-train keys to values")


def skyrl_train_overrides(config: Any, *, train_data: str, val_data: str, n_gpus_per_node: int = 1,
                          nnodes: int = 1, output_dir: str | None = None, device: str = "cuda") -> dict[str, Any]:
    """Dotted SkyRL-train keys -> values for ``SkyRLTrainConfig.from_cli_overrides`` (see :data:`KEY_MAP`).
    ``device`` ``cpu``: the CPU route's keys (:func:`skyrl_skyrl_train.cpu.cpu_overrides`, one rank)."""
    check_supported(config, device=device)
    if device == "cpu":
        n_gpus_per_node, nnodes = 1, 1
    bc, s, t = config.backend, config.sampling, config.train
    ctx = config.agent.max_context_tokens
    gpus = n_gpus_per_node * nnodes
    tp = int(bc.options.get("tensor_parallel_size", 1))
    engines = int(bc.options.get("num_engines", max(gpus // tp, 1)))
    if engines * tp != gpus:
        raise ConfigError(f"config key 'backend.options.num_engines' x tensor_parallel_size ({engines} x {tp}) must "
                          f"equal the GPUs ({gpus}): SkyRL-train colocates the policy and the inference engines")
    out = Path(output_dir or "runs/skyrl-train").resolve()
    tr, alg, pol = "trainer.", "trainer.algorithm.", "trainer.policy."
    ov: dict[str, Any] = {
        f"{pol}model.path": model_path(config.model, "SkyRL-train", by_name=True),
        "generator.inference_engine.backend": "vllm" if device == "cpu" else config.engine.type,
        "generator.inference_engine.num_engines": engines,
        "generator.inference_engine.tensor_parallel_size": tp,
        "generator.sampling_params.temperature": s.temperature,
        "generator.sampling_params.top_p": s.top_p,
        "generator.sampling_params.top_k": s.top_k,
        "generator.sampling_params.max_generate_length": s.max_tokens,
        "generator.n_samples_per_prompt": s.n_samples,
        "generator.max_turns": config.agent.max_turns,
        "generator.max_input_length": ctx,
        "generator.step_wise_trajectories": bool(bc.options.get("step_wise", True)),
        f"{tr}max_prompt_length": ctx,
        f"{tr}train_batch_size": t.batch_size,
        f"{tr}policy_mini_batch_size": t.batch_size // bc.mini_batches,
        f"{tr}max_training_steps": t.steps,
        f"{tr}epochs": max(1, t.steps),
        f"{tr}eval_interval": t.eval_every or -1,
        f"{tr}ckpt_interval": t.checkpoint_every or -1,
        f"{tr}eval_before_train": bool(t.eval_at_start),
        f"{tr}max_ckpts_to_keep": t.keep_checkpoints,
        f"{tr}seed": t.seed,
        f"{tr}strategy": bc.options.get("strategy", "fsdp"),
        f"{tr}gradient_checkpointing": bool(bc.gradient_checkpointing),
        f"{tr}bf16": bc.bf16 != "off",
        f"{tr}max_tokens_per_microbatch": bc.micro_batch_tokens,
        f"{tr}placement.policy_num_gpus_per_node": n_gpus_per_node,
        f"{tr}placement.policy_num_nodes": nnodes,
        f"{tr}placement.ref_num_gpus_per_node": n_gpus_per_node,
        f"{tr}placement.ref_num_nodes": nnodes,
        f"{tr}ckpt_path": str(out / "checkpoints"),
        f"{tr}export_path": str(out / "exports"),
        f"{tr}log_path": str(out / "logs"),
        f"{tr}project_name": config.logging.wandb_project,
        f"{tr}run_name": out.name,
        f"{tr}logger": "wandb" if config.logging.wandb else "console",
        f"{alg}advantage_estimator": bc.advantage,
        f"{alg}grpo_norm_by_std": bool(bc.std_normalize),
        f"{alg}eps_clip_low": bc.clip,
        f"{alg}eps_clip_high": bc.clip if bc.clip_high is None else bc.clip_high,
        f"{alg}use_kl_loss": bc.kl_coef > 0,
        f"{alg}kl_loss_coef": bc.kl_coef,
        f"{alg}kl_estimator_type": "k3",
        f"{alg}use_entropy_loss": bc.entropy_coef > 0,
        f"{alg}entropy_loss_coef": bc.entropy_coef,
        f"{pol}optimizer_config.lr": bc.lr,
        f"{pol}optimizer_config.adam_betas": [float(b) for b in bc.betas],
        f"{pol}optimizer_config.weight_decay": bc.weight_decay,
        f"{pol}optimizer_config.max_grad_norm": bc.max_grad_norm,
        "data.train_data": [train_data],
        "data.val_data": [val_data],
        "environment.env_class": ENV_CLASS,
        **FIXED,
    }
    if bc.tis_cap is not None:
        ov[f"{alg}off_policy_correction.tis_ratio_type"] = "token"
        ov[f"{alg}off_policy_correction.token_tis_ratio_clip_high"] = float(bc.tis_cap)
    if bc.lora is not None:
        ov.update({f"{pol}model.lora.rank": bc.lora.r, f"{pol}model.lora.alpha": bc.lora.alpha,
                   f"{pol}model.lora.dropout": bc.lora.dropout,
                   f"{pol}model.lora.target_modules": ",".join(bc.lora.target_modules)})
    if device == "cpu":
        from .cpu import cpu_overrides

        ov.update(cpu_overrides(1))
    ov.update(bc.options.get("skyrl_train_overrides", {}))
    return ov


def build_skyrl_train_config(config: Any, *, train_data: str = "train.jsonl", val_data: str = "val.jsonl",
                             n_gpus_per_node: int = 1, nnodes: int = 1, output_dir: str | None = None,
                             device: str = "cuda") -> Any:
    """SkyRL-train's ``SkyRLTrainConfig`` for ``config`` (``skyrl`` 0.4.0). Raises ConfigError naming the skyrl
    key for unsupported settings, or quoting SkyRL-train's rejection of a (raw) key; SkyrlError when only
    0.3.1 is installed."""
    api = compat.load()
    if api.generation != "skyrl.train":
        raise SkyrlError(f"the launcher needs skyrl 0.4.0 (skyrl.train); installed: skyrl-train {api.version}, "
                         f"whose generator works but whose Hydra config the launcher does not build")
    overrides = skyrl_train_overrides(config, train_data=train_data, val_data=val_data,
                                      n_gpus_per_node=n_gpus_per_node, nnodes=nnodes, output_dir=output_dir,
                                      device=device)
    cfg_mod = compat.module("config", api)
    try:
        return cfg_mod.SkyRLTrainConfig.from_cli_overrides(overrides)
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise ConfigError(f"SkyRL-train rejected the config built from the skyrl config (check "
                          f"backend.options.skyrl_train_overrides): {type(exc).__name__}: {exc}") from None


def write_dataset(config: Any, split: str, path: str | Path) -> int:
    """Write one JSON line per task instance for SkyRL-train's ``PromptDataset``: ``prompt`` (the instruction
    builder's messages, which SkyRL-train tokenises to filter over-long prompts), ``env_class`` ``skyrl``, and
    the ``env_extras`` the generator reads: ``skyrl_task_index``, ``skyrl_instance_id``, ``skyrl_split``.
    Returns the row count. Raises ConfigError naming ``tasks.N`` when a task yields no instances."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = 0
    with path.open("w") as fh:
        for ti, _, inst, messages in task_rows(config, split):
            fh.write(json.dumps({"prompt": [{"role": m["role"], "content": m.get("content") or ""} for m in messages],
                                 "env_class": ENV_CLASS, "skyrl_task_index": ti, "skyrl_instance_id": str(inst.id),
                                 "skyrl_split": split}) + "\n")
            rows += 1
    return rows


def experiment_class() -> type:
    """:class:`SkyrlPPOExp`: SkyRL-train's ``BasePPOExp`` whose generator is skyrl's agent (built lazily, so
    importing this module does not import SkyRL-train)."""
    base = compat.module("entrypoints.main_base").BasePPOExp

    class SkyrlPPOExp(base):
        """``BasePPOExp`` with :class:`~skyrl_skyrl_train.generator.SkyrlAgentGenerator`; ``skyrl_config`` is the
        skyrl Config as a dict (it travels to the Ray task). ``device`` ``cpu``: the CPU route
        (:mod:`skyrl_skyrl_train.cpu`): rollouts from skyrl's in-process hf engine behind SkyRL-train's client
        interface, SkyRL-train's trainer with the weight sync of :func:`skyrl_skyrl_train.cpu.trainer_class`."""

        def __init__(self, cfg: Any, skyrl_config: dict, device: str = "cuda") -> None:
            from skyrl_core.config import config_from_dict

            self.skyrl_config = config_from_dict(skyrl_config)
            self.device = device
            self.generators: list[Any] = []
            super().__init__(cfg)

        def _prompts(self, files: list[str]) -> Any:
            # SkyRL-train's PromptDataset, filtered in this process: BasePPOExp asks for 8 worker processes
            # (spawned, each importing the trainer: a minute on a small CPU machine for a handful of prompts)
            from skyrl.train.dataset import PromptDataset

            return PromptDataset(datasets=files, tokenizer=self.tokenizer,
                                 max_prompt_length=self.cfg.trainer.max_prompt_length, num_workers=1)

        def get_train_dataset(self):
            if self.device != "cpu":
                return super().get_train_dataset()
            dataset = self._prompts(self.cfg.data.train_data)
            if len(dataset) < self.cfg.trainer.train_batch_size:
                raise ConfigError(f"config key 'train.batch_size' ({self.cfg.trainer.train_batch_size}) exceeds the "
                                  f"{len(dataset)} training prompts SkyRL-train kept")
            return dataset

        def get_eval_dataset(self):
            if self.device != "cpu":
                return super().get_eval_dataset()
            if self.cfg.trainer.eval_interval > 0 and self.cfg.data.val_data:
                return self._prompts(self.cfg.data.val_data)
            return None

        def get_inference_client(self):
            if self.device != "cpu":
                return super().get_inference_client()
            from skyrl_core.default_plugins.engines.hf import HFEngine

            from .engine import EngineInferenceClient

            ec = self.skyrl_config.engine
            engine = HFEngine(self.cfg.trainer.policy.model.path, max_batch=int(getattr(ec, "max_batch", 16)),
                              device="cpu", dtype="float32")
            return EngineInferenceClient(engine)

        def get_trainer(self, cfg, tracker, tokenizer, train_dataset, eval_dataset, inference_engine_client,
                        generator, colocate_pg):
            if self.device != "cpu":
                return super().get_trainer(cfg, tracker, tokenizer, train_dataset, eval_dataset,
                                           inference_engine_client, generator, colocate_pg)
            from .cpu import trainer_class

            return trainer_class()(cfg=cfg, tracker=tracker, tokenizer=tokenizer, train_dataset=train_dataset,
                                   eval_dataset=eval_dataset, inference_engine_client=inference_engine_client,
                                   generator=generator, colocate_pg=colocate_pg)

        def get_generator(self, cfg, tokenizer, inference_engine_client):
            from .generator import SkyrlAgentGenerator

            gen = SkyrlAgentGenerator(self.skyrl_config, inference_engine_client, tokenizer,
                                      step_wise=cfg.generator.step_wise_trajectories, model=_policy_name(cfg))
            self.generators.append(gen)
            return gen

    return SkyrlPPOExp


def _policy_name(cfg: Any) -> str | None:
    try:
        from skyrl.backends.skyrl_train.inference_servers.utils import resolve_policy_model_name
    except ImportError:
        return None
    return resolve_policy_model_name(cfg)


def _checksum(module: Any) -> float:
    """Sum of every parameter's float64 values: a cheap fingerprint that changes when any weight moves."""
    import torch

    with torch.no_grad():
        return float(sum(p.detach().double().sum().item() for p in module.parameters()))


def _run_experiment(cfg: Any, skyrl_config: dict, device: str = "cuda") -> dict[str, Any]:
    """Body of the Ray task: validate SkyRL-train's config as its own entrypoint does, then run; close every
    rollout session the run opened. Returns a report: ``steps`` (SkyRL-train's last global step), ``sessions`` /
    ``sessions_closed``, ``rollouts`` (per generate call: ``rows``, ``groups``, ``runtime_starts``,
    ``runtime_releases`` from skyrl's dispatcher); on the CPU route also ``weight_syncs`` and ``checksum_before``
    / ``checksum_after`` (sums of the rollout engine's weights: the checkpoint as loaded, before SkyRL-train's
    first sync; SkyRL-train's last policy export, after the run)."""
    utils = compat.module("utils.utils")
    utils.validate_cfg(cfg)
    exp = experiment_class()(cfg, skyrl_config, device)
    report: dict[str, Any] = {"metrics": []}
    engine_holder: dict[str, Any] = {}
    setup = exp._setup_trainer

    def traced_setup():
        trainer = setup()
        log_to_tracker = trainer.tracker.log

        def log(data: dict, step: int, *args: Any, **kwargs: Any) -> Any:
            # each row SkyRL-train's tracker logs (its per-step training metrics, eval rows), kept for the report
            import numbers

            report["metrics"].append({"step": step, **{k: v if isinstance(v, (str, bool)) else float(v)
                                                        for k, v in data.items()
                                                        if isinstance(v, (numbers.Real, str, bool))}})
            return log_to_tracker(data, step, *args, **kwargs)

        trainer.tracker.log = log
        if device == "cpu":
            engine_holder["engine"] = trainer.inference_engine_client.engine
            report["checksum_before"] = _checksum(engine_holder["engine"].model)
        return trainer

    exp._setup_trainer = traced_setup
    try:
        exp.run()
        report["steps"] = exp.trainer.global_step
        if device == "cpu":
            report["checksum_after"] = _checksum(exp.trainer.inference_engine_client.engine.model)
            report["weight_syncs"] = getattr(exp.trainer.dispatch, "weight_syncs", 0)
    finally:
        import asyncio

        async def close() -> None:
            for gen in exp.generators:  # every rollout session the run opened: placements, runtimes
                await gen.close()
            if device == "cpu" and engine_holder.get("engine") is not None:
                await engine_holder["engine"].close()

        asyncio.run(close())
    report["sessions_closed"] = sum(1 for gen in exp.generators if gen.closed)
    report["sessions"] = len(exp.generators)
    report["rollouts"] = [r for gen in exp.generators for r in gen.rollouts]
    return report


def launch(config: Any, *, output: str | Path, resume: bool = False, n_gpus_per_node: int | None = None,
           nnodes: int = 1) -> dict[str, Any]:
    """Run SkyRL-train's trainer on ``config``, writing data, checkpoints and exports under ``output``.
    ``resume`` continues from the latest checkpoint there (SkyRL-train's ``resume_mode=latest``). Without CUDA
    (or with ``backend.options.device: cpu``) it runs the CPU route (:mod:`skyrl_skyrl_train.cpu`). Returns the
    run's report (see :func:`_run_experiment`). Raises ConfigError for unsupported settings and SkyrlError when
    the CUDA route lacks a GPU or vLLM."""
    import importlib.util

    import torch

    device = device_of(config)
    check_supported(config, device=device)
    if device == "cuda":
        if not torch.cuda.is_available():
            raise SkyrlError("backend.options.device is cuda, but torch sees no CUDA GPU; leave it unset (or cpu) "
                             "for SkyRL-train's CPU route, or `skyrl skyrl-train config CONFIG` to see the config")
        if importlib.util.find_spec("vllm") is None:
            raise SkyrlError("backend skyrl-train needs the python package 'vllm' (SkyRL-train's inference servers)")
    import ray

    out = Path(output)
    data = out / "skyrl_train_data"
    write_dataset(config, "train", data / "train.jsonl")
    write_dataset(config, "eval", data / "val.jsonl")
    gpus = 1 if device == "cpu" else (n_gpus_per_node or torch.cuda.device_count())
    cfg = build_skyrl_train_config(config, train_data=str(data / "train.jsonl"), val_data=str(data / "val.jsonl"),
                                   n_gpus_per_node=gpus, nnodes=nnodes, output_dir=str(out), device=device)
    cfg.trainer.resume_mode = "latest" if resume else "none"
    started = False
    if not ray.is_initialized():
        if device == "cpu":
            from .cpu import init_ray

            init_ray(cfg)
        else:
            compat.module("utils.utils").initialize_ray(cfg)
        started = True
    try:
        task = ray.remote(num_cpus=1)(_run_experiment)
        report = ray.get(task.remote(cfg, config.to_dict(), device))
    finally:
        if started:
            ray.shutdown()
    log.info("SkyRL-train run: %s", report)
    return report


skyrl_train_app = typer.Typer(help="Train with SkyRL-train: print the SkyRL-train config built from a skyrl "
                                   "config (`skyrl train CONFIG backend=skyrl-train` launches it).",
                              no_args_is_help=True)


@skyrl_train_app.callback()
def skyrl_train_group() -> None:
    """Train with SkyRL-train (`skyrl train CONFIG backend=skyrl-train` launches it)."""


@skyrl_train_app.command("config")
def config_command(config_path: str = typer.Argument(..., help="skyrl YAML config"),
                   overrides: Optional[list[str]] = typer.Argument(None, help="key.sub=value overrides"),
                   n_gpus: int = typer.Option(8, "--gpus", help="GPUs per node"),
                   nnodes: int = typer.Option(1, "--nodes", help="nodes")) -> None:
    """Print SkyRL-train's config (YAML) for CONFIG."""
    from skyrl_core.config import load_config

    cfg = build_skyrl_train_config(load_config(config_path, list(overrides or [])), n_gpus_per_node=n_gpus,
                                   nnodes=nnodes)
    typer.echo(compat.module("config").get_config_as_yaml_str(cfg))
