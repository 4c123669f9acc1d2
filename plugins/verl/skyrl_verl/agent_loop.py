"""skyrl's agent loop inside VeRL: an ``AgentLoopBase`` registered as ``skyrl``.

VeRL's agent-loop workers instantiate one :class:`SkyrlAgentLoop` per dataset row and call
``run(sampling_params, **row)``. The row names a skyrl task and instance (``extra_info`` written by
:func:`skyrl_verl.launcher.write_task_parquet`); the loop builds a :class:`~skyrl_core.rollout.RolloutSession`
over :class:`VerlServerEngine` — VeRL's server manager seen as a skyrl engine, token ids in and out — and rolls
the instance out once through skyrl's dispatcher stages: runtime start and instruction builder, skyrl's agent loop
with the task's tools, the verifier, runtime release. The trajectory's transitions are packed exactly as for the
local trainer (:func:`skyrl_core.postprocess.pack_transitions`) and each datum becomes one ``AgentLoopOutput``;
the verifier's reward is ``reward_score`` of the last one (VeRL then skips its own reward function).

Two rules match the local trainer's: a response longer than ``response_length`` is cut there and its row is
loss-masked (``skyrl_truncated``), as a max-token cut-off is locally, so the full reward is never credited to
cut text; and each sample gets its own sampling seed (:func:`skyrl_core.rollout.sample_seed` of the round
``verl-<split>-<k>``, ``k`` counting this worker's samples of the instance), where VeRL's one-sample calls would
otherwise give every sample of a group the same seed.

:meth:`SkyrlAgentLoop.run_outputs` returns all outputs (several when the agent reset its context);
:meth:`SkyrlAgentLoop.run`, the method VeRL 0.9.1's worker calls and which must return one output, returns the last
datum's and attaches the earlier ones under ``extra_fields["skyrl_step_outputs"]``.

:class:`HFServerManager` is an adapter, not VeRL's server: it presents skyrl's in-process hf engine through the
``generate(request_id, *, prompt_ids, sampling_params)`` interface VeRL's ``LLMServerClient`` has, so the loop can
run and be tested on a CPU machine without Ray or vLLM; :class:`skyrl_verl.rollout.SkyrlEngineServer` (VeRL's
rollout ``skyrl``) serves VeRL's own trainer through it.
"""

from __future__ import annotations

import logging
import time
import uuid
from typing import Any

import attrs

from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopMetrics, AgentLoopOutput, register
from verl.workers.rollout.replica import TokenOutput

from skyrl_core.errors import ConfigError
from skyrl_core.inference.base import Engine, GenerationOutput, SamplingParams

log = logging.getLogger(__name__)

_INSTANCES: dict[tuple, dict[str, Any]] = {}
# how many samples of each (split, task index, instance) this worker process has rolled out: VeRL calls the
# loop once per sample with identical rows, so the count is the sample's index for its seed
_SAMPLES_SEEN: dict[tuple, int] = {}


def next_sample_index(key: tuple) -> int:
    """The index of the next sample of ``key`` in this process (0, 1, 2, ... across the whole run)."""
    index = _SAMPLES_SEEN.get(key, 0)
    _SAMPLES_SEEN[key] = index + 1
    return index


class VerlServerEngine(Engine):
    """VeRL's server manager (``LLMServerClient`` or anything with its ``generate``) as a skyrl Engine.

    ``generate(input_ids, sampling)`` sends the token ids and VeRL-style sampling params (``temperature``,
    ``top_p``, ``top_k``, ``max_tokens``, ``logprobs``, ``stop``, ``seed``) under one sticky ``request_id`` per
    trajectory, and maps VeRL's ``TokenOutput`` back: ``finish_reason`` is ``abort`` for an aborted request,
    ``length`` when ``max_tokens`` tokens came back (or the context window is reached), else ``stop``.
    """

    name = "verl"

    def __init__(self, server_manager: Any, tokenizer: Any, max_context: int) -> None:
        super().__init__()
        self.server_manager = server_manager
        self.tokenizer = tokenizer
        self.max_context = int(max_context)
        self.request_id = uuid.uuid4().hex

    async def generate(self, input_ids: list[int], sampling: SamplingParams) -> GenerationOutput:
        max_tokens = min(sampling.max_tokens, max(self.max_context - len(input_ids), 0))
        if max_tokens <= 0:
            return GenerationOutput(output_ids=[], output_logprobs=[], finish_reason="length")
        params: dict[str, Any] = {"temperature": sampling.temperature, "top_p": sampling.top_p,
                                  "top_k": sampling.top_k, "max_tokens": max_tokens, "logprobs": sampling.logprobs}
        if sampling.stop:
            params["stop"] = list(sampling.stop)
        if sampling.seed is not None:
            params["seed"] = sampling.seed
        self.stats.started(len(input_ids))
        try:
            out: TokenOutput = await self.server_manager.generate(request_id=self.request_id,
                                                                  prompt_ids=list(input_ids), sampling_params=params)
        except BaseException:
            self.stats.errors += 1
            self.stats.finished(0)
            raise
        self.stats.finished(len(out.token_ids))
        if out.stop_reason == "aborted":
            reason = "abort"
        elif len(out.token_ids) >= max_tokens:
            reason = "length"
        else:
            reason = "stop"
        logprobs = list(out.log_probs) if out.log_probs and len(out.log_probs) == len(out.token_ids) else None
        return GenerationOutput(output_ids=list(out.token_ids), output_logprobs=logprobs, finish_reason=reason)


class HFServerManager:
    """Adapter (a stand-in for VeRL's ``LLMServerClient``): serves VeRL's token-in/token-out ``generate`` from a
    skyrl engine in this process (e.g. :class:`skyrl_core.default_plugins.engines.hf.HFEngine`). Counts ``requests``."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.requests = 0

    async def generate(self, request_id: str, *, prompt_ids: list[int], sampling_params: dict[str, Any],
                       **kwargs: Any) -> TokenOutput:
        self.requests += 1
        sp = SamplingParams(temperature=float(sampling_params.get("temperature", 1.0)),
                            top_p=float(sampling_params.get("top_p", 1.0)),
                            top_k=int(sampling_params.get("top_k", -1)),
                            max_tokens=int(sampling_params.get("max_tokens", 512)),
                            stop=tuple(sampling_params.get("stop") or ()), seed=sampling_params.get("seed"))
        out = await self.engine.generate(list(prompt_ids), sp)
        return TokenOutput(token_ids=out.output_ids, log_probs=out.output_logprobs,
                           stop_reason="aborted" if out.finish_reason == "abort" else "completed")


def _skyrl_config(trainer_config: Any):
    from omegaconf import OmegaConf

    from skyrl_core.config import config_from_dict

    section = trainer_config.get("skyrl") if hasattr(trainer_config, "get") else None
    if section is None:
        raise ConfigError("VeRL's config has no 'skyrl' section: build it with skyrl_verl.launcher."
                          "build_verl_config (skyrl verl launch) so the agent loop knows tasks, tools and agent")
    data = OmegaConf.to_container(section, resolve=True) if OmegaConf.is_config(section) else dict(section)
    return config_from_dict(data)


@register("skyrl")
class SkyrlAgentLoop(AgentLoopBase):
    """Runs one skyrl trajectory per VeRL dataset row (see the module docstring). Built by VeRL's worker with
    ``trainer_config`` (whose ``skyrl`` section is the skyrl Config), ``server_manager``, ``tokenizer``, ...;
    a ``skyrl_config`` keyword (a Config) takes precedence over that section."""

    def __init__(self, *args: Any, skyrl_config: Any = None, **kwargs: Any) -> None:
        kwargs.pop("tools", None)  # VeRL's own tool list; skyrl's tools come from the task config
        super().__init__(*args, **kwargs)
        self.skyrl_config = skyrl_config if skyrl_config is not None else _skyrl_config(self.config)
        self.response_length = int(self.rollout_config.response_length)

    def _instance(self, session: Any, extra_info: dict) -> tuple[Any, Any]:
        try:
            ti = int(extra_info["task_index"])
            instance_id = str(extra_info["instance_id"])
        except (KeyError, TypeError, ValueError):
            raise ConfigError(f"VeRL row extra_info {extra_info!r} lacks task_index/instance_id; write the data with "
                              f"skyrl_verl.launcher.write_task_parquet") from None
        tasks = self.skyrl_config.tasks
        if not 0 <= ti < len(tasks):
            raise ConfigError(f"VeRL row names task_index {ti}, but the skyrl config has {len(tasks)} tasks")
        tc = tasks[ti]
        split = str(extra_info.get("split", "train"))
        spec = tc.data if split == "train" or tc.eval_data is None else tc.eval_data
        key = (ti, tc.name, repr(spec))
        if key not in _INSTANCES:
            _INSTANCES[key] = {inst.id: inst for inst in session._resolve(tc).task.select(spec)}
        try:
            return tc, _INSTANCES[key][instance_id]
        except KeyError:
            raise ConfigError(f"task '{tc.name}' (tasks.{ti}) has no {split} instance '{instance_id}'") from None

    async def run_outputs(self, sampling_params: dict[str, Any], **kwargs: Any) -> list[AgentLoopOutput]:
        """Roll out the row's instance once; one AgentLoopOutput per training datum (in order)."""
        from skyrl_core.postprocess import pack_transitions
        from skyrl_core.rollout import RolloutSession, sampling_params as skyrl_sampling

        config = self.skyrl_config
        engine = VerlServerEngine(self.server_manager, self.tokenizer, config.agent.max_context_tokens)
        session = RolloutSession(config, engine)
        try:
            tc, instance = self._instance(session, dict(kwargs.get("extra_info") or {}))
            sampling = skyrl_sampling(config, temperature=float(sampling_params.get("temperature",
                                                                                    config.sampling.temperature)),
                                      top_p=float(sampling_params.get("top_p", config.sampling.top_p)),
                                      top_k=int(sampling_params.get("top_k", config.sampling.top_k)))
            extra = dict(kwargs.get("extra_info") or {})
            split = str(extra.get("split", "train"))
            k = next_sample_index((split, extra.get("task_index"), instance.id))
            if sampling.seed is None:
                from skyrl_core.training import EVAL_SEED_BASE  # the local trainer's base, so both paths agree

                sampling = attrs.evolve(sampling, seed=EVAL_SEED_BASE + config.train.seed)
            # one seed per sample: VeRL rolls each sample out in its own call, so the rollout's own per-sample
            # index is always 0; the k-th sample of an instance in this worker is round "verl-<split>-<k>"
            start = time.perf_counter()
            trajectories, _ = await session.rollout([(tc, instance)], n_samples=1, sampling=sampling,
                                                    seed_round=f"verl-{split}-{k}")
        finally:
            # the session's placements hold runtimes (Ray: actors) per task; VeRL builds one loop per row, so an
            # unclosed session leaks them row after row. The engine is VeRL's server manager: not ours to close
            await session.close()
        traj = trajectories[0]
        traj.metrics["sampling_seed_round"] = f"verl-{split}-{k}"
        elapsed = time.perf_counter() - start
        seqs = pack_transitions(traj.transitions)
        if not seqs:
            # failed before its first LLM call: an empty, loss-free row keeps VeRL's batch shape
            prompt = list(self.tokenizer.apply_chat_template(traj.messages or [{"role": "user", "content": ""}],
                                                             add_generation_prompt=True, tokenize=True,
                                                             return_dict=False))
            seqs = [{"prompt_ids": prompt, "response_ids": [], "response_mask": [], "rollout_logprobs": [],
                     "num_calls": 0}]
        generate_s = sum(t.latency_s for t in traj.transitions)
        outputs = []
        for i, s in enumerate(seqs):
            last = i == len(seqs) - 1
            n = min(len(s["response_ids"]), self.response_length)
            truncated = n < len(s["response_ids"])
            mask = list(s["response_mask"][:n])
            if traj.masked or truncated:
                # loss-masked: its tokens stay, none enter VeRL's loss. A response cut at response_length is
                # masked as a max-token cut-off is on the local path: its reward is not the cut text's
                mask = [0] * n
            lps = s["rollout_logprobs"]
            outputs.append(AgentLoopOutput(
                prompt_ids=self._cap_text_prompt_length(list(s["prompt_ids"])),
                response_ids=list(s["response_ids"][:n]),
                response_mask=mask,
                response_logprobs=None if lps is None else list(lps[:n]),
                reward_score=float(traj.reward) if last else None,
                num_turns=s["num_calls"],
                metrics=AgentLoopMetrics(generate_sequences=generate_s if last else 0.0,
                                         tool_calls=max(elapsed - generate_s, 0.0) if last else 0.0),
                extra_fields={"skyrl_trajectory_id": traj.id, "skyrl_group_id": traj.group_id,
                              "skyrl_is_last_step": last, "skyrl_finish_reason": traj.finish_reason,
                              "skyrl_masked": traj.masked or truncated, "skyrl_reward": float(traj.reward),
                              "skyrl_truncated": truncated},
            ))
        return outputs

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        """VeRL's entry point: the last datum's output; earlier datums (context resets) in
        ``extra_fields["skyrl_step_outputs"]`` as dicts."""
        outputs = await self.run_outputs(sampling_params, **kwargs)
        final = outputs[-1]
        if len(outputs) > 1:
            final.extra_fields["skyrl_step_outputs"] = [o.model_dump() for o in outputs[:-1]]
        return final
