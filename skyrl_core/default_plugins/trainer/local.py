"""The built-in ``local`` backend: a torch trainer in this process.

With the in-process ``hf`` engine the trainer updates ``engine.model`` itself — one module, no weight copy, the
next rollout samples from the new policy. For any other engine it loads its own copy of ``config.model`` and
pushes weights through ``engine.update_weights`` after each step.

One :meth:`LocalBackend.train_step` = ``backend.mini_batches`` optimizer steps (AdamW, gradient clipping to
``backend.max_grad_norm``), each accumulating gradients over micro-batches of at most
``backend.micro_batch_tokens`` padded tokens. The loss is :func:`~.losses.policy_loss`
(token-mean over the mini-batch's generated tokens) plus optional KL and entropy terms.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import copy
import json
import logging
import math
import os
import time
from pathlib import Path
from typing import Any, Sequence

import torch

from skyrl_core.backends import Backend
from skyrl_core.errors import ConfigError, SkyrlError
from skyrl_core.transitions import Datum, TrainingBatch
from skyrl_core.default_plugins.trainer.losses import entropy_from_logits, kl_penalty, masked_mean
from skyrl_core.default_plugins.trainer.memory import current_rss_mb, peak_rss_mb, release_freed_memory

log = logging.getLogger(__name__)


def resolve_policy_loss(name: str) -> Any:
    """The policy loss ``backend.policy_loss`` names: a built-in of :data:`~.losses.POLICY_LOSSES`
    or one a plugin registered through ``register_policy_losses``. Raises UnknownComponentError listing the
    registered ones."""
    from skyrl_core.plugins import get_registry

    return get_registry().get("policy_losses", name)


def plan_micro_batches(lengths: Sequence[int], max_tokens: int) -> list[list[int]]:
    """Group sequence indices into micro-batches whose padded size (rows x longest row) stays within
    ``max_tokens`` tokens; a single longer sequence gets a micro-batch of its own. Sorting by length keeps the
    padding small. Returns lists of indices into ``lengths``."""
    order = sorted(range(len(lengths)), key=lambda i: (lengths[i], i))
    batches: list[list[int]] = []
    cur: list[int] = []
    longest = 0
    for i in order:
        new_longest = max(longest, lengths[i])
        if cur and new_longest * (len(cur) + 1) > max_tokens:
            batches.append(cur)
            cur, new_longest = [], lengths[i]
        cur.append(i)
        longest = new_longest
    if cur:
        batches.append(cur)
    return batches


class LocalBackend(Backend):
    """Train ``engine.model`` (hf engine) or a local copy of ``config.model`` with the clipped PG loss.

    Raises ConfigError for a LoRA config that names no module of the model, and MissingExtraError when peft is
    needed but absent.
    """

    name = "local"
    #: asynchronous training (``train.max_staleness``): any lag; the rollout logprobs make the correction
    #: (``backend.policy_loss: decoupled_ppo``). Declared on this class only: the core does not take a subclass
    #: (a bridge with its own loss) to support it unless it declares it too.
    max_staleness = math.inf

    def __init__(self, config: Any, engine: Any = None) -> None:
        super().__init__(config, engine)
        bc = config.backend
        self.bc = bc
        self.policy_loss = resolve_policy_loss(bc.policy_loss)
        shared = engine is not None and isinstance(getattr(engine, "model", None), torch.nn.Module)
        # asynchronous training generates while this trains: the engine keeps its own module and receives the
        # weights after each step (engine.update_weights), so no forward pass sees half-updated weights
        shared = shared and getattr(getattr(config, "train", None), "max_staleness", 0) == 0
        if shared:
            self.model = engine.model
        else:
            from skyrl_core.default_plugins.engines.models import load_causal_lm

            device = "cuda" if torch.cuda.is_available() else "cpu"
            self.model = load_causal_lm(config.model, device=device, dtype="float32")
        self.shared = shared
        # The policy trained is the one rollouts sampled from: logits / sampling.temperature (as the engines
        # compute their logprobs). Without this a run sampling at T=0.7 would optimise the T=1 distribution and
        # its ratios to the rollout logprobs would not be 1 even exactly on-policy. Top-p/top-k truncation is
        # not applied (the usual practice; see docs/training.md).
        temperature = float(getattr(getattr(config, "sampling", None), "temperature", 1.0) or 0.0)
        self.temperature = temperature if temperature > 0 else 1.0
        self.device = next(self.model.parameters()).device
        if bc.bf16 == "on":
            self.autocast_dtype: torch.dtype | None = torch.bfloat16
        elif bc.bf16 == "auto" and self.device.type == "cuda" and torch.cuda.is_bf16_supported():
            self.autocast_dtype = torch.bfloat16
        else:
            self.autocast_dtype = None
        self.peft_model = None
        if bc.lora is not None:
            self._add_lora()
        if bc.gradient_checkpointing:
            self.model.gradient_checkpointing_enable()
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        if not self.params:
            raise ConfigError("backend: the model has no trainable parameters (check backend.lora.target_modules)")
        # on CPU the multi-tensor (foreach) AdamW materialises temporaries as large as all parameters; the
        # per-parameter loop keeps peak memory at weights + grads + moments
        self.optimizer = torch.optim.AdamW(self.params, lr=bc.lr, betas=tuple(bc.betas),
                                           weight_decay=bc.weight_decay, foreach=self.device.type != "cpu")
        self.ref_model = None
        if bc.kl_coef > 0 and self.peft_model is None:
            # frozen copy of the initial policy; with LoRA the reference is the model with adapters disabled
            self.ref_model = copy.deepcopy(self.model).eval()
            for p in self.ref_model.parameters():
                p.requires_grad_(False)
        self.updates = 0
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        pad = getattr(getattr(engine, "tokenizer", None), "pad_token_id", None)
        self.pad_id = int(pad) if pad is not None else 0

    # -- setup -----------------------------------------------------------------------------------------------
    def _add_lora(self) -> None:
        from skyrl_core.errors import require

        peft = require("peft", "train", "LoRA training (backend.lora)")
        lc = self.bc.lora
        names = {n.rsplit(".", 1)[-1] for n, _ in self.model.named_modules()}
        missing = [m for m in lc.target_modules if m not in names]
        if missing:
            raise ConfigError(f"backend.lora.target_modules: {missing} are not modules of the model; "
                              f"linear layers include {sorted(n for n in names if n.endswith('proj'))}")
        lora_config = peft.LoraConfig(r=lc.r, lora_alpha=lc.alpha, lora_dropout=lc.dropout,
                                      target_modules=list(lc.target_modules), task_type="CAUSAL_LM")
        # peft injects the adapters into the modules of self.model in place, so a shared engine module
        # generates with them too
        self.peft_model = peft.get_peft_model(self.model, lora_config)

    # -- forward ---------------------------------------------------------------------------------------------
    def _collate(self, data: Sequence[Datum]) -> dict[str, torch.Tensor]:
        """Left-pad prompt+response so every row's response ends at the last column.

        Returns ``input_ids``/``attention_mask``/``position_ids`` [rows, seq] and, right-aligned over the last
        ``resp`` columns, ``targets``, ``response_mask``, ``loss_tokens`` (response mask x loss mask),
        ``advantages``, ``rollout_logprobs`` (or absent) — all [rows, resp]."""
        seq = max(len(d.prompt_ids) + len(d.response_ids) for d in data)
        resp = max(len(d.response_ids) for d in data)
        rows = len(data)
        ids = torch.full((rows, seq), self.pad_id, dtype=torch.long)
        attn = torch.zeros((rows, seq), dtype=torch.long)
        rmask = torch.zeros((rows, resp), dtype=torch.float32)
        adv = torch.zeros((rows, resp), dtype=torch.float32)
        have_lp = all(d.rollout_logprobs is not None for d in data)
        rlp = torch.zeros((rows, resp), dtype=torch.float32) if have_lp else None
        lmask = torch.zeros((rows, 1), dtype=torch.float32)
        for i, d in enumerate(data):
            tokens = d.prompt_ids + d.response_ids
            ids[i, seq - len(tokens):] = torch.tensor(tokens, dtype=torch.long)
            attn[i, seq - len(tokens):] = 1
            r = len(d.response_ids)
            if r:
                rmask[i, resp - r:] = torch.tensor(d.response_mask, dtype=torch.float32)
                adv[i, resp - r:] = d.advantage
                if rlp is not None:
                    rlp[i, resp - r:] = torch.tensor(d.rollout_logprobs, dtype=torch.float32)
            lmask[i] = float(d.loss_mask)
        pos = (attn.cumsum(-1) - 1).clamp(min=0)
        out = {"input_ids": ids, "attention_mask": attn, "position_ids": pos, "targets": ids[:, seq - resp:],
               "response_mask": rmask, "loss_tokens": rmask * lmask, "advantages": adv}
        if rlp is not None:
            out["rollout_logprobs"] = rlp
        return {k: v.to(self.device) for k, v in out.items()}

    def _logits(self, model: torch.nn.Module, mb: dict[str, torch.Tensor]) -> torch.Tensor:
        """Logits predicting the response tokens, divided by the rollout temperature: [rows, resp, vocab]. Only
        the last resp+1 positions go through the LM head (the prompt's logits are never needed)."""
        resp = mb["targets"].shape[1]
        ctx = (torch.autocast(self.device.type, dtype=self.autocast_dtype) if self.autocast_dtype is not None
               else contextlib.nullcontext())
        with ctx:
            out = model(input_ids=mb["input_ids"], attention_mask=mb["attention_mask"],
                        position_ids=mb["position_ids"], logits_to_keep=resp + 1, use_cache=False)
        logits = out.logits[:, :-1, :]
        return logits / self.temperature if self.temperature != 1.0 else logits

    @staticmethod
    def _token_logprobs(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """log p(target) per position [rows, resp] in float32 (cross-entropy avoids a second vocab-sized copy)."""
        rows, resp, vocab = logits.shape
        return -torch.nn.functional.cross_entropy(logits.float().reshape(-1, vocab), targets.reshape(-1),
                                                  reduction="none").view(rows, resp)

    def compute_logprobs(self, data: Sequence[Datum]) -> list[list[float]]:
        """The current policy's logprobs of each datum's response tokens ([resp_len] per datum), no grad."""
        out: list[list[float]] = []
        was_training = self.model.training
        self.model.eval()
        try:
            with torch.no_grad():
                for d in data:
                    mb = self._collate([d])
                    lp = self._token_logprobs(self._logits(self._trainable(), mb), mb["targets"])
                    out.append(lp[0].tolist())
        finally:
            self.model.train(was_training)
        return out

    def _trainable(self) -> torch.nn.Module:
        return self.peft_model if self.peft_model is not None else self.model

    def _ref_logprobs(self, mb: dict[str, torch.Tensor]) -> torch.Tensor:
        with torch.no_grad():
            if self.peft_model is not None:
                with self.peft_model.disable_adapter():
                    logits = self._logits(self.peft_model, mb)
            else:
                logits = self._logits(self.ref_model, mb)
            return self._token_logprobs(logits, mb["targets"])

    # -- training --------------------------------------------------------------------------------------------
    async def train_step(self, batch: TrainingBatch) -> dict[str, float]:
        """One training step on ``batch`` in this backend's own worker thread (the event loop stays free).
        One persistent thread rather than the shared pool: every new thread gets its own malloc arena, and
        freed activation memory parked in many arenas shows up as a growing RSS.

        Memory accounting (docs/training.md, "Memory"): before the step the rollouts' freed KV caches go back to
        the OS (:func:`~.memory.release_freed_memory`), and the returned metrics add this process's ``rss_mb``
        and ``peak_rss_mb`` (MiB) after it."""
        if self._executor is None:
            self._executor = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="skyrl-train")
        release_freed_memory()  # the rollouts' KV caches, freed in the engine's arena
        metrics = await asyncio.get_running_loop().run_in_executor(self._executor, self.train_step_sync, batch)
        metrics.update(rss_mb=current_rss_mb(), peak_rss_mb=peak_rss_mb())
        return metrics

    async def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None

    def train_step_sync(self, batch: TrainingBatch) -> dict[str, float]:
        """Blocking form of :meth:`train_step`. Data with ``loss_mask`` 0 or no generated token are not
        computed. A non-finite loss or gradient norm skips the update (``skipped`` = 1) and increments
        ``bad_steps``; an empty batch returns ``empty`` = 1 and leaves ``bad_steps`` as it was."""
        start = time.perf_counter()
        bc = self.bc
        data = [d for d in batch.data if d.loss_mask and any(d.response_mask)]
        metrics: dict[str, float] = {"train_data": float(len(data)), "empty": 0.0, "skipped": 0.0}
        if not data:
            metrics.update(empty=1.0, train_time_s=time.perf_counter() - start)
            return metrics
        n_mini = max(1, min(bc.mini_batches, len(data)))
        old_lps = None
        if n_mini > 1:
            old_lps = {id(d): lp for d, lp in zip(data, self.compute_logprobs(data))}
        self.model.train()
        minis = [data[i::n_mini] for i in range(n_mini)]
        sums: dict[str, float] = {}
        tokens_total = 0
        skipped = 0
        try:
            for mini in minis:
                self.optimizer.zero_grad(set_to_none=True)
                loss_total, finite, m, n_tok = self.accumulate_gradients(mini, old_lps)
                tokens_total += n_tok
                for k, v in m.items():
                    if k.endswith("_max"):
                        sums[k] = max(sums.get(k, v), v)
                    else:
                        sums[k] = sums.get(k, 0.0) + v / n_mini
                grad_norm = float(torch.nn.utils.clip_grad_norm_(self.params, bc.max_grad_norm)) if finite else math.nan
                if not finite or not math.isfinite(grad_norm):
                    self.optimizer.zero_grad(set_to_none=True)
                    skipped += 1
                    log.warning("non-finite loss or gradient norm (loss %s, grad norm %s): update skipped",
                                loss_total if finite else "nan", grad_norm)
                    continue
                self.optimizer.step()
                self.updates += 1
                sums["loss"] = sums.get("loss", 0.0) + loss_total / n_mini
                sums["grad_norm"] = max(sums.get("grad_norm", 0.0), grad_norm)
        finally:
            self.optimizer.zero_grad(set_to_none=True)
            self.model.eval()
            # the step freed its activations and gradients (hundreds of MiB); hand the pages back to the OS so
            # the engine's next rollouts do not stack their own arenas on top (RSS grew step by step without it)
            release_freed_memory()
        self.bad_steps = self.bad_steps + 1 if skipped == n_mini else 0
        elapsed = time.perf_counter() - start
        metrics.update(sums)
        metrics.update(skipped=float(skipped == n_mini), skipped_updates=float(skipped), updates=float(self.updates),
                       train_tokens=float(tokens_total), train_time_s=elapsed,
                       train_tokens_per_s=tokens_total / elapsed if elapsed > 0 else 0.0,
                       lr=float(self.optimizer.param_groups[0]["lr"]))
        return metrics

    def accumulate_gradients(self, mini: Sequence[Datum], old_lps: dict[int, list[float]] | None = None
                             ) -> tuple[float, bool, dict[str, float], int]:
        """Backward the token-mean loss of one mini-batch into ``param.grad``, micro-batch by micro-batch.

        ``old_lps`` maps ``id(datum)`` to its old logprobs (None: on-policy, old = current). Returns the loss,
        whether it was finite (the first non-finite micro-batch stops the accumulation), the loss-term metrics
        (token-weighted) and the number of real (unpadded) tokens processed."""
        bc = self.bc
        model = self._trainable()
        n_tokens = sum(sum(d.response_mask) for d in mini)
        self.begin_mini_batch(mini, n_tokens)
        loss_total = 0.0
        sums: dict[str, float] = {}
        tokens = 0
        lengths = [len(d.prompt_ids) + len(d.response_ids) for d in mini]
        for idx in plan_micro_batches(lengths, bc.micro_batch_tokens):
            rows = [mini[i] for i in idx]
            mb = self._collate(rows)
            tokens += int(mb["attention_mask"].sum())
            logits = self._logits(model, mb)
            lp = self._token_logprobs(logits, mb["targets"])
            if old_lps is None:
                old = lp.detach()
            else:
                old = torch.zeros_like(lp)
                for r, d in enumerate(rows):
                    n = len(d.response_ids)
                    if n:
                        old[r, -n:] = torch.tensor(old_lps[id(d)], device=lp.device)
            mask = mb["loss_tokens"]
            scaled, m = self.micro_batch_loss(lp, old, logits, mb, n_tokens)
            if not torch.isfinite(scaled):
                return loss_total, False, sums, tokens
            scaled.backward()
            loss_total += float(scaled.detach())
            share = float(mask.sum()) / max(n_tokens, 1)
            for k, v in m.items():
                sums[k] = max(sums.get(k, v), v) if k.endswith("_max") else sums.get(k, 0.0) + v * share
            del logits, lp, scaled
        return loss_total, True, sums, tokens

    def begin_mini_batch(self, mini: Sequence[Datum], n_tokens: int) -> None:
        """Called once before a mini-batch's micro-batches (bridges set their global batch info here)."""

    def micro_batch_loss(self, lp: torch.Tensor, old: torch.Tensor, logits: torch.Tensor, mb: dict,
                         n_tokens: int) -> tuple[torch.Tensor, dict[str, float]]:
        """The loss of one micro-batch, scaled so that the micro-batch losses of a mini-batch add up to its
        token-mean loss (``n_tokens``: loss tokens in the whole mini-batch), and its metrics.

        ``lp``/``old`` are ``[rows, resp_len]`` logprobs under the current and the behaviour policy; ``logits``
        ``[rows, resp_len, vocab]``; ``mb`` the collated micro-batch (``advantages``, ``loss_tokens``, ...).
        Bridges override this to use their own trainer's loss on the same data."""
        bc = self.bc
        mask = mb["loss_tokens"]
        loss, m = self.policy_loss(lp, old, mb["advantages"], mask, bc, rollout_logprobs=mb.get("rollout_logprobs"))
        if bc.kl_coef > 0:
            ref = self._ref_logprobs(mb)
            kl = kl_penalty(lp, ref, mask)
            loss = loss + bc.kl_coef * kl
            m["kl_policy_ref_k3"] = float(kl.detach())
            m["kl_policy_ref_k1"] = float(masked_mean(lp.detach() - ref, mask))
        if bc.entropy_coef > 0:
            ent = (entropy_from_logits(logits) * mask).sum() / mask.sum().clamp(min=1.0)
            loss = loss - bc.entropy_coef * ent
            m["entropy"] = float(ent.detach())
        # token-mean over the whole mini-batch: weight each micro-batch by its share of the tokens
        return loss * (float(mask.sum()) / max(n_tokens, 1)), m

    # -- weights ---------------------------------------------------------------------------------------------
    def policy_state_dict(self) -> dict[str, torch.Tensor]:
        """Full policy weights with any LoRA adapters merged, under the base model's parameter names."""
        if self.peft_model is None:
            return {k: v.detach().clone() for k, v in self.model.state_dict().items()}
        self.peft_model.merge_adapter()
        try:
            out = {}
            for k, v in self.peft_model.get_base_model().state_dict().items():
                if "lora_" in k:
                    continue
                out[k.replace(".base_layer", "")] = v.detach().clone()
            return out
        finally:
            self.peft_model.unmerge_adapter()

    async def sync_weights(self, engine: Any) -> None:
        """Shared module (hf engine): the weights are already there; tell the engine they changed so it drops
        caches computed with the old ones. Otherwise push the merged weights via ``engine.update_weights``
        (an engine without an update path raises SkyrlError naming itself)."""
        if engine is None:
            return
        if getattr(engine, "model", None) is self.model:
            await engine.update_weights(None)
            return
        await engine.update_weights(self.policy_state_dict())

    # -- checkpoints -----------------------------------------------------------------------------------------
    def save(self, directory: str | os.PathLike) -> None:
        """Write ``model/`` (an HF model directory, or ``adapter/`` with LoRA), ``optimizer.pt`` and
        ``backend.json`` into ``directory``."""
        directory = Path(directory)
        if self.peft_model is not None:
            self.peft_model.save_pretrained(directory / "adapter")
        else:
            self.model.save_pretrained(directory / "model", safe_serialization=True)
            tok = getattr(self.engine, "tokenizer", None)
            if tok is not None and hasattr(tok, "save_pretrained"):
                tok.save_pretrained(directory / "model")
        torch.save(self.optimizer.state_dict(), directory / "optimizer.pt")
        (directory / "backend.json").write_text(json.dumps({"updates": self.updates, "bad_steps": self.bad_steps,
                                                            "lora": self.peft_model is not None}))

    def load(self, directory: str | os.PathLike) -> None:
        directory = Path(directory)
        meta_path = directory / "backend.json"
        if not meta_path.is_file():
            raise SkyrlError(f"checkpoint {directory} has no backend.json; it was not written by the local backend")
        meta = json.loads(meta_path.read_text())
        if meta["lora"] != (self.peft_model is not None):
            raise ConfigError(f"checkpoint {directory} was trained {'with' if meta['lora'] else 'without'} LoRA "
                              f"but backend.lora is {'set' if self.peft_model is not None else 'unset'}")
        from safetensors.torch import load_file

        if self.peft_model is not None:
            import peft

            files = list((directory / "adapter").glob("*.safetensors"))
            if not files:
                raise SkyrlError(f"checkpoint {directory}/adapter holds no adapter weights")
            peft.set_peft_model_state_dict(self.peft_model, load_file(str(files[0]), device=str(self.device)))
        else:
            state: dict[str, torch.Tensor] = {}
            files = sorted((directory / "model").glob("*.safetensors"))
            if not files:
                raise SkyrlError(f"checkpoint {directory}/model holds no .safetensors weights")
            for f in files:
                state.update(load_file(str(f), device=str(self.device)))
            result = self.model.load_state_dict(state, strict=False)
            tied = set(getattr(self.model, "_tied_weights_keys", None) or [])
            missing = [k for k in result.missing_keys if k not in tied and not k.endswith("lm_head.weight")]
            if missing or result.unexpected_keys:
                raise SkyrlError(f"checkpoint {directory}/model does not match the model: missing {missing[:5]}, "
                                 f"unexpected {result.unexpected_keys[:5]}")
        self.optimizer.load_state_dict(torch.load(directory / "optimizer.pt", map_location=self.device,
                                                  weights_only=True))
        self.updates = int(meta["updates"])
        self.bad_steps = int(meta["bad_steps"])


def local_backend(config: Any, engine: Any = None) -> LocalBackend:
    """Factory registered as backend ``local``."""
    return LocalBackend(config, engine)

