"""The ``verl`` training backend: VeRL's algorithms on skyrl's training loop.

``skyrl train CONFIG backend=verl`` keeps everything upstream unchanged (tasks, agent loop, tools, runtimes,
verifiers, the dispatcher) and hands each step's TrainingBatch to :class:`VerlBackend`, which

1. converts it to a VeRL ``DataProto`` (:func:`skyrl_verl.convert.to_dataproto`),
2. recomputes the advantages with VeRL's registered estimator (``algorithm.adv_estimator``, one row per
   trajectory, broadcast over context-reset rows: :func:`skyrl_verl.algorithms.verl_advantages`),
3. updates the policy with VeRL's registered policy loss (``actor.policy_loss.loss_mode``, aggregated by VeRL's
   ``agg_loss`` over the mini-batch's tokens), VeRL's truncated importance-sampling weights
   (``compute_rollout_correction_weights``) when ``backend.tis_cap`` is set, and VeRL's KL / entropy terms.

The optimiser, micro-batching, weight sharing with the hf engine and checkpoints are the local trainer's
(:class:`skyrl_core.default_plugins.trainer.local.LocalBackend`), so on one machine a run switches between ``local`` and
``verl`` with one config word. Multi-GPU training with VeRL's own workers (FSDP/Megatron, vLLM/SGLang servers)
is :mod:`skyrl_verl.launcher` (``skyrl verl launch``).
"""

from __future__ import annotations

import logging
from typing import Any, Sequence

import attrs
import torch

from skyrl_core.default_plugins.trainer.local import LocalBackend
from skyrl_core.errors import ConfigError
from skyrl_core.transitions import Datum, TrainingBatch

from .algorithms import actor_config, verl_advantages, verl_estimator_name, verl_policy_loss

log = logging.getLogger(__name__)


def check_backend_config(bc: Any) -> None:
    """Raise ConfigError naming the ``backend.*`` key a VeRL run cannot honour."""
    verl_estimator_name(bc.advantage)
    if bc.std_normalize and bc.advantage != "grpo":
        raise ConfigError(f"backend.std_normalize is only supported with backend.advantage grpo under backend verl "
                          f"(VeRL's '{bc.advantage}' estimator has no std normalisation)")
    if bc.tis_cap is not None and bc.tis_cap <= 0:
        raise ConfigError(f"backend.tis_cap must be positive (VeRL's rollout_is_threshold), got {bc.tis_cap}")
    loss_mode = bc.options.get("loss_mode", "vanilla")
    from verl.trainer.ppo.core_algos import POLICY_LOSS_REGISTRY

    if loss_mode not in POLICY_LOSS_REGISTRY:
        raise ConfigError(f"backend.options.loss_mode '{loss_mode}' is not a VeRL policy loss; registered: "
                          f"{', '.join(sorted(POLICY_LOSS_REGISTRY))}")
    agg = bc.options.get("loss_agg_mode", "token-mean")
    valid = ("token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm")
    if agg not in valid:
        raise ConfigError(f"backend.options.loss_agg_mode '{agg}' is not one of {', '.join(valid)}")
    unknown = set(bc.options) - {"loss_mode", "loss_agg_mode", "clip_ratio_c", "verl_overrides"}
    if unknown:
        raise ConfigError(f"backend.options.{sorted(unknown)[0]} is not understood by backend verl; valid options: "
                          f"loss_mode, loss_agg_mode, clip_ratio_c, verl_overrides")


class VerlBackend(LocalBackend):
    """Backend ``verl``: the local trainer's model, optimiser and checkpoints with VeRL's advantage estimator,
    policy loss, rollout correction and KL/entropy terms. Built ``VerlBackend(config, engine)``.

    Raises ConfigError (naming the key) for settings VeRL cannot honour: ``backend.advantage none``,
    ``backend.std_normalize`` with rloo, an unknown ``backend.options.loss_mode``/``loss_agg_mode``.
    """

    name = "verl"

    def __init__(self, config: Any, engine: Any = None) -> None:
        check_backend_config(config.backend)
        super().__init__(config, engine)
        bc = config.backend
        self.estimator = verl_estimator_name(bc.advantage)
        self.actor_cfg = actor_config(clip=bc.clip, clip_high=bc.clip_high,
                                      loss_mode=bc.options.get("loss_mode", "vanilla"),
                                      loss_agg_mode=bc.options.get("loss_agg_mode", "token-mean"),
                                      clip_ratio_c=float(bc.options.get("clip_ratio_c", 3.0)))

    def verl_batch(self, batch: TrainingBatch) -> TrainingBatch:
        """The batch with each datum's advantage replaced by VeRL's estimator's (``backend.advantage``)."""
        from .convert import to_dataproto

        if not batch.data:
            return batch
        dp = to_dataproto(batch, pad_token_id=self.pad_id)
        _, per_row = verl_advantages(dp, self.estimator, norm_adv_by_std_in_grpo=self.bc.std_normalize)
        data = [attrs.evolve(d, advantage=float(a)) for d, a in zip(batch.data, per_row.tolist())]
        return TrainingBatch(data=data, metrics=dict(batch.metrics))

    def train_step_sync(self, batch: TrainingBatch) -> dict[str, float]:
        return super().train_step_sync(self.verl_batch(batch))

    def begin_mini_batch(self, mini: Sequence[Datum], n_tokens: int) -> None:
        """VeRL's ``agg_loss`` takes the mini-batch's token and sequence counts as its global batch info, so
        micro-batch losses add up to the mini-batch loss without re-weighting."""
        cfg = self.actor_cfg
        cfg.global_batch_info.update(dp_size=1, batch_num_tokens=max(n_tokens, 1), global_batch_size=len(mini),
                                     loss_scale_factor=cfg.loss_scale_factor)

    def micro_batch_loss(self, lp: torch.Tensor, old: torch.Tensor, logits: torch.Tensor, mb: dict,
                         n_tokens: int) -> tuple[torch.Tensor, dict[str, float]]:
        """VeRL's policy loss, truncated importance sampling and low-variance KL on one micro-batch."""
        from verl.trainer.ppo.core_algos import agg_loss, kl_penalty
        from verl.trainer.ppo.rollout_corr_helper import compute_rollout_correction_weights

        bc = self.bc
        cfg = self.actor_cfg
        mask = mb["loss_tokens"]
        # metrics are summed by the caller weighted by this micro-batch's token share; VeRL's terms are already
        # scaled to the mini-batch, so undo that scale for the reported values
        unscale = n_tokens / max(float(mask.sum()), 1.0)
        m: dict[str, float] = {}
        weights = None
        if bc.tis_cap is not None and "rollout_logprobs" in mb:
            weights, _ = compute_rollout_correction_weights(old - mb["rollout_logprobs"], mask,
                                                            rollout_is="token", rollout_is_threshold=bc.tis_cap)
            m["tis_weight_mean"] = float((weights * mask).sum() / mask.sum().clamp(min=1.0))
        loss, vm = verl_policy_loss(lp, old, mb["advantages"], mask, cfg, rollout_is_weights=weights)
        m["clip_fraction"] = float(vm.get("actor/pg_clipfrac", 0.0))
        m["ppo_kl"] = float(vm.get("actor/ppo_kl", 0.0))
        if bc.kl_coef > 0:
            kld = kl_penalty(lp, self._ref_logprobs(mb), "low_var_kl")
            kl = agg_loss(kld, mask, cfg.loss_agg_mode, **cfg.global_batch_info)
            loss = loss + bc.kl_coef * kl
            m["kl_policy_ref_k3"] = float(kl.detach()) * unscale  # low_var_kl: k3, clamped
        if bc.entropy_coef > 0:
            from skyrl_core.default_plugins.trainer.losses import entropy_from_logits

            ent = agg_loss(entropy_from_logits(logits), mask, cfg.loss_agg_mode, **cfg.global_batch_info)
            loss = loss - bc.entropy_coef * ent
            m["entropy"] = float(ent.detach()) * unscale
        return loss, m

