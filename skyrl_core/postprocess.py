"""Post-processing: recorded transitions -> the backend-agnostic :class:`~skyrl_core.transitions.TrainingBatch`.

Packing (SkyRL-Agent, arXiv 2511.16108, Sec. 3.3): a multi-turn trajectory makes one LLM call per turn, and each
call's input usually is the previous call's input + output + the new observation tokens. Such a call is packed
into the same datum: the observation tokens join the response with ``response_mask`` 0 (the model did not
generate them) and the new output tokens with mask 1. A call whose input does not extend the previous one — a
context reset by a summarise or MemAgent "next" tool (``Transition.new_context``), or a re-tokenised history —
starts a new datum. One datum per trajectory instead of one per call processes each shared prefix once; the
saving is reported as ``packing_saving`` (1 - packed tokens / one-datum-per-call tokens).

Every datum carries its trajectory's reward and advantage; ``is_last_step`` marks a trajectory's final datum.
"""

from __future__ import annotations

import math
from typing import Sequence

from .plugins import get_registry
from .transitions import ERROR_EVAL, Datum, Trajectory, TrainingBatch, Transition


def pack_transitions(transitions: Sequence[Transition]) -> list[dict]:
    """Pack one trajectory's transitions into sequences.

    Returns a list of dicts with ``prompt_ids`` [prompt_len], ``response_ids`` [resp_len], ``response_mask``
    [resp_len] (1 = generated), ``rollout_logprobs`` [resp_len] or None (None if any packed call lacks them;
    0.0 at mask-0 positions) and ``num_calls``. Empty-output calls still count as calls.
    """
    seqs: list[dict] = []
    cur: dict | None = None
    for t in transitions:
        extends = (cur is not None and not t.new_context
                   and len(t.input_ids) >= cur["_len"]
                   and t.input_ids[: cur["_len"]] == cur["prompt_ids"] + cur["response_ids"])
        if extends:
            observation = t.input_ids[cur["_len"]:]
            cur["response_ids"] += observation + list(t.output_ids)
            cur["response_mask"] += [0] * len(observation) + [1] * len(t.output_ids)
            if cur["rollout_logprobs"] is not None and t.output_logprobs is not None:
                cur["rollout_logprobs"] += [0.0] * len(observation) + list(t.output_logprobs)
            else:
                cur["rollout_logprobs"] = None
            cur["num_calls"] += 1
        else:
            cur = {
                "prompt_ids": list(t.input_ids),
                "response_ids": list(t.output_ids),
                "response_mask": [1] * len(t.output_ids),
                "rollout_logprobs": None if t.output_logprobs is None else list(t.output_logprobs),
                "num_calls": 1,
            }
            seqs.append(cur)
        cur["_len"] = len(cur["prompt_ids"]) + len(cur["response_ids"])
    for s in seqs:
        del s["_len"]
    return seqs


def guard_reward(trajectory: Trajectory) -> bool:
    """Fail a trajectory whose reward is not a finite number (``error_eval``, reward 0, loss-masked) so that
    one bad reward costs one trajectory, not the step: the advantages of its group would be NaN. The rollout
    session already checks its verifiers' rewards; this catches rewards set on any other path (a custom
    rollout, a backend bridge). Returns True when the trajectory was failed here."""
    try:
        value = float(trajectory.reward)
        finite = math.isfinite(value) and not isinstance(trajectory.reward, bool)
    except (TypeError, ValueError):
        finite = False
    if finite:
        return False
    trajectory.fail(ERROR_EVAL, f"reward {trajectory.reward!r} is not a finite number")
    trajectory.reward = 0.0
    return True


def estimate(estimator, rewards: Sequence[float], group_ids: Sequence[str], std_normalize: bool = False,
             name: str = "advantage estimator") -> list[float]:
    """Call a registered advantage estimator and check its answer: one finite float per reward. Raises ValueError
    naming the estimator otherwise (a plugin's bug must not become a silent NaN in the loss)."""
    out = [float(a) for a in estimator(list(rewards), list(group_ids), std_normalize)]
    if len(out) != len(rewards):
        raise ValueError(f"advantage estimator '{name}' returned {len(out)} advantages for {len(rewards)} rewards")
    bad = [i for i, a in enumerate(out) if not math.isfinite(a)]
    if bad:
        raise ValueError(f"advantage estimator '{name}' returned a non-finite advantage for trajectory {bad[0]} "
                         f"(group {group_ids[bad[0]]!r})")
    return out


def build_training_batch(trajectories: Sequence[Trajectory], advantage: str = "rloo", std_normalize: bool = False,
                         skip_zero_advantage: bool = True) -> TrainingBatch:
    """Turn a step's trajectories into a TrainingBatch (packing, masks, advantages).

    ``advantage`` names an advantage estimator registered through ``register_advantage_estimators``: the trainer
    plugin's ``rloo``, ``grpo``, ``none`` or a plugin's (UnknownComponentError lists the registered ones).

    Advantages come from that estimator (checked by :func:`estimate`) over the trajectories that yield data
    (masked ones keep their reward in the group baseline); a trajectory whose reward is not finite is first
    failed (:func:`guard_reward`). **Baseline rule:** a trajectory without transitions (failed before its
    first LLM call: a runtime that did not start) yields no datum and is left out of its group's baseline —
    the policy generated nothing, so its reward 0 says nothing about it. Every backend sees the same rule,
    because a bridge that recomputes advantages from the data (VeRL) only sees trajectories with a datum.
    Masked trajectories yield data with ``loss_mask`` 0. With ``skip_zero_advantage`` the data of groups
    whose advantages are all exactly 0 (under rloo/grpo: equal rewards) are left out (their gradient is zero;
    computing it only costs time); they are counted in ``zero_advantage_groups``.

    Metrics (all floats): ``trajectories``, ``groups``, ``masked_trajectories``, ``failed_trajectories`` (with
    an error), ``trajectories_without_data`` (out of the baselines), ``zero_advantage_groups``, ``data``,
    ``calls``, ``tokens_packed`` and ``tokens_unpacked`` (prompt + response tokens, of the kept data),
    ``packing_saving`` (0..1), ``response_tokens``, ``generated_tokens``, ``reward_mean``,
    ``advantage_abs_mean``.
    """
    trajectories = list(trajectories)
    for traj in trajectories:
        guard_reward(traj)
    rewards = [float(t.reward) for t in trajectories]
    groups = [t.group_id for t in trajectories]
    # the baseline rule every backend shares: a trajectory without a datum is not in its group's baseline
    scored = [i for i, t in enumerate(trajectories) if t.transitions]
    scored_groups = [groups[i] for i in scored]
    scored_advs = estimate(get_registry().get("advantage_estimators", advantage), [rewards[i] for i in scored],
                           scored_groups, std_normalize, name=advantage)
    advs = [0.0] * len(trajectories)
    for i, adv in zip(scored, scored_advs):
        advs[i] = adv
    # a group whose advantages are all exactly 0 has no gradient (equal rewards under rloo/grpo)
    nonzero = {g for g, a in zip(scored_groups, scored_advs) if a != 0.0}
    zero = set(scored_groups) - nonzero
    data: list[Datum] = []
    calls = packed = unpacked = generated = 0
    for traj, adv in zip(trajectories, advs):
        if skip_zero_advantage and traj.group_id in zero:
            continue
        seqs = pack_transitions(traj.transitions)
        versions = [t.policy_version for t in traj.transitions if t.policy_version is not None]
        calls += len(traj.transitions)
        unpacked += sum(len(t.input_ids) + len(t.output_ids) for t in traj.transitions)
        for i, s in enumerate(seqs):
            packed += len(s["prompt_ids"]) + len(s["response_ids"])
            generated += sum(s["response_mask"])
            data.append(Datum(
                prompt_ids=s["prompt_ids"], response_ids=s["response_ids"], response_mask=s["response_mask"],
                rollout_logprobs=s["rollout_logprobs"], reward=float(traj.reward), advantage=float(adv),
                trajectory_id=traj.id, group_id=traj.group_id, is_last_step=i == len(seqs) - 1,
                loss_mask=0 if traj.masked else 1, num_calls=s["num_calls"],
                policy_version=min(versions) if versions else None,
            ))
    n = len(trajectories)
    metrics = {
        "trajectories": float(n),
        "groups": float(len(set(groups))),
        "masked_trajectories": float(sum(t.masked for t in trajectories)),
        "failed_trajectories": float(sum(t.error is not None for t in trajectories)),
        "trajectories_without_data": float(len(trajectories) - len(scored)),
        "zero_advantage_groups": float(len(zero)),
        "data": float(len(data)),
        "calls": float(calls),
        "tokens_packed": float(packed),
        "tokens_unpacked": float(unpacked),
        "packing_saving": 1.0 - packed / unpacked if unpacked else 0.0,
        "response_tokens": float(sum(len(d.response_ids) for d in data)),
        "generated_tokens": float(generated),
        "reward_mean": sum(rewards) / n if n else 0.0,
        "advantage_abs_mean": sum(abs(a) for a in advs) / n if n else 0.0,
    }
    return TrainingBatch(data=data, metrics=metrics)
