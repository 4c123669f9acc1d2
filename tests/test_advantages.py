"""Advantages against hand-computed numbers (RLOO: Ahmadian et al. 2024; GRPO / Dr. GRPO: Liu et al. 2025)."""

from __future__ import annotations

import math

import pytest

from skyrl_core.default_plugins.trainer.advantages import compute_advantages
from skyrl_core.errors import ConfigError


def test_rloo_hand_computed():
    # group a: rewards 1, 0, 0, 1 -> baseline for sample 0 is mean(0, 0, 1) = 1/3 -> 2/3
    rewards = [1, 0, 0, 1, 0.5, 1.0]
    groups = ["a", "a", "a", "a", "b", "b"]
    adv = compute_advantages(rewards, groups, "rloo")
    expected = [1 - 1 / 3, 0 - 2 / 3, 0 - 2 / 3, 1 - 1 / 3, 0.5 - 1.0, 1.0 - 0.5]
    assert adv == pytest.approx(expected)
    # RLOO = k/(k-1) x mean-centred
    grpo = compute_advantages(rewards, groups, "grpo")
    assert adv[:4] == pytest.approx([4 / 3 * g for g in grpo[:4]])


def test_grpo_mean_centred_and_std_normalised():
    rewards = [1.0, 0.0, 0.0, 0.0]
    groups = ["g"] * 4
    assert compute_advantages(rewards, groups, "grpo") == pytest.approx([0.75, -0.25, -0.25, -0.25])
    std = math.sqrt((0.75 ** 2 + 3 * 0.25 ** 2) / 4)  # population std = 0.4330
    normed = compute_advantages(rewards, groups, "grpo", std_normalize=True, eps=0.0)
    assert normed == pytest.approx([0.75 / std, -0.25 / std, -0.25 / std, -0.25 / std])
    assert normed[0] == pytest.approx(1.7320508)


def test_none_returns_rewards_and_equal_groups_are_zero():
    assert compute_advantages([0.2, 3.0], ["a", "b"], "none") == [0.2, 3.0]
    adv = compute_advantages([1, 1, 1, 0, 1], ["a", "a", "a", "b", "b"], "rloo", std_normalize=True)
    assert adv[:3] == [0.0, 0.0, 0.0]
    assert adv[3:] == pytest.approx([-1 / (0.5 + 1e-6), 1 / (0.5 + 1e-6)])


def test_singleton_group_has_no_baseline():
    assert compute_advantages([1.0], ["solo"], "rloo") == [0.0]
    assert compute_advantages([1.0], ["solo"], "grpo") == [0.0]


def test_masked_trajectories_stay_in_the_baseline():
    # sample 2 hit max_turns (masked) with reward 0: the others' baseline still counts it
    rewards = [1.0, 1.0, 0.0]
    plain = compute_advantages(rewards, ["g"] * 3, "rloo")
    masked = compute_advantages(rewards, ["g"] * 3, "rloo", masked=[False, False, True])
    assert masked == plain == pytest.approx([0.5, 0.5, -1.0])


def test_bad_input_is_named():
    with pytest.raises(ConfigError, match="backend.advantage 'ppo'"):
        compute_advantages([1.0], ["a"], "ppo")
    with pytest.raises(ValueError, match="same length"):
        compute_advantages([1.0, 0.0], ["a"])
    with pytest.raises(ValueError, match="group 'a'.*not finite"):
        compute_advantages([float("nan")], ["a"])
