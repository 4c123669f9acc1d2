"""The built-in advantage estimators: trajectory-level advantages from group rewards.

A *group* is the ``n_samples`` rollouts of one instance (same ``group_id``). Every method returns one scalar per
trajectory; the local trainer broadcasts it over the trajectory's generated tokens.

- ``rloo`` (default, the SkyRL-Agent recipe): leave-one-out baseline, REINFORCE Leave-One-Out
  (Ahmadian et al. 2024, "Back to Basics: Revisiting REINFORCE Style Optimization for Learning from Human
  Feedback in LLMs", Eq. 4 of Kool et al. 2019 as used there): ``A_i = r_i - mean_{j != i} r_j``.
  Equivalently ``A_i = k / (k - 1) * (r_i - mean_j r_j)`` for a group of ``k``.
- ``grpo``: mean-centred group reward (Shao et al. 2024, DeepSeekMath, GRPO outcome supervision),
  ``A_i = r_i - mean_j r_j``, optionally divided by the group's standard deviation (``std_normalize``).
  Dr. GRPO (Liu et al. 2025, "Understanding R1-Zero-Like Training: A Critical Perspective", Sec. 3) shows the
  std division and per-response length normalisation bias the optimisation; both are off by default here.
- ``none``: the raw reward.

Masked trajectories (ended by an external limit or an infrastructure error) keep their reward in the group
baseline, as in the paper; their own advantage is still returned, and the loss mask excludes them from the loss.

The trainer plugin registers the three as advantage estimators (hook ``register_advantage_estimators``) under
their names; ``backend.advantage`` names the one a run uses (the core's
:func:`skyrl_core.postprocess.build_training_batch` takes it from the registry), so a plugin can add another (e.g.
a baseline from a value model, or per-task normalisation) or replace a built-in by hook order. An estimator is a
callable ``(rewards [n], group_ids [n], std_normalize: bool) -> advantages [n]`` (floats), see :class:`Estimator`.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Sequence

from skyrl_core.errors import ConfigError

METHODS = ("rloo", "grpo", "none")


def compute_advantages(rewards: Sequence[float], group_ids: Sequence[str], method: str = "rloo",
                       std_normalize: bool = False, masked: Sequence[bool] | None = None,
                       eps: float = 1e-6) -> list[float]:
    """One advantage per trajectory, computed within groups of equal ``group_id``.

    ``rewards`` [n] and ``group_ids`` [n] are aligned; ``masked`` [n] marks loss-masked trajectories, which
    still count in their group's baseline (so the argument does not change the numbers; it is validated and
    kept for callers that want to state it). A group of one has no baseline: its ``rloo``/``grpo``
    advantage is 0. ``std_normalize`` divides by the group's population standard deviation plus ``eps``
    (a group with equal rewards has advantage 0 either way).

    Raises ConfigError for an unknown ``method`` and ValueError for misaligned inputs or a non-finite reward.
    """
    if method not in METHODS:
        raise ConfigError(f"backend.advantage '{method}' is not one of {', '.join(METHODS)}")
    n = len(rewards)
    if len(group_ids) != n or (masked is not None and len(masked) != n):
        raise ValueError(f"rewards ({n}), group_ids ({len(group_ids)}) and masked "
                         f"({'-' if masked is None else len(masked)}) must have the same length")
    for i, r in enumerate(rewards):
        if not math.isfinite(float(r)):
            raise ValueError(f"reward of trajectory {i} (group {group_ids[i]!r}) is not finite: {r}")
    if method == "none":
        return [float(r) for r in rewards]

    members: dict[str, list[int]] = defaultdict(list)
    for i, g in enumerate(group_ids):
        members[g].append(i)
    out = [0.0] * n
    for idx in members.values():
        k = len(idx)
        if k < 2:
            continue  # no baseline from a single sample: no learning signal
        rs = [float(rewards[i]) for i in idx]
        total = sum(rs)
        mean = total / k
        std = math.sqrt(sum((r - mean) ** 2 for r in rs) / k)
        for i, r in zip(idx, rs):
            if method == "rloo":
                adv = r - (total - r) / (k - 1)
            else:
                adv = r - mean
            if std_normalize:
                adv = adv / (std + eps)
            # exact zero for equal rewards, so zero-advantage groups are detected without float noise
            out[i] = 0.0 if std == 0.0 else adv
    return out


class Estimator:
    """A built-in advantage estimator as a registrable callable: ``Estimator("rloo")(rewards, group_ids,
    std_normalize=False) -> list[float]`` is :func:`compute_advantages` with that method."""

    def __init__(self, method: str) -> None:
        if method not in METHODS:
            raise ConfigError(f"no built-in advantage estimator '{method}'; built-ins: {', '.join(METHODS)}")
        self.name = method

    def __call__(self, rewards: Sequence[float], group_ids: Sequence[str], std_normalize: bool = False) -> list[float]:
        return compute_advantages(rewards, group_ids, method=self.name, std_normalize=std_normalize)

    def __repr__(self) -> str:
        return f"Estimator({self.name!r})"
