"""VeRL's own algorithms applied to a skyrl batch: its registered advantage estimators and policy losses.

Nothing here re-implements VeRL's math: :func:`verl_advantages` calls the estimator registered in
``verl.trainer.ppo.core_algos`` (``get_adv_estimator_fn``) and :func:`verl_policy_loss` the registered policy
loss (``get_policy_loss_fn``). What this module adds is the step-wise handling VeRL's estimators do not know
about: a trajectory split by context resets is several rows, and VeRL's GRPO/RLOO would count each row as a
separate sample of the group. The estimator therefore runs on one row per trajectory (its ``is_last_step`` row,
which carries the trajectory's reward) and the resulting scalar advantage is broadcast to every row of that
trajectory, as skyrl's own trainer does.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from skyrl_core.errors import ConfigError

# skyrl backend.advantage -> VeRL algorithm.adv_estimator
ADVANTAGE_ESTIMATORS = {"rloo": "rloo", "grpo": "grpo"}


def verl_estimator_name(advantage: str) -> str:
    """VeRL's ``algorithm.adv_estimator`` for skyrl's ``backend.advantage``; ConfigError for one VeRL lacks."""
    try:
        return ADVANTAGE_ESTIMATORS[advantage]
    except KeyError:
        raise ConfigError(f"backend.advantage '{advantage}' has no VeRL advantage estimator; with backend verl use "
                          f"one of {', '.join(ADVANTAGE_ESTIMATORS)}") from None


def verl_advantages(dp, estimator: str = "rloo", *, norm_adv_by_std_in_grpo: bool = False,
                    epsilon: float = 1e-6) -> tuple[torch.Tensor, torch.Tensor]:
    """Run VeRL's registered advantage estimator ``estimator`` on a DataProto from
    :func:`skyrl_verl.convert.to_dataproto`, one row per trajectory, and broadcast to all rows.

    Returns ``(advantages, per_row)``: ``advantages`` [B, R] (float32) is each row's scalar advantage times its
    ``response_mask``, ``per_row`` [B] the scalar itself (also for loss-masked rows); ``advantages`` is also stored
    as ``dp.batch["advantages"]`` and ``dp.batch["returns"]``. ``norm_adv_by_std_in_grpo`` is passed to GRPO
    (VeRL divides by the unbiased group std, ``torch.std``). Raises ConfigError for an estimator VeRL does not
    register and ValueError when a trajectory has no ``is_last_step`` row.
    """
    from verl.trainer.ppo.core_algos import get_adv_estimator_fn

    try:
        fn = get_adv_estimator_fn(estimator)
    except ValueError as exc:
        raise ConfigError(f"VeRL advantage estimator '{estimator}': {exc}") from None
    nt = dp.non_tensor_batch
    traj = nt["trajectory_id"]
    last = np.asarray(nt["is_last_step"], dtype=bool)
    rows = np.nonzero(last)[0]
    missing = set(traj.tolist()) - set(traj[rows].tolist())
    if missing:
        raise ValueError(f"trajectories without an is_last_step row: {sorted(missing)[:5]}")
    scores = dp.batch["token_level_rewards"][rows]
    # the estimator sees the reward-carrying row with a full mask: its scalar must not depend on loss masking
    # (loss-masked trajectories keep their reward in the group baseline)
    ones = torch.ones_like(scores)
    kwargs: dict[str, Any] = {"token_level_rewards": scores, "response_mask": ones, "index": nt["uid"][rows],
                              "epsilon": epsilon}
    if estimator == "grpo":
        kwargs["norm_adv_by_std_in_grpo"] = norm_adv_by_std_in_grpo
    adv_rows, _ = fn(**kwargs)
    scalar = {traj[r]: float(adv_rows[j, 0]) for j, r in enumerate(rows)}
    per_row = torch.tensor([scalar[t] for t in traj], dtype=torch.float32)
    advantages = per_row[:, None] * dp.batch["response_mask"].to(torch.float32)
    dp.batch["advantages"] = advantages
    dp.batch["returns"] = advantages.clone()
    return advantages, per_row


def actor_config(*, clip: float = 0.2, clip_high: float | None = None, loss_mode: str = "vanilla",
                 loss_agg_mode: str = "token-mean", clip_ratio_c: float = 3.0):
    """A VeRL ``ActorConfig`` (FSDP strategy) holding the policy-loss settings skyrl maps onto VeRL's:
    ``clip`` -> ``clip_ratio``/``clip_ratio_low``, ``clip_high`` -> ``clip_ratio_high``."""
    from verl.workers.config import FSDPActorConfig
    from verl.workers.config.actor import PolicyLossConfig

    return FSDPActorConfig(strategy="fsdp", rollout_n=1, clip_ratio=clip, clip_ratio_low=clip,
                           clip_ratio_high=clip if clip_high is None else clip_high, clip_ratio_c=clip_ratio_c,
                           loss_agg_mode=loss_agg_mode, policy_loss=PolicyLossConfig(loss_mode=loss_mode),
                           use_torch_compile=False, ppo_mini_batch_size=1, ppo_micro_batch_size_per_gpu=1)


def verl_policy_loss(log_prob: torch.Tensor, old_log_prob: torch.Tensor, advantages: torch.Tensor,
                     response_mask: torch.Tensor, config=None, rollout_is_weights: torch.Tensor | None = None
                     ) -> tuple[torch.Tensor, dict]:
    """VeRL's registered policy loss (``config.policy_loss.loss_mode``, default ``vanilla``: PPO clip with
    dual-clip ``clip_ratio_c``) on tensors ``[batch, resp_len]``, aggregated by ``config.loss_agg_mode``.

    Returns the scalar loss (differentiable in ``log_prob``) and VeRL's metrics dict."""
    from verl.trainer.ppo.core_algos import get_policy_loss_fn

    config = config or actor_config()
    fn = get_policy_loss_fn(config.policy_loss.get("loss_mode", "vanilla"))
    return fn(old_log_prob=old_log_prob, log_prob=log_prob, advantages=advantages,
              response_mask=response_mask.to(torch.bool), loss_agg_mode=config.loss_agg_mode, config=config,
              rollout_is_weights=rollout_is_weights)
