"""The ``tinker`` training backend: skyrl's TrainingBatch trained as a LoRA adapter on a Tinker service.

One ``train_step``: the batch becomes Tinker ``Datum``s (:mod:`skyrl_tinker.datums`, shift and masks there),
split into ``backend.mini_batches`` mini-batches; for each, ``forward_backward(datums, loss)`` and
``optim_step(AdamParams)`` are *submitted* back to back before any result is awaited (the service runs them
in submission order, so the next forward/backward is queued while the last one computes). ``sync_weights``
then saves the adapter for the sampler (``save_weights_for_sampler``) and points the ``tinker`` engine at it.

Settings: ``backend.lr``, ``backend.betas``, ``backend.weight_decay``, ``backend.max_grad_norm`` ->
``AdamParams``; ``backend.lora.r`` (default 32) -> the LoRA rank; ``backend.clip``/``clip_high`` -> ppo's clip
thresholds; ``backend.mini_batches``; ``backend.options``: ``loss`` (``importance_sampling`` default, or
``ppo``), ``base_url``, ``base_model``, ``seed`` (the adapter's init seed), ``train_mlp``/``train_attn``/
``train_unembed`` (default true), ``ttl_seconds`` (how long the service keeps saved states; default: forever).

Checkpoints: ``save(dir)`` saves Tinker's own state (weights and Adam moments: ``save_state``) on the service
and writes ``tinker.json`` (its ``tinker://`` path, the sampler path, base model, rank, step) into ``dir``;
``load(dir)`` reads it and the next call restores a training client from that state with its optimizer
(``create_training_client_from_state_with_optimizer``), so ``skyrl train --resume`` continues the same adapter.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from pathlib import Path
from typing import Any

from skyrl_core.backends import Backend
from skyrl_core.errors import ConfigError, SkyrlError
from skyrl_core.transitions import TrainingBatch

from .client import call, call_blocking, describe_error, wait
from .datums import convert_batch, split
from .engine import TinkerEngine, check_options

log = logging.getLogger(__name__)

LOSSES = ("importance_sampling", "ppo")
BACKEND_OPTIONS = {"loss", "base_url", "base_model", "seed", "train_mlp", "train_attn", "train_unembed",
                   "ttl_seconds"}
STATE_FILE = "tinker.json"


class TinkerBackend(Backend):
    """Backend ``tinker``, built ``TinkerBackend(config, engine)`` with the run's ``tinker`` engine (whose
    service client and settings it shares). Raises ConfigError when the engine is another kind or an option is
    unknown or invalid; TinkerServiceError (one message: operation, URL, auth/quota/server/...) when a call fails.
    """

    name = "tinker"

    def __init__(self, config: Any, engine: Any = None) -> None:
        super().__init__(config, engine)
        bc = config.backend
        check_options(bc.options, BACKEND_OPTIONS, "backend.options")
        if not isinstance(engine, TinkerEngine):
            kind = getattr(engine, "name", type(engine).__name__)
            raise ConfigError(f"backend tinker samples through the Tinker service: set engine: tinker (the engine "
                              f"is '{kind}', which cannot load the adapter Tinker trains)")
        self.loss = str(bc.options.get("loss", "importance_sampling"))
        if self.loss not in LOSSES:
            raise ConfigError(f"backend.options.loss '{self.loss}' is not one of {', '.join(LOSSES)}")
        if len(bc.betas) != 2:
            raise ConfigError(f"backend.betas must be two numbers [beta1, beta2], got {bc.betas}")
        self.rank = int(bc.lora.r) if bc.lora is not None else 32
        self.settings = engine.settings
        self.base_url = self.settings["base_url"]
        self.service = engine.service
        self.training_client: Any = None
        self.steps = 0
        self.state_path: str | None = None     # tinker:// path of the last save_state
        self.sampler_path: str | None = None   # tinker:// path of the last save_weights_for_sampler
        self._resume_from: str | None = None
        self._lock = asyncio.Lock()

    # -- the Tinker client -------------------------------------------------------------------------------
    async def _training(self) -> Any:
        async with self._lock:
            if self.training_client is None:
                opts = self.config.backend.options
                if self._resume_from is not None:
                    self.training_client = await call(
                        self.service.create_training_client_from_state_with_optimizer, self._resume_from,
                        operation="create_training_client_from_state_with_optimizer", base_url=self.base_url)
                    log.warning("tinker: restored the adapter and optimizer state %s", self._resume_from)
                else:
                    self.training_client = await call(
                        self.service.create_lora_training_client, base_model=self.settings["base_model"],
                        rank=self.rank, seed=opts.get("seed", self.config.train.seed),
                        train_mlp=bool(opts.get("train_mlp", True)), train_attn=bool(opts.get("train_attn", True)),
                        train_unembed=bool(opts.get("train_unembed", True)),
                        operation="create_lora_training_client", base_url=self.base_url)
            return self.training_client

    def adam_params(self) -> Any:
        import tinker

        bc = self.config.backend
        return tinker.AdamParams(learning_rate=float(bc.lr), beta1=float(bc.betas[0]), beta2=float(bc.betas[1]),
                                 eps=1e-8, weight_decay=float(bc.weight_decay), grad_clip_norm=float(bc.max_grad_norm))

    def loss_config(self) -> dict[str, float] | None:
        bc = self.config.backend
        if self.loss != "ppo":
            return None
        return {"clip_low_threshold": 1.0 - bc.clip, "clip_high_threshold": 1.0 + (bc.clip_high or bc.clip)}

    # -- Backend ---------------------------------------------------------------------------------------------
    async def train_step(self, batch: TrainingBatch) -> dict[str, float]:
        """Submit every mini-batch's forward_backward and optim_step, then await them all. Metrics: ``loss``
        (token mean of Tinker's elementwise loss over model tokens), ``logprob_mean`` (learner logprob of the
        model tokens), ``ratio_mean`` (learner / sampler probability), ``datums``, ``skipped_datums``,
        ``tokens``, ``optim_steps``, ``submit_s``/``wait_s`` (seconds), and the service's own metrics."""
        import numpy as np

        converted = await asyncio.to_thread(convert_batch, batch)
        self.steps += 1
        base = {"datums": float(len(converted.datums)), "skipped_datums": float(converted.skipped),
                "tokens": float(converted.tokens)}
        if not converted.datums:
            log.warning("tinker: step %d has no trainable datum (all loss-masked); no update", self.steps)
            return {**base, "loss": 0.0, "optim_steps": 0.0}
        client = await self._training()
        parts = split(list(range(len(converted.datums))), self.config.backend.mini_batches)
        adam, loss_cfg = self.adam_params(), self.loss_config()

        def submit() -> list[tuple[Any, Any]]:
            futures = []
            for part in parts:
                fb = client.forward_backward([converted.datums[i] for i in part], self.loss, loss_cfg)
                futures.append((fb, client.optim_step(adam_params=adam)))
            return futures

        t0 = time.perf_counter()
        try:
            futures = await asyncio.to_thread(submit)
        except Exception as exc:
            raise describe_error(exc, "forward_backward", self.base_url) from exc
        t1 = time.perf_counter()
        loss_sum = lp_sum = ratio_sum = weight_sum = 0.0
        service: dict[str, list[float]] = {}
        for part, (fb_future, opt_future) in zip(parts, futures):
            fb = await wait(fb_future, operation="forward_backward", base_url=self.base_url)
            opt = await wait(opt_future, operation="optim_step", base_url=self.base_url)
            for k, v in list((getattr(fb, "metrics", None) or {}).items()) + \
                    list((getattr(opt, "metrics", None) or {}).items()):
                if isinstance(v, (int, float)):
                    service.setdefault(k, []).append(float(v))
            for i, out in zip(part, fb.loss_fn_outputs):
                datum = converted.datums[i]
                w = datum.loss_fn_inputs["weights"].to_numpy()
                sampler = datum.loss_fn_inputs["logprobs"].to_numpy()
                learner = out["logprobs"].to_numpy()[: len(w)]
                loss_sum += float(np.sum(out["elementwise_loss"].to_numpy()[: len(w)] * (w != 0)))
                lp_sum += float(np.sum(learner * w))
                ratio_sum += float(np.sum(np.exp(np.clip(learner - sampler, -20, 20)) * w))
                weight_sum += float(np.sum(w))
        denom = max(weight_sum, 1.0)
        metrics = {**base, "loss": loss_sum / denom, "logprob_mean": lp_sum / denom, "ratio_mean": ratio_sum / denom,
                   "optim_steps": float(len(parts)), "submit_s": t1 - t0, "wait_s": time.perf_counter() - t1}
        if not np.isfinite(metrics["loss"]):
            self.bad_steps += 1
        else:
            self.bad_steps = 0
        metrics.update({f"service/{k}": sum(v) / len(v) for k, v in service.items()})
        return metrics

    async def sync_weights(self, engine: Any) -> None:
        """Save the adapter for sampling (``save_weights_for_sampler``) and make ``engine`` sample from it."""
        client = await self._training()
        ttl = self.config.backend.options.get("ttl_seconds")
        saved = await call(client.save_weights_for_sampler, f"skyrl-sampler-{self.steps:06d}-{int(time.time())}",
                           ttl_seconds=ttl, operation="save_weights_for_sampler", base_url=self.base_url)
        self.sampler_path = saved.path
        if isinstance(engine, TinkerEngine):
            await engine.use_weights(saved.path)

    def save(self, directory: str | os.PathLike) -> None:
        """Save Tinker's state (adapter + Adam moments) on the service and write ``tinker.json`` into
        ``directory``. Raises TinkerServiceError when the service does not save."""
        if self.training_client is not None:
            saved = call_blocking(self.training_client.save_state,
                                  f"skyrl-state-{self.steps:06d}-{int(time.time())}",
                                  ttl_seconds=self.config.backend.options.get("ttl_seconds"),
                                  operation="save_state", base_url=self.base_url)
            self.state_path = saved.path
        elif self._resume_from is not None:
            self.state_path = self._resume_from
        record = {"state_path": self.state_path, "sampler_path": self.sampler_path, "steps": self.steps,
                  "base_model": self.settings["base_model"], "base_url": self.base_url, "rank": self.rank,
                  "loss": self.loss, "sdk": _sdk_version()}
        (Path(directory) / STATE_FILE).write_text(json.dumps(record, indent=1))

    def load(self, directory: str | os.PathLike) -> None:
        """Read ``tinker.json`` from ``directory``; the next call restores that state. Raises SkyrlError naming
        the missing file, or a checkpoint made for another base model."""
        path = Path(directory) / STATE_FILE
        if not path.is_file():
            raise SkyrlError(f"{path} is missing: this checkpoint was not written by backend tinker")
        record = json.loads(path.read_text())
        if record.get("base_model") != self.settings["base_model"]:
            raise SkyrlError(f"{path} holds an adapter of base model '{record.get('base_model')}', but this run "
                             f"trains '{self.settings['base_model']}'")
        if not record.get("state_path"):
            raise SkyrlError(f"{path} has no Tinker state path (it was saved before any train step)")
        self._resume_from = record["state_path"]
        self.state_path = record["state_path"]
        self.sampler_path = record.get("sampler_path")
        self.steps = int(record.get("steps", 0))
        self.training_client = None

    async def close(self) -> None:
        self.training_client = None


def _sdk_version() -> str:
    import tinker

    return str(getattr(tinker, "__version__", "?"))


def tinker_backend(config, engine=None):
    """Backend factory ``tinker``: LoRA training on a Tinker service (:class:`TinkerBackend`)."""
    return TinkerBackend(config, engine)
