"""Token-level policy-gradient losses.

The default objective is the paper's recipe: a token-level policy gradient with PPO-style clipping of the
probability ratio (Schulman et al. 2017, "Proximal Policy Optimization Algorithms", Eq. 7), averaged over all
generated tokens of the mini-batch (token-mean, as in DAPO / Dr. GRPO, Liu et al. 2025: no per-response length
normalisation), no KL and no entropy term. When the mini-batch is the whole batch the trainer's "old" logprobs
are the current ones, the ratio is exactly 1 and the loss is the plain on-policy policy gradient.

Truncated importance sampling (Yao et al. 2025, "Your Efficient RL Framework Secretly Brings You Off-Policy RL
Training", Eq. 3): the sampler (rollout engine) and the trainer compute slightly different probabilities for the
same tokens; each token's loss is weighted by ``min(pi_old(y) / pi_rollout(y), C)`` (detached) with cap ``C``.
"""

from __future__ import annotations

import math

import torch


def masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of ``values`` over positions where ``mask`` is 1 (0.0 when the mask is empty). Shapes broadcast."""
    mask = mask.to(values.dtype)
    return (values * mask).sum() / mask.sum().clamp(min=1.0)


def policy_loss(logprobs: torch.Tensor, old_logprobs: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor,
                clip_low: float = 0.2, clip_high: float | None = None, tis_cap: float | None = None,
                rollout_logprobs: torch.Tensor | None = None) -> tuple[torch.Tensor, dict]:
    """PPO-clipped token-level policy-gradient loss, token-mean over ``mask``.

    All tensors are ``[batch, resp_len]``: ``logprobs`` (with grad) of the response tokens under the policy being
    trained; ``old_logprobs`` under the policy that the batch is attributed to (the trainer's logprobs before this
    step's first update); ``advantages`` broadcast per token; ``mask`` 1 for tokens that enter the loss.
    ``clip_low``/``clip_high`` bound the ratio to ``[1 - clip_low, 1 + clip_high]`` (``clip_high`` defaults to
    ``clip_low``; a larger one is DAPO's "clip-higher"). ``tis_cap`` with ``rollout_logprobs`` enables truncated
    importance sampling. Returns the scalar loss and detached float metrics: ``clip_fraction``,
    ``ratio_mean``, ``ratio_max``, ``tis_weight_mean``, and where ``rollout_logprobs`` is given the two estimates
    of KL(sampler || trainer) of :func:`sampler_kl_metrics`.

    Raises ValueError when the shapes differ or ``tis_cap`` is set without ``rollout_logprobs``.
    """
    shape = logprobs.shape
    for name, t in (("old_logprobs", old_logprobs), ("advantages", advantages), ("mask", mask)):
        if t.shape != shape:
            raise ValueError(f"policy_loss: {name} has shape {tuple(t.shape)}, logprobs {tuple(shape)}")
    if tis_cap is not None and rollout_logprobs is None:
        raise ValueError("policy_loss: tis_cap needs rollout_logprobs (the engine gave no logprobs)")
    clip_high = clip_low if clip_high is None else clip_high
    mask = mask.to(logprobs.dtype)
    log_ratio = logprobs - old_logprobs.detach()
    ratio = torch.exp(log_ratio)
    adv = advantages.to(logprobs.dtype)
    unclipped = ratio * adv
    clipped = torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high) * adv
    per_token = -torch.minimum(unclipped, clipped)
    metrics: dict[str, float] = {}
    if rollout_logprobs is not None:
        if rollout_logprobs.shape != shape:
            raise ValueError(f"policy_loss: rollout_logprobs has shape {tuple(rollout_logprobs.shape)}, "
                             f"logprobs {tuple(shape)}")
        diff = (old_logprobs.detach() - rollout_logprobs).to(logprobs.dtype)
        metrics.update(sampler_kl_metrics(old_logprobs.detach(), rollout_logprobs.to(logprobs.dtype), mask))
        if tis_cap is not None:
            raw = torch.exp(diff).detach()
            weight = raw.clamp(max=tis_cap)
            per_token = per_token * weight
            metrics["tis_weight_mean"] = float(masked_mean(weight, mask))
            metrics.update(importance_weight_metrics(raw, tis_cap, mask))
    loss = masked_mean(per_token, mask)
    with torch.no_grad():
        was_clipped = ((unclipped - clipped).abs() > 0).to(logprobs.dtype)
        metrics["clip_fraction"] = float(masked_mean(was_clipped, mask))
        metrics["ratio_mean"] = float(masked_mean(ratio, mask))
        metrics["ratio_max"] = float((ratio * mask).max()) if mask.any() else 1.0
    return loss, metrics


def ppo_clip_loss(logprobs: torch.Tensor, old_logprobs: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor,
                  config, rollout_logprobs: torch.Tensor | None = None) -> tuple[torch.Tensor, dict]:
    """Policy loss ``ppo_clip`` (the default, the paper's recipe): :func:`policy_loss` with ``config.clip``,
    ``config.clip_high`` and ``config.tis_cap`` of a BackendConfig."""
    return policy_loss(logprobs, old_logprobs, advantages, mask, clip_low=config.clip, clip_high=config.clip_high,
                       tis_cap=config.tis_cap, rollout_logprobs=rollout_logprobs)


def reinforce_loss(logprobs: torch.Tensor, old_logprobs: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor,
                   config, rollout_logprobs: torch.Tensor | None = None) -> tuple[torch.Tensor, dict]:
    """Policy loss ``reinforce``: the unclipped importance-weighted policy gradient ``-A * exp(lp - old)``,
    token-mean over ``mask`` (Williams 1992; with RLOO advantages the estimator of Ahmadian et al. 2024). On
    policy (one mini-batch) it equals ``ppo_clip``; with several mini-batches nothing bounds the update."""
    return policy_loss(logprobs, old_logprobs, advantages, mask, clip_low=float("inf"), clip_high=float("inf"),
                       tis_cap=config.tis_cap, rollout_logprobs=rollout_logprobs)


def gspo_loss(logprobs: torch.Tensor, old_logprobs: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor,
              config, rollout_logprobs: torch.Tensor | None = None) -> tuple[torch.Tensor, dict]:
    """Policy loss ``gspo``: sequence-level clipping (Zheng et al. 2025, "Group Sequence Policy Optimization",
    Eq. 5-7). Each row (one datum) gets one ratio, the geometric mean of its tokens' ratios,
    ``s_i = exp(mean_t (lp - old))`` over its ``mask`` tokens, clipped to ``[1 - clip, 1 + clip_high]``; the
    loss is ``-mean_i min(s_i A_i, clip(s_i) A_i)`` over rows with at least one loss token, where ``A_i`` is
    the row's advantage. GSPO's paper uses far smaller clip ranges than token-level PPO (3e-4 / 4e-4): set
    ``backend.clip`` accordingly. Tensors ``[rows, resp_len]``; metrics ``clip_fraction`` (of sequences),
    ``ratio_mean``, ``ratio_max`` (sequence ratios) and the sampler KL estimates."""
    shape = logprobs.shape
    for name, t in (("old_logprobs", old_logprobs), ("advantages", advantages), ("mask", mask)):
        if t.shape != shape:
            raise ValueError(f"gspo_loss: {name} has shape {tuple(t.shape)}, logprobs {tuple(shape)}")
    clip_low = config.clip
    clip_high = config.clip if config.clip_high is None else config.clip_high
    mask = mask.to(logprobs.dtype)
    lengths = mask.sum(-1)
    rows = lengths > 0
    per_row_log_ratio = ((logprobs - old_logprobs.detach()) * mask).sum(-1) / lengths.clamp(min=1.0)
    ratio = torch.exp(per_row_log_ratio)
    adv = (advantages.to(logprobs.dtype) * mask).sum(-1) / lengths.clamp(min=1.0)
    unclipped = ratio * adv
    clipped = torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high) * adv
    per_row = -torch.minimum(unclipped, clipped)
    n_rows = rows.to(logprobs.dtype).sum().clamp(min=1.0)
    loss = (per_row * rows).sum() / n_rows
    metrics: dict[str, float] = {}
    with torch.no_grad():
        metrics["clip_fraction"] = float((((unclipped - clipped).abs() > 0) & rows).sum() / n_rows)
        metrics["ratio_mean"] = float((ratio * rows).sum() / n_rows)
        metrics["ratio_max"] = float(ratio[rows].max()) if rows.any() else 1.0
    if rollout_logprobs is not None:
        metrics.update(sampler_kl_metrics(old_logprobs.detach(), rollout_logprobs.to(logprobs.dtype), mask))
    return loss, metrics


#: the importance-weight histogram's bins, ``(low, high]`` bounds of pi_proximal / pi_behaviour
IS_WEIGHT_BINS = ((0.0, 0.5), (0.5, 0.9), (0.9, 1.1), (1.1, 2.0), (2.0, math.inf))


def importance_weight_metrics(raw: torch.Tensor, cap: float, mask: torch.Tensor) -> dict[str, float]:
    """The distribution of the untruncated importance weights ``raw`` = pi_proximal / pi_behaviour per token
    (``[batch, resp_len]``, over ``mask``): ``is_weight_max``, ``is_capped_fraction`` (tokens whose weight the cap
    ``cap`` truncated) and ``is_weight_bin/<low>-<high>`` (token fractions in each of :data:`IS_WEIGHT_BINS`, which
    add up to 1). Means over micro-batches are token-weighted by the trainer, so the fractions stay exact."""
    with torch.no_grad():
        out = {"is_weight_max": float((raw * mask).max()) if mask.any() else 1.0,
               "is_capped_fraction": float(masked_mean((raw > cap).to(mask.dtype), mask))}
        for low, high in IS_WEIGHT_BINS:
            inside = ((raw > low) & (raw <= high)).to(mask.dtype)
            out[f"is_weight_bin/{low:g}-{high:g}"] = float(masked_mean(inside, mask))
    return out


#: the truncation cap of ``decoupled_ppo`` when ``backend.tis_cap`` is unset
DECOUPLED_IS_CAP = 2.0


def decoupled_ppo_loss(logprobs: torch.Tensor, old_logprobs: torch.Tensor, advantages: torch.Tensor,
                       mask: torch.Tensor, config, rollout_logprobs: torch.Tensor | None = None
                       ) -> tuple[torch.Tensor, dict]:
    """Policy loss ``decoupled_ppo``: decoupled PPO (Fu et al. 2025, "AReaL", Eq. 5) for data generated by an
    older policy. The behaviour policy (the one that sampled the tokens, whose logprobs the engine recorded:
    ``rollout_logprobs``) is kept apart from the proximal policy (``old_logprobs``: the trainer's policy before
    this step's first update, the trust region's centre). Per token:
    ``-min(pi_prox / pi_behav, C) * min(r A, clip(r, 1 - clip, 1 + clip_high) A)`` with ``r = pi / pi_prox``,
    token-mean over ``mask``; ``C`` is ``backend.tis_cap`` (default :data:`DECOUPLED_IS_CAP`). On-policy data
    (behaviour = proximal) make it exactly ``ppo_clip``. Tensors ``[batch, resp_len]``. Metrics: those of
    :func:`policy_loss` plus :func:`importance_weight_metrics`. Raises ValueError without rollout logprobs
    (an engine that returned none: the behaviour policy is then unknown)."""
    if rollout_logprobs is None:
        raise ValueError("policy loss 'decoupled_ppo' needs the rollout logprobs (the behaviour policy), but the "
                         "batch has none: use an engine that returns logprobs (sampling.logprobs) or ppo_clip")
    cap = config.tis_cap if config.tis_cap is not None else DECOUPLED_IS_CAP
    return policy_loss(logprobs, old_logprobs, advantages, mask, clip_low=config.clip, clip_high=config.clip_high,
                       tis_cap=cap, rollout_logprobs=rollout_logprobs)


POLICY_LOSSES = {"ppo_clip": ppo_clip_loss, "gspo": gspo_loss, "reinforce": reinforce_loss,
                 "decoupled_ppo": decoupled_ppo_loss}


def kl_estimates(sample_logprobs: torch.Tensor, other_logprobs: torch.Tensor,
                 mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Token-mean estimates of KL(q || p) from tokens sampled from q (Schulman 2020, "Approximating KL
    Divergence"): with ``log r = log p(x) - log q(x)``, ``k1 = -log r`` (unbiased, can be negative on a
    sample) and ``k3 = (r - 1) - log r`` (unbiased, never negative, lower variance when p is close to q).
    ``sample_logprobs`` are log q of the sampled tokens, ``other_logprobs`` log p; tensors ``[batch, resp_len]``,
    mean over ``mask``. Returns (k1, k3) as 0-d tensors in nats per token."""
    log_r = other_logprobs - sample_logprobs
    return masked_mean(-log_r, mask), masked_mean(torch.exp(log_r) - 1.0 - log_r, mask)


def sampler_kl_metrics(trainer_logprobs: torch.Tensor, rollout_logprobs: torch.Tensor,
                       mask: torch.Tensor) -> dict[str, float]:
    """How far the trainer's probabilities are from the sampler's (the rollout engine's) on the rollout tokens:
    ``kl_sampler_trainer_k1`` and ``kl_sampler_trainer_k3``, estimates of KL(sampler || trainer) in nats per
    token (the tokens were drawn by the sampler, so the sampler is the first argument). Both are 0 when the
    two agree; k1 = mean(rollout - trainer) logprob; k3 = mean(exp(trainer - rollout) - 1 - (trainer -
    rollout)). See :func:`kl_estimates`."""
    with torch.no_grad():
        k1, k3 = kl_estimates(rollout_logprobs, trainer_logprobs, mask)
    return {"kl_sampler_trainer_k1": float(k1), "kl_sampler_trainer_k3": float(k3)}


def kl_penalty(logprobs: torch.Tensor, ref_logprobs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Token-mean of the non-negative "k3" estimator of KL(pi || pi_ref) (Schulman 2020, "Approximating KL
    Divergence"): ``exp(ref - lp) - (ref - lp) - 1``, with gradient through ``logprobs`` (the tokens were
    sampled from the policy). Tensors ``[batch, resp_len]``; the trainer logs it as ``kl_policy_ref_k3``."""
    return kl_estimates(logprobs, ref_logprobs.detach(), mask)[1]


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Per-position entropy in nats of the categorical given by ``logits`` [..., vocab] -> [...]."""
    logp = torch.log_softmax(logits.float(), dim=-1)
    return -(logp.exp() * logp).sum(-1)
