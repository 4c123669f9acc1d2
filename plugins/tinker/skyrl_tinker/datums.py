"""TrainingBatch -> Tinker ``Datum``s for the RL losses ``importance_sampling`` and ``ppo``.

A skyrl datum holds ``prompt_ids`` [P] and ``response_ids`` [R] with ``response_mask`` [R] (1 = model token),
``rollout_logprobs`` [R] and one ``advantage``. Tinker trains next-token prediction on a shifted pair: with
``tokens = prompt_ids + response_ids`` (N = P + R),

- ``model_input`` = ``tokens[:-1]`` (N - 1 ids) and ``target_tokens`` = ``tokens[1:]`` (int64, [N - 1]): the
  model at position j predicts ``tokens[j + 1]``;
- response token k sits at ``tokens[P + k]``, so it is target ``j = P - 1 + k``;
- ``weights`` [N - 1] (float32) is 1 at targets that are model tokens (``response_mask`` 1) and 0 elsewhere
  (prompt, observations, hints);
- ``logprobs`` [N - 1] (float32) is the sampler's logprob of target j (0 where the weight is 0);
- ``advantages`` [N - 1] (float32) is the datum's advantage where the weight is 1, else 0 (so a service that
  ignores ``weights`` for these losses still gives observation tokens no gradient).

Tinker's losses are then ``-sum_j w_j * min(r_j * A_j, clip(r_j) * A_j)`` (ppo) or ``-sum_j w_j r_j A_j``
(importance_sampling) with ``r_j = exp(logp_learner - logprobs_j)``: the REINFORCE/PPO objectives with the
sampler as behaviour policy (Schulman et al. 2017, Eq. 7). Loss-masked datums (``loss_mask`` 0) and datums with no
model token are left out, not sent with zero weights.
"""

from __future__ import annotations

from typing import Any, Sequence

import attrs

from skyrl_core.errors import SkyrlError
from skyrl_core.transitions import Datum, TrainingBatch


@attrs.define
class Converted:
    """``datums`` (tinker.Datum) in batch order, ``sources`` their indices in the TrainingBatch, ``skipped``
    how many data were left out (loss-masked or without model tokens), ``tokens`` weighted target tokens."""

    datums: list[Any]
    sources: list[int]
    skipped: int
    tokens: int


def shifted_arrays(d: Datum) -> dict[str, Any]:
    """The four shifted numpy arrays of one datum (see the module docstring): ``input_ids`` [N-1] int64,
    ``target_tokens`` [N-1] int64, ``weights``/``logprobs``/``advantages`` [N-1] float32. Raises SkyrlError
    when the datum has no prompt token, lengths disagree or logprobs are missing."""
    import numpy as np

    P, R = len(d.prompt_ids), len(d.response_ids)
    where = f"datum of trajectory {d.trajectory_id}"
    if P < 1:
        raise SkyrlError(f"{where}: no prompt token (the first target needs one token before it)")
    if len(d.response_mask) != R:
        raise SkyrlError(f"{where}: response_mask has {len(d.response_mask)} entries for {R} response tokens")
    if d.rollout_logprobs is None:
        raise SkyrlError(f"{where}: no sampler logprobs; the importance_sampling and ppo losses need the engine's "
                         f"logprobs (engine tinker returns them)")
    if len(d.rollout_logprobs) != R:
        raise SkyrlError(f"{where}: {len(d.rollout_logprobs)} logprobs for {R} response tokens")
    tokens = np.asarray(list(d.prompt_ids) + list(d.response_ids), dtype=np.int64)
    n = len(tokens) - 1
    mask = np.asarray(d.response_mask, dtype=np.float32)
    weights = np.zeros(n, dtype=np.float32)
    weights[P - 1:] = mask
    logprobs = np.zeros(n, dtype=np.float32)
    logprobs[P - 1:] = np.asarray(d.rollout_logprobs, dtype=np.float32) * mask
    advantages = weights * np.float32(d.advantage)
    return {"input_ids": tokens[:-1], "target_tokens": tokens[1:], "weights": weights, "logprobs": logprobs,
            "advantages": advantages}


def to_datum(d: Datum) -> Any:
    """One ``tinker.Datum`` with ``target_tokens``, ``weights``, ``logprobs`` and ``advantages``."""
    import tinker

    arrays = shifted_arrays(d)
    inputs = {key: tinker.TensorData.from_numpy(arrays[key])
              for key in ("target_tokens", "weights", "logprobs", "advantages")}
    return tinker.Datum(model_input=tinker.ModelInput.from_ints(arrays["input_ids"].tolist()), loss_fn_inputs=inputs)


def convert_batch(batch: TrainingBatch) -> Converted:
    """Every trainable datum of ``batch`` as a tinker.Datum (see :class:`Converted`)."""
    datums, sources, skipped, tokens = [], [], 0, 0
    for i, d in enumerate(batch.data):
        if not d.loss_mask or not any(d.response_mask):
            skipped += 1
            continue
        datums.append(to_datum(d))
        sources.append(i)
        tokens += int(sum(d.response_mask))
    return Converted(datums=datums, sources=sources, skipped=skipped, tokens=tokens)


def split(items: Sequence[Any], parts: int) -> list[list[Any]]:
    """``items`` in ``parts`` contiguous mini-batches of near-equal size (fewer when there are fewer items)."""
    parts = max(1, min(parts, len(items)))
    size, extra = divmod(len(items), parts)
    out, start = [], 0
    for p in range(parts):
        end = start + size + (1 if p < extra else 0)
        out.append(list(items[start:end]))
        start = end
    return out
