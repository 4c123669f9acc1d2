"""skyrl :class:`~skyrl_core.transitions.TrainingBatch` <-> VeRL ``DataProto``.

One :class:`~skyrl_core.transitions.Datum` becomes one DataProto row, laid out the way VeRL's rollout workers
produce batches (``verl.experimental.agent_loop.AgentLoopWorker``): the prompt is **left**-padded to the batch's
longest prompt and the response **right**-padded to the longest response, so every response starts at column
``P`` and VeRL's actor can slice ``[:, P:]``. A trajectory split by context resets (several datums) becomes several
rows sharing the trajectory's ``uid`` (its group id) and ``trajectory_id``; ``is_last_step`` marks its final row.

Tensor keys (``B`` rows, ``P`` prompt columns, ``R`` response columns):

- ``prompts`` [B, P] int64, left-padded with ``pad_token_id``; ``responses`` [B, R] int64, right-padded;
- ``input_ids`` [B, P+R] = prompts ++ responses; ``attention_mask`` [B, P+R] 1 on real tokens;
- ``position_ids`` [B, P+R] = ``clip(cumsum(attention_mask) - 1, 0)`` (VeRL's ``compute_position_id_with_mask``);
- ``response_mask`` [B, R]: 1 on model-generated tokens of rows that enter the loss (the datum's
  ``response_mask`` times its ``loss_mask``), 0 on observations, padding and loss-masked rows;
- ``skyrl_generated_mask`` [B, R]: the datum's own ``response_mask`` (kept so a round trip is lossless);
- ``token_level_scores`` [B, R] float32: the datum's reward on its last response token, 0 elsewhere (VeRL's
  outcome-reward layout; ``token_level_rewards`` is the same tensor since skyrl applies no in-reward KL);
- ``rollout_log_probs`` [B, R] float32: the sampler's logprobs, present only when every datum has them.

Non-tensor keys (numpy object/number arrays of length B): ``uid`` (group id, what VeRL's GRPO/RLOO group by),
``trajectory_id``, ``is_last_step``, ``loss_mask``, ``reward``, ``advantage``, ``num_calls``.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import torch

from skyrl_core.transitions import Datum, TrainingBatch

log = logging.getLogger(__name__)

NON_TENSOR_KEYS = ("uid", "trajectory_id", "is_last_step", "loss_mask", "reward", "advantage", "num_calls")


class ConversionError(ValueError):
    """A TrainingBatch or DataProto cannot be converted; the message names the datum/row and the field."""


def _check_datum(i: int, d: Datum) -> None:
    n = len(d.response_ids)
    if len(d.response_mask) != n:
        raise ConversionError(f"datum {i} (trajectory {d.trajectory_id!r}): response_mask has {len(d.response_mask)} "
                              f"entries, response_ids {n}")
    if d.rollout_logprobs is not None and len(d.rollout_logprobs) != n:
        raise ConversionError(f"datum {i} (trajectory {d.trajectory_id!r}): rollout_logprobs has "
                              f"{len(d.rollout_logprobs)} entries, response_ids {n}")
    if not d.prompt_ids:
        raise ConversionError(f"datum {i} (trajectory {d.trajectory_id!r}) has an empty prompt")


def to_dataproto(batch: TrainingBatch, *, pad_token_id: int = 0, prompt_length: int | None = None,
                 response_length: int | None = None):
    """Convert a TrainingBatch into a ``verl.DataProto`` (layout in the module docstring).

    ``prompt_length``/``response_length`` pad to fixed widths (VeRL's ``rollout.prompt_length`` /
    ``rollout.response_length``); default: the batch's longest prompt/response. ``meta_info`` carries the
    batch metrics, ``pad_token_id`` and whether rollout logprobs are present.

    Raises ConversionError for an empty batch, misaligned datum fields, or a datum longer than a fixed width.
    """
    from verl import DataProto

    data = batch.data
    if not data:
        raise ConversionError("cannot convert an empty TrainingBatch to a DataProto (VeRL needs at least one row)")
    for i, d in enumerate(data):
        _check_datum(i, d)
    longest_p = max(len(d.prompt_ids) for d in data)
    longest_r = max(len(d.response_ids) for d in data)
    P = longest_p if prompt_length is None else prompt_length
    R = max(longest_r, 1) if response_length is None else response_length
    if longest_p > P:
        raise ConversionError(f"a prompt has {longest_p} tokens, more than prompt_length={P} "
                              f"(raise data.max_prompt_length / the skyrl agent.max_context_tokens mapping)")
    if longest_r > R:
        raise ConversionError(f"a response has {longest_r} tokens, more than response_length={R} "
                              f"(raise data.max_response_length)")
    B = len(data)
    prompts = torch.full((B, P), pad_token_id, dtype=torch.int64)
    responses = torch.full((B, R), pad_token_id, dtype=torch.int64)
    prompt_attn = torch.zeros((B, P), dtype=torch.int64)
    response_attn = torch.zeros((B, R), dtype=torch.int64)
    generated = torch.zeros((B, R), dtype=torch.int64)
    scores = torch.zeros((B, R), dtype=torch.float32)
    with_logprobs = all(d.rollout_logprobs is not None for d in data)
    if not with_logprobs and any(d.rollout_logprobs is not None for d in data):
        log.warning("some datums lack rollout logprobs: rollout_log_probs is left out of the DataProto")
    logprobs = torch.zeros((B, R), dtype=torch.float32) if with_logprobs else None
    for i, d in enumerate(data):
        p, n = len(d.prompt_ids), len(d.response_ids)
        prompts[i, P - p:] = torch.tensor(d.prompt_ids, dtype=torch.int64)
        prompt_attn[i, P - p:] = 1
        if n:
            responses[i, :n] = torch.tensor(d.response_ids, dtype=torch.int64)
            response_attn[i, :n] = 1
            generated[i, :n] = torch.tensor(d.response_mask, dtype=torch.int64)
            if logprobs is not None:
                logprobs[i, :n] = torch.tensor(d.rollout_logprobs, dtype=torch.float32)
        # outcome reward on the last response token (column 0 for an empty response, which has no loss tokens)
        scores[i, max(n - 1, 0)] = float(d.reward)
    loss_mask = torch.tensor([int(d.loss_mask) for d in data], dtype=torch.int64)
    attention_mask = torch.cat([prompt_attn, response_attn], dim=1)
    tensors: dict[str, torch.Tensor] = {
        "prompts": prompts,
        "responses": responses,
        "input_ids": torch.cat([prompts, responses], dim=1),
        "attention_mask": attention_mask,
        "position_ids": torch.clip(torch.cumsum(attention_mask, dim=-1) - 1, min=0),
        "response_mask": generated * loss_mask[:, None],
        "skyrl_generated_mask": generated,
        "token_level_scores": scores,
        "token_level_rewards": scores.clone(),
    }
    if logprobs is not None:
        tensors["rollout_log_probs"] = logprobs
    non_tensors = {
        "uid": np.array([d.group_id for d in data], dtype=object),
        "trajectory_id": np.array([d.trajectory_id for d in data], dtype=object),
        "is_last_step": np.array([bool(d.is_last_step) for d in data], dtype=bool),
        "loss_mask": loss_mask.numpy().astype(np.int64),
        "reward": np.array([float(d.reward) for d in data], dtype=np.float64),
        "advantage": np.array([float(d.advantage) for d in data], dtype=np.float64),
        "num_calls": np.array([int(d.num_calls) for d in data], dtype=np.int64),
    }
    meta = {"metrics": dict(batch.metrics), "pad_token_id": pad_token_id, "rollout_log_probs": with_logprobs}
    return DataProto.from_dict(tensors=tensors, non_tensors=non_tensors, meta_info=meta)


def _row_value(non_tensor: dict[str, Any], key: str, i: int, default: Any) -> Any:
    if key in non_tensor:
        value = non_tensor[key][i]
        return value.item() if hasattr(value, "item") else value
    return default


def from_dataproto(dp) -> TrainingBatch:
    """Convert a ``verl.DataProto`` with VeRL's rollout layout back into a TrainingBatch.

    Reads ``prompts``, ``responses``, ``attention_mask`` and ``response_mask`` (required); ``skyrl_generated_mask``
    (else ``response_mask``) as each datum's generated-token mask; ``rollout_log_probs`` when present. The reward
    is the non-tensor ``reward`` when present, else the row sum of ``token_level_scores`` or ``rm_scores``; the
    advantage the non-tensor ``advantage``, else the ``advantages`` tensor at the row's first loss token, else 0.
    ``uid`` becomes ``group_id``; rows without a ``trajectory_id`` get ``<uid>/<row>``. A DataProto made by
    :func:`to_dataproto` round-trips exactly (logprobs as float32).

    Raises ConversionError naming the missing key.
    """
    batch = dp.batch
    for key in ("prompts", "responses", "attention_mask", "response_mask"):
        if batch is None or key not in batch.keys():
            raise ConversionError(f"DataProto has no '{key}' tensor; it needs prompts, responses, attention_mask "
                                  f"and response_mask (VeRL's rollout layout)")
    nt = dp.non_tensor_batch or {}
    prompts, responses = batch["prompts"], batch["responses"]
    P = prompts.shape[1]
    attn = batch["attention_mask"]
    gen = batch["skyrl_generated_mask"] if "skyrl_generated_mask" in batch.keys() else batch["response_mask"]
    lp = batch["rollout_log_probs"] if "rollout_log_probs" in batch.keys() else None
    score_key = next((k for k in ("token_level_scores", "rm_scores") if k in batch.keys()), None)
    advantages = batch["advantages"] if "advantages" in batch.keys() else None
    data = []
    for i in range(len(dp)):
        p_mask = attn[i, :P].bool()
        n = int(attn[i, P:].sum())
        uid = str(_row_value(nt, "uid", i, f"row{i}"))
        if "reward" in nt:
            reward = float(_row_value(nt, "reward", i, 0.0))
        else:
            reward = float(batch[score_key][i].sum()) if score_key else 0.0
        if "advantage" in nt:
            adv = float(_row_value(nt, "advantage", i, 0.0))
        elif advantages is not None:
            loss_pos = batch["response_mask"][i].nonzero()
            adv = float(advantages[i, int(loss_pos[0])]) if len(loss_pos) else 0.0
        else:
            adv = 0.0
        data.append(Datum(
            prompt_ids=prompts[i][p_mask].tolist(),
            response_ids=responses[i, :n].tolist(),
            response_mask=gen[i, :n].tolist(),
            rollout_logprobs=None if lp is None else lp[i, :n].tolist(),
            reward=reward,
            advantage=adv,
            trajectory_id=str(_row_value(nt, "trajectory_id", i, f"{uid}/{i}")),
            group_id=uid,
            is_last_step=bool(_row_value(nt, "is_last_step", i, True)),
            loss_mask=int(_row_value(nt, "loss_mask", i, 1)),
            num_calls=int(_row_value(nt, "num_calls", i, 1)),
        ))
    metrics = dict((dp.meta_info or {}).get("metrics", {}) or {})
    if not all(isinstance(v, (int, float)) for v in metrics.values()):
        metrics = {}
    return TrainingBatch(data=data, metrics=metrics)
