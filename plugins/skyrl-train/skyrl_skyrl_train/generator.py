"""skyrl's agent as a SkyRL-train generator: :class:`SkyrlAgentGenerator` implements ``GeneratorInterface``.

SkyRL-train's trainer hands ``generate`` a ``GeneratorInput`` whose rows it has already repeated
``generator.n_samples_per_prompt`` times (``prepare_generator_input``: the one place the samples of a group are
made); each row names a skyrl task and instance in its ``env_extras`` (``skyrl_task_index``,
``skyrl_instance_id``, ``skyrl_split``, written by :func:`skyrl_skyrl_train.launcher.write_dataset`). The
generator rolls every row out once through skyrl's :class:`~skyrl_core.rollout.RolloutSession`: the configured
dispatcher schedules runtime start and instruction builder, skyrl's agent loop with the task's tools, the verifier
and runtime release, generating through SkyRL-train's inference engine client with token ids in and out
(:class:`~skyrl_skyrl_train.engine.SkyrlTrainClientEngine`), and the sampler's logprobs recorded per token.

Each trajectory's transitions are packed exactly as for skyrl's local trainer
(:func:`skyrl_core.postprocess.pack_transitions`): one row per training datum. With
``generator.step_wise_trajectories`` (the launcher's default) a trajectory whose context was reset (MemAgent
"next", summarisation) gives several contiguous rows sharing its ``TrajectoryID``, the last with
``is_last_step`` True; SkyRL-train then computes the advantage on the last row and broadcasts it to the others.
Without step-wise mode only the last datum of such a trajectory is returned (the earlier ones are counted in
``rollout_metrics["skyrl/dropped_reset_rows"]``).

Masking: a masked trajectory (error, context or time limit; ``Trajectory.masked``) keeps its tokens and reward
(it stays in its group's baseline, as in skyrl's local trainer) with an all-zero ``loss_masks`` row. A
trajectory that failed before its first LLM call has no tokens: its row is the chat-templated prompt and one EOS
token, loss mask 0, logprob 0.0 (SkyRL-train needs a non-empty response to place the reward).
"""

from __future__ import annotations

import logging
import time
from typing import Any, Sequence

from skyrl_core.errors import ConfigError
from skyrl_core.postprocess import pack_transitions
from skyrl_core.rollout import RolloutSession, sampling_params as skyrl_sampling
from skyrl_core.default_plugins.trainer.runlog import trajectory_summary

from . import compat
from .engine import SkyrlTrainClientEngine

log = logging.getLogger(__name__)

ENV_CLASS = "skyrl"
# SkyRL-train's vLLM sampling keys that skyrl's SamplingParams carries itself
_OWN_KEYS = {"temperature", "top_p", "top_k", "max_tokens", "stop", "seed", "logprobs", "min_tokens",
             "skip_special_tokens", "include_stop_str_in_output", "n"}


class SkyrlAgentGenerator(compat.generator_interface()):
    """Run skyrl's dispatcher and agent loop for SkyRL-train (see the module docstring).

    ``config``: the skyrl :class:`~skyrl_core.config.Config` (tasks, tools, agent, dispatcher, sampling
    defaults). ``inference_engine_client``: SkyRL-train's client (``generate(InferenceEngineInput)``).
    ``tokenizer``: the policy's. ``step_wise``: one row per datum (True) or per trajectory. ``model``: the
    policy model name sent with requests. Raises ConfigError at ``generate`` for a row that names no known task
    instance.
    """

    def __init__(self, config: Any, inference_engine_client: Any, tokenizer: Any, *, step_wise: bool = True,
                 model: str | None = None, registry: Any = None) -> None:
        self.api = compat.load()
        self.config = config
        self.tokenizer = tokenizer
        self.step_wise = bool(step_wise)
        self.engine = SkyrlTrainClientEngine(inference_engine_client, tokenizer, config.agent.max_context_tokens,
                                             model=model)
        self.session = RolloutSession(config, self.engine, registry)
        self._instances: dict[tuple[int, str], dict[str, Any]] = {}
        self.last_trajectories: list[Any] = []
        # one entry per generate call: rows and groups handed to the dispatcher at once, runtimes started/released
        self.rollouts: list[dict[str, int]] = []
        self.closed = False

    async def close(self) -> None:
        """Close the rollout session (what its placements hold: Ray actors, pooled runtimes). The engine client
        is SkyRL-train's and stays open. Safe to call twice; ``generate`` after it raises RuntimeError."""
        if not self.closed:
            self.closed = True
            await self.session.close()

    # -- rows -> instances -------------------------------------------------------------------------------
    def _item(self, row: int, extras: dict | None) -> tuple[Any, Any]:
        extras = extras or {}
        try:
            ti = int(extras["skyrl_task_index"])
            instance_id = str(extras["skyrl_instance_id"])
        except (KeyError, TypeError, ValueError):
            raise ConfigError(f"SkyRL-train row {row}: env_extras {sorted(extras)} lack skyrl_task_index/"
                              f"skyrl_instance_id; write the dataset with skyrl_skyrl_train.launcher."
                              f"write_dataset") from None
        tasks = self.config.tasks
        if not 0 <= ti < len(tasks):
            raise ConfigError(f"SkyRL-train row {row} names skyrl_task_index {ti}, but the config has "
                              f"{len(tasks)} task(s)")
        tc = tasks[ti]
        split = "eval" if str(extras.get("skyrl_split", "train")) == "eval" else "train"
        key = (ti, split)
        if key not in self._instances:
            spec = tc.data if split == "train" or tc.eval_data is None else tc.eval_data
            self._instances[key] = {inst.id: inst for inst in self.session._resolve(tc).task.select(spec)}
        try:
            return tc, self._instances[key][instance_id]
        except KeyError:
            raise ConfigError(f"SkyRL-train row {row}: task '{tc.name}' (tasks.{ti}) has no {split} instance "
                              f"'{instance_id}'") from None

    def _sampling(self, params: dict | None):
        params = dict(params or {})
        s = self.config.sampling
        overrides = {"temperature": float(params.get("temperature", s.temperature)),
                     "top_p": float(params.get("top_p", s.top_p)),
                     "top_k": int(params.get("top_k", s.top_k)),
                     "max_tokens": int(params.get("max_tokens", params.get("max_generate_length", s.max_tokens)))}
        if params.get("stop"):
            overrides["stop"] = tuple(params["stop"])
        if params.get("seed") is not None:
            overrides["seed"] = int(params["seed"])
        self.engine.extra_sampling = {k: v for k, v in params.items()
                                      if k not in _OWN_KEYS and k != "max_generate_length" and v is not None}
        return skyrl_sampling(self.config, **overrides)

    # -- GeneratorInterface ------------------------------------------------------------------------------
    async def generate(self, input_batch: dict) -> dict:
        """Roll out every row of ``input_batch`` (a SkyRL-train ``GeneratorInput``) once; return a
        ``GeneratorOutput`` in row order (several contiguous rows per context-reset trajectory in step-wise
        mode). The trajectories stay in ``last_trajectories``."""
        if self.closed:
            raise RuntimeError("SkyrlAgentGenerator.generate after close(): its rollout session is closed")
        prompts = input_batch["prompts"]
        n = len(prompts)
        extras = input_batch.get("env_extras") or [None] * n
        tids = input_batch.get("trajectory_ids") or [self.api.TrajectoryID(instance_id=str(i), repetition_id=0)
                                                     for i in range(n)]
        items = [self._item(i, extras[i]) for i in range(n)]
        sampling = self._sampling(input_batch.get("sampling_params"))
        start = time.perf_counter()
        trajectories, dispatch = await self.session.rollout(items, n_samples=1, sampling=sampling)
        elapsed = time.perf_counter() - start
        for traj, tid in zip(trajectories, tids):
            # SkyRL-train's group (the dataset row's uid) and repetition are the trajectory's identity here
            traj.group_id = str(tid.instance_id)
            traj.sample_index = int(tid.repetition_id)
        self.last_trajectories = trajectories
        self.rollouts.append({"rows": n, "groups": len({str(t.instance_id) for t in tids}),
                              "runtime_starts": int(dispatch.get("runtime_starts", 0)),
                              "runtime_releases": int(dispatch.get("runtime_releases", 0))})
        output = self.to_generator_output(trajectories, tids)
        metrics = {f"skyrl/{k}": float(v) for k, v in trajectory_summary(trajectories).items()
                   if isinstance(v, (int, float)) and not isinstance(v, bool)}
        metrics.update({f"skyrl/dispatch_{k}": float(v) for k, v in dispatch.items()
                        if isinstance(v, (int, float)) and not isinstance(v, bool)})
        metrics["skyrl/rollout_s"] = elapsed
        metrics.update(output["rollout_metrics"])
        output["rollout_metrics"] = metrics
        return output

    def _empty_prompt(self, traj: Any) -> list[int]:
        messages = [m for m in traj.messages if m.get("role") in ("system", "user")][:2] or \
            [{"role": "user", "content": ""}]
        return list(self.tokenizer.apply_chat_template([{"role": m["role"], "content": m.get("content") or ""}
                                                        for m in messages], add_generation_prompt=True,
                                                       tokenize=True, return_dict=False))

    def to_generator_output(self, trajectories: Sequence[Any], trajectory_ids: Sequence[Any]) -> dict:
        """A ``GeneratorOutput`` for finished trajectories (one ``TrajectoryID`` each): fields
        ``prompt_token_ids``, ``response_ids``, ``rewards`` (float per row: the trajectory's reward),
        ``loss_masks`` (generated tokens 1, observations 0; all 0 for a masked trajectory), ``stop_reasons``
        (the trajectory's finish reason), ``rollout_logprobs`` (the sampler's, 0.0 at observation tokens),
        ``trajectory_ids``, ``is_last_step`` (Python bools), ``rollout_metrics``, and, on 0.4.0,
        ``trajectory_generation_times`` and ``env_metrics``. Raises ConfigError when a datum has no logprobs
        (the engine did not return them)."""
        out: dict[str, list] = {k: [] for k in ("prompt_token_ids", "response_ids", "rewards", "loss_masks",
                                                "stop_reasons", "rollout_logprobs", "trajectory_ids",
                                                "is_last_step")}
        times, env_metrics = [], []
        dropped = 0
        eos = self.tokenizer.eos_token_id
        for traj, tid in zip(trajectories, trajectory_ids):
            seqs = pack_transitions(traj.transitions)
            if not seqs:
                seqs = [{"prompt_ids": self._empty_prompt(traj), "response_ids": [eos], "response_mask": [0],
                         "rollout_logprobs": [0.0], "num_calls": 0}]
            if not self.step_wise and len(seqs) > 1:
                dropped += len(seqs) - 1
                seqs = seqs[-1:]
            times.append(float(sum(traj.timing.values())))  # one per trajectory (SkyRL-train's unit)
            for i, s in enumerate(seqs):
                if s["rollout_logprobs"] is None:
                    raise ConfigError(f"trajectory {traj.id}: the inference engine returned no logprobs; "
                                      f"SkyRL-train's off-policy correction needs the sampler's own")
                if not s["response_ids"]:  # an empty generation (the context was full): one masked EOS
                    s = {**s, "response_ids": [eos], "response_mask": [0], "rollout_logprobs": [0.0]}
                out["prompt_token_ids"].append(list(s["prompt_ids"]))
                out["response_ids"].append(list(s["response_ids"]))
                out["loss_masks"].append([0] * len(s["response_mask"]) if traj.masked else list(s["response_mask"]))
                out["rollout_logprobs"].append([float(x) for x in s["rollout_logprobs"]])
                out["rewards"].append(float(traj.reward))
                out["stop_reasons"].append(str(traj.finish_reason or "stop"))
                out["trajectory_ids"].append(tid)
                out["is_last_step"].append(i == len(seqs) - 1)
                env_metrics.append({"skyrl_trajectory": traj.id, "finish_reason": traj.finish_reason,
                                    "masked": traj.masked, "turns": traj.turns})
        if dropped:
            log.warning("%d context-reset rows dropped: set generator.step_wise_trajectories=true to train them",
                        dropped)
        result: dict[str, Any] = dict(out)
        result["rollout_metrics"] = {"skyrl/dropped_reset_rows": float(dropped),
                                     "skyrl/rows": float(len(out["response_ids"]))}
        if self.api.generation == "skyrl.train":
            result.update(trajectory_generation_times=times, trajectory_time_splits=None,
                          rollout_expert_indices=None, rollout_sample_support=None, env_metrics=env_metrics,
                          pixel_values=None, image_grid_thw=None)
        return result
