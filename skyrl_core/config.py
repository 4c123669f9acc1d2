"""Typed run configuration: YAML -> attrs classes, with ``${ENV}`` interpolation and ``key.sub=value`` overrides.

Unknown keys and wrong types raise ConfigError naming the key path and what is allowed. Pluggable sections
(``engine``, ``dispatcher``, ``backend``, a task's ``runtime``) select a registered component by ``type``;
settings only a plugin understands go under that section's ``options``. Assigning a plain word to such a
section sets its type: ``backend=verl`` is ``backend.type=verl``. Where one task is configured, ``data.*``
addresses that task's data (``data.limit=4`` is ``tasks.0.data.limit=4``).
"""

from __future__ import annotations

import difflib
import logging
import os
import re
import typing
from pathlib import Path
from typing import Any, Callable, Literal

import attrs
import cattrs
import yaml

from .errors import ConfigError
from .runtime import RuntimeSpec
from .tasks import DataSpec


@attrs.define
class HintsConfig:
    """Hints the agent loop adds to observations. ``repeated_action``: warn after N identical calls (0 = off)."""

    turns_left: bool = True
    context_almost_full: bool = True
    context_warn_fraction: float = 0.85
    repeated_action: int = 3
    failed_edit: bool = True


@attrs.define
class AgentConfig:
    """The agent loop. ``max_context_tokens`` bounds prompt + generation in tokens; ``on_no_tool_call`` is
    ``stop`` (end the trajectory, reason ``no_tool_call``) or ``nudge`` (remind the model and continue);
    ``tool_timeout_s`` bounds one tool call in seconds; ``parser`` names a registered tool-call parser
    (``auto``: the model's own format, from its chat template's call markers or its name, see
    ``skyrl_core.default_plugins.parsers.detect``);
    ``chat_template_kwargs`` go to every chat-template render (``{enable_thinking: false}`` for Qwen3,
    ``{date_string: "26 Jul 2024"}`` for Llama 3.1) and are recorded in each transition; ``drift_check``
    re-renders each trajectory's final prompt with the chat template and compares it with the recorded ids
    (``eval``: in ``skyrl eval`` runs, ``always``, ``off``; metrics ``retok_drift*``, see docs/parsers.md)."""

    max_turns: int = 8
    max_context_tokens: int = 4096
    on_no_tool_call: Literal["stop", "nudge"] = "stop"
    max_nudges: int = 2
    tool_timeout_s: float = 30.0
    parser: str = "hermes"
    system_prompt: str | None = None
    keep_thinking: bool = False
    chat_template_kwargs: dict[str, Any] = attrs.Factory(dict)
    drift_check: Literal["eval", "always", "off"] = "eval"
    hints: HintsConfig = attrs.Factory(HintsConfig)


@attrs.define
class SamplingConfig:
    """Sampling for rollouts. ``max_tokens`` per LLM call; ``n_samples`` rollouts per instance (a group)."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    max_tokens: int = 512
    n_samples: int = 4
    seed: int | None = None


@attrs.define
class EngineConfig:
    """Inference engine. ``type``: hf | openai | vllm | a plugin's. ``max_batch``: requests decoded together;
    ``device``: auto | cpu | cuda; ``base_url``/``api_key``/``served_model``: the server for openai, and for vllm when it talks to a vLLM
    server instead of loading the model in-process. ``timeout_s`` catches a stalled call: seconds without a new
    token once the engine is decoding it (time queued behind other requests does not count; against a server,
    which sends nothing until done, seconds without an answer); ``call_timeout_s`` bounds one call's whole wall
    time, queueing included (None: no bound); docs/engines.md, "Timeouts".
    ``replicas`` copies of the engine, or one openai engine per URL in ``endpoints``, sit behind one router that
    sends each request to the replica with the fewest outstanding tokens (``sticky``: a trajectory stays on its
    replica, for prefix-cache reuse); ``placement`` names the registered placement that builds the replicas
    (``local``: this process; ``ray`` from the skyrl-ray plugin: Ray actors asking for ``resources``, which that
    placement checks); see docs/scale-out.md."""

    type: str = "hf"
    max_batch: int = 16
    device: str = "auto"
    dtype: str = "auto"
    base_url: str | None = None
    api_key: str | None = None
    served_model: str | None = None
    timeout_s: float = 300.0
    call_timeout_s: float | None = 3600.0
    options: dict[str, Any] = attrs.Factory(dict)
    replicas: int = 1
    endpoints: list[str] = attrs.Factory(list)
    sticky: bool = False
    placement: str = "local"
    resources: dict[str, Any] = attrs.Factory(dict)


@attrs.define
class DispatcherConfig:
    """Rollout scheduling (see docs/dispatchers.md). Timeouts in seconds (None: no limit); ``deadline_s`` bounds
    a whole batch. ``*_workers`` and ``queue_capacity`` size the pipeline; ``auto`` admits new inits from engine
    feedback (re-read every ``auto_interval_s`` seconds); ``max_runtimes`` caps runtimes alive at once;
    ``release_timeout_s`` bounds one runtime release. ``remember_costs``: the pipeline dispatchers (``async_pipeline``,
    ``priority``) remember each instance's measured stage seconds across a session's rollouts and set
    ``trajectory.metrics["priority"]`` from them (what ``priority`` orders by; see
    skyrl_core/default_plugins/dispatchers/stage_costs.py)."""

    type: str = "async_pipeline"
    max_parallel_agents: int = 16
    init_workers: int | None = None
    run_workers: int | None = None
    eval_workers: int | None = None
    queue_capacity: int | None = None
    auto: bool = False
    max_runtimes: int | None = None
    init_timeout_s: float | None = 600.0
    run_timeout_s: float | None = 3600.0
    eval_timeout_s: float | None = 600.0
    deadline_s: float | None = None
    release_timeout_s: float | None = 60.0
    auto_interval_s: float = 0.5
    remember_costs: bool = True
    options: dict[str, Any] = attrs.Factory(dict)


@attrs.define
class LoraConfig:
    """LoRA adapters through peft: rank ``r``, ``alpha``, ``dropout``, ``target_modules``."""

    r: int = 16
    alpha: int = 32
    dropout: float = 0.0
    target_modules: list[str] = attrs.Factory(lambda: ["q_proj", "k_proj", "v_proj", "o_proj"])


@attrs.define
class BackendConfig:
    """Training backend. ``type``: local | a bridge plugin's (verl, tinker, skyrl_train). ``advantage`` names an
    advantage estimator: rloo (default, Ahmadian et al. 2024), grpo, none, or a plugin's
    (``register_advantage_estimators``). ``policy_loss`` names a policy loss: ppo_clip (default, token-level
    PPO clip), gspo (sequence-level, Zheng et al. 2025), reinforce (unclipped), decoupled_ppo (behaviour and
    proximal policy apart, for asynchronous training; Fu et al. 2025), or a plugin's
    (``register_policy_losses``). ``clip`` is PPO's epsilon; ``kl_coef``/``entropy_coef`` 0 by
    default; ``tis_cap`` enables truncated importance sampling (Yao et al. 2025) with that cap (decoupled_ppo's
    cap, 2.0 when unset);
    ``micro_batch_tokens`` bounds tokens per forward/backward (gradient accumulation)."""

    type: str = "local"
    lr: float = 1.0e-6
    advantage: str = "rloo"
    policy_loss: str = "ppo_clip"
    std_normalize: bool = False
    clip: float = 0.2
    clip_high: float | None = None
    kl_coef: float = 0.0
    entropy_coef: float = 0.0
    tis_cap: float | None = None
    mini_batches: int = 1
    micro_batch_tokens: int = 4096
    max_grad_norm: float = 1.0
    weight_decay: float = 0.0
    betas: list[float] = attrs.Factory(lambda: [0.9, 0.999])
    bf16: Literal["auto", "on", "off"] = "auto"
    gradient_checkpointing: bool = False
    lora: LoraConfig | None = None
    options: dict[str, Any] = attrs.Factory(dict)


@attrs.define
class TaskConfig:
    """One task in the run. ``name`` is a registered task; ``data``/``eval_data`` select instances;
    ``tools``, ``runtime``, ``verifier`` and ``instruction_builder`` override the task's defaults. ``parser``,
    ``agent`` and ``sampling`` override the run's ``agent.parser``, ``agent.*`` and ``sampling.*`` for this task
    only (a mapping of the keys to change; the others come from the run): a multi-task run can read one task's
    tool calls as Hermes JSON and another's as Markdown code blocks. ``sampling.n_samples`` stays per run."""

    name: str
    data: DataSpec = attrs.Factory(DataSpec)
    eval_data: DataSpec | None = None
    tools: list[str] | None = None
    runtime: RuntimeSpec | None = None
    verifier: str | None = None
    instruction_builder: str | None = None
    parser: str | None = None
    agent: dict[str, Any] | None = None
    sampling: dict[str, Any] | None = None


@attrs.define
class TrainConfig:
    """Training loop. ``batch_size``: instances per step (each sampled ``sampling.n_samples`` times);
    ``eval_every``/``checkpoint_every`` in steps (0 = never); ``max_bad_steps``: stop after this many NaN
    steps in a row; ``max_staleness``: how many policy versions a trained datum may lag (0: the synchronous loop;
    k > 0: rollouts for steps t+1..t+k run while step t trains, docs/training.md "Asynchronous training")."""

    steps: int = 20
    batch_size: int = 4
    eval_every: int = 5
    checkpoint_every: int = 5
    eval_at_start: bool = True
    eval_temperature: float = 0.0
    max_bad_steps: int = 3
    keep_checkpoints: int = 2
    seed: int = 0
    max_staleness: int = 0


@attrs.define
class LoggingConfig:
    """Where metrics go: jsonl always; TensorBoard and Weights & Biases when enabled; ``loggers`` names more
    registered loggers (``register_loggers``: the built-ins ``jsonl``, ``tensorboard``, ``wandb`` or a
    plugin's; not ``run``, the run's own logger that writes to all of them)."""

    jsonl: bool = True
    tensorboard: bool = False
    wandb: bool = False
    loggers: list[str] = attrs.Factory(list)
    wandb_project: str = "skyrl"
    trajectories_html: int = 8


EVAL_SELECTIONS = ("vote", "first")  # reward-free ways to pick one sample per instance (EvalConfig.selection)


@attrs.define
class EvalConfig:
    """What ``skyrl eval`` writes besides its metrics. ``selection``: how an eval writer that needs one answer per
    instance (a ``register_eval_writers`` output, e.g. a benchmark's predictions file) picks it among the
    ``sampling.n_samples`` samples without reading any reward: ``vote`` (the answer most samples gave, ties to the
    lowest sample index; empty answers vote only when every sample is empty) or ``first`` (sample 0).
    ``oracle_best_of_n``: such a writer also writes the best-rewarded sample per instance to a separate file named
    for it (``oracle-best-of-N`` in its name): an upper bound that read the hidden tests, never a pass@1."""

    selection: str = "vote"
    oracle_best_of_n: bool = False


@attrs.define
class Config:
    """A whole run. ``model``: ``smollm2-135m-instruct`` (bundled), a local HF directory, or a served name.
    ``plugins``: a section per plugin, by name (``plugins.ray.address``), read and checked by that plugin."""

    model: str = "smollm2-135m-instruct"
    engine: EngineConfig = attrs.Factory(EngineConfig)
    tasks: list[TaskConfig] = attrs.Factory(lambda: [TaskConfig(name="gsm8k")])
    agent: AgentConfig = attrs.Factory(AgentConfig)
    sampling: SamplingConfig = attrs.Factory(SamplingConfig)
    dispatcher: DispatcherConfig = attrs.Factory(DispatcherConfig)
    backend: BackendConfig = attrs.Factory(BackendConfig)
    train: TrainConfig = attrs.Factory(TrainConfig)
    logging: LoggingConfig = attrs.Factory(LoggingConfig)
    eval: EvalConfig = attrs.Factory(EvalConfig)
    seed: int = 0
    plugins: dict[str, dict[str, Any]] = attrs.Factory(dict)

    def to_dict(self) -> dict:
        return _converter.unstructure(self)


# Sections whose plain-word assignment sets their ``type``.
TYPED_SECTIONS = {"engine", "dispatcher", "backend", "runtime"}

_converter = cattrs.Converter(forbid_extra_keys=True)
_converter.register_structure_hook(tuple, lambda v, t: tuple(v))
_ENV = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def _strip_optional(tp: Any) -> Any:
    args = typing.get_args(tp)
    if args and type(None) in args:
        rest = [a for a in args if a is not type(None)]
        if len(rest) == 1:
            return rest[0]
    return tp


def _check_keys(cls: type, data: Any, path: str) -> None:
    """Raise ConfigError for the first unknown key, naming its path and the valid keys (with a suggestion)."""
    if not attrs.has(cls) or not isinstance(data, dict):
        return
    fields = {f.name: f for f in attrs.fields(cls)}
    hints = typing.get_type_hints(cls)
    for key, value in data.items():
        where = f"{path}.{key}" if path else str(key)
        if key not in fields:
            close = difflib.get_close_matches(str(key), fields, n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            raise ConfigError(f"unknown config key '{where}'{hint}; valid keys{' in ' + repr(path) if path else ''}: "
                              f"{', '.join(sorted(fields))}")
        tp = _strip_optional(hints[key])
        origin = typing.get_origin(tp)
        if attrs.has(tp):
            _check_keys(tp, value, where)
        elif origin is list and isinstance(value, list):
            (item,) = typing.get_args(tp) or (Any,)
            for i, v in enumerate(value):
                _check_keys(_strip_optional(item), v, f"{where}.{i}")


def interpolate_env(data: Any, path: str = "") -> Any:
    """Replace ``${VAR}`` / ``${VAR:-default}`` in strings; a missing variable is a ConfigError naming the key.
    Any other ``$`` text (a shell snippet's ``${d%/}``) is left as written.

    Not OmegaConf's interpolation (2.4.0 tried): there ``${VAR}`` names a config key, not an environment
    variable, and ``${VAR:-default}`` (the shell's form, used by the shipped examples) calls a resolver named VAR
    (``Unsupported interpolation type``); its grammar also applies to every string, so shell text in an option
    (``echo ${d%/}``) fails to resolve, and a default holding a comma is split into two arguments.
    ``test_env_interpolation_leaves_shell_text_and_takes_defaults_whole`` holds these cases."""
    if isinstance(data, dict):
        return {k: interpolate_env(v, f"{path}.{k}" if path else str(k)) for k, v in data.items()}
    if isinstance(data, list):
        return [interpolate_env(v, f"{path}.{i}") for i, v in enumerate(data)]
    if isinstance(data, str):
        def sub(m: re.Match) -> str:
            value = os.environ.get(m.group(1))
            if value is None:
                if m.group(2) is not None:
                    return m.group(2)
                raise ConfigError(f"config key '{path}' uses ${{{m.group(1)}}} but the environment variable "
                                  f"{m.group(1)} is not set (write ${{{m.group(1)}:-default}} for a default)")
            return value

        return _ENV.sub(sub, data)
    return data


def apply_override(data: dict, override: str) -> None:
    """Apply one ``key.sub=value`` override in place; the value is parsed as YAML (``4``, ``true``, ``[a, b]``).
    Raises ConfigError naming the override for a malformed one, an index out of range, a value addressed as a
    section, and ``data.*``/``runtime.*`` with more than one task.

    Not ``OmegaConf.update`` (2.4.0 tried): it silently turns a value into a section (``train.steps.x=1`` on
    ``steps: 3`` makes ``steps: {x: 1}``; here an error, ``test_override_into_a_value_is_an_error``), and the
    single-task aliases (``data.limit``) and typed-section shorthand (``backend.lr`` on ``backend: verl``) would
    still be ours around it."""
    if "=" not in override:
        raise ConfigError(f"override '{override}' is not of the form key.sub=value (e.g. train.steps=1)")
    key, raw = override.split("=", 1)
    key = key.strip()
    if not key or any(not part for part in key.split(".")):
        raise ConfigError(f"override '{override}': empty key segment in '{key}'")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError as exc:
        raise ConfigError(f"override '{override}': value is not valid YAML: {exc}") from None
    parts = key.split(".")
    if parts[0] in ("data", "eval_data", "runtime"):  # the single task's sections (runtime.type=docker)
        tasks = data.setdefault("tasks", [{"name": "gsm8k"}])
        if len(tasks) != 1:
            raise ConfigError(f"override '{override}': '{parts[0]}.*' is ambiguous with {len(tasks)} tasks; "
                              f"write tasks.N.{key}")
        parts = ["tasks", "0"] + parts
    node: Any = data
    for i, part in enumerate(parts[:-1]):
        here = ".".join(parts[: i + 1])
        if isinstance(node, list):
            if not part.isdigit() or int(part) >= len(node):
                raise ConfigError(f"override '{override}': '{here}' needs an index below {len(node)}")
            node = node[int(part)]
            continue
        nxt = node.get(part)
        if nxt is None:
            nxt = node[part] = {}
        elif isinstance(nxt, str) and part in TYPED_SECTIONS:
            nxt = node[part] = {"type": nxt}
        elif not isinstance(nxt, (dict, list)):
            raise ConfigError(f"override '{override}': '{here}' is a value ({nxt!r}), not a section")
        node = nxt
    last = parts[-1]
    if isinstance(node, list):
        if not last.isdigit() or int(last) >= len(node):
            raise ConfigError(f"override '{override}': index '{last}' out of range (0..{len(node) - 1})")
        node[int(last)] = value
    elif last in TYPED_SECTIONS and isinstance(value, str):
        existing = node.get(last)
        node[last] = {**existing, "type": value} if isinstance(existing, dict) else {"type": value}
    else:
        node[last] = value


def _normalise(data: dict) -> dict:
    """Accept shorthand: ``engine: hf`` for ``engine: {type: hf}``; ``tasks: [gsm8k]`` for ``[{name: gsm8k}]``."""
    for key in ("engine", "dispatcher", "backend"):
        if isinstance(data.get(key), str):
            data[key] = {"type": data[key]}
    if isinstance(data.get("tasks"), list):
        data["tasks"] = [{"name": t} if isinstance(t, str) else t for t in data["tasks"]]
        for t in data["tasks"]:
            if isinstance(t, dict) and isinstance(t.get("runtime"), str):
                t["runtime"] = {"type": t["runtime"]}
    return data


def _describe(exc: BaseException, tp: Any) -> str:
    args = typing.get_args(tp)
    if typing.get_origin(tp) is Literal or (args and all(isinstance(a, str) for a in args)):
        return f"must be one of {', '.join(map(str, args))}"
    name = getattr(_strip_optional(tp), "__name__", str(tp))
    if isinstance(exc, (ValueError, TypeError)):
        return f"expected {name}"
    if isinstance(exc, KeyError):
        return f"required key {exc} is missing"
    return f"invalid value ({type(exc).__name__}: {exc}), expected {name}"


_MISSING = object()


def _value_at(data: Any, where: str) -> Any:
    """The value under dotted key path ``where`` in plain ``data`` (list indices as numbers), or _MISSING."""
    node = data
    for part in where.split(".") if where else []:
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return _MISSING
    return node


def _shown(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _format_cattrs_error(exc: Exception, data: Any = None) -> str:
    """One ``config key 'a.b': expected int, got 'abc'`` clause per error in ``exc``; the value given is
    looked up in ``data`` (the structured input) and shown cut to 80 characters."""
    messages = cattrs.transform_error(exc, path="", format_exception=_describe)
    out = []
    for msg in messages:
        text, _, where = msg.rpartition(" @ ")
        where = where.lstrip(".").replace("[", ".").replace("]", "").replace("'", "")
        value = _value_at(data, where)
        given = f", got {_shown(value)}" if value is not _MISSING and text.startswith("expected") else ""
        out.append(f"config key '{where}': {text}{given}")
    return "; ".join(out)


def config_from_dict(data: dict) -> Config:
    """Build a Config from plain data, raising ConfigError with key paths for any problem."""
    if not isinstance(data, dict):
        raise ConfigError(f"a config must be a mapping of keys to values, got {type(data).__name__}")
    data = _normalise(interpolate_env(data))
    if "ray" in data:  # the section a plugin owns now (docs/scale-out.md)
        raise ConfigError("config key 'ray' is now 'plugins.ray' (the skyrl-ray plugin reads it); move the section "
                          "there, or on the command line write plugins.ray.address=... for ray.address=...")
    _check_keys(Config, data, "")
    try:
        config = _converter.structure(data, Config)
    except (cattrs.BaseValidationError, ValueError, TypeError) as exc:
        if isinstance(exc, cattrs.BaseValidationError):
            raise ConfigError(_format_cattrs_error(exc, data)) from None
        raise ConfigError(f"invalid config: {exc}") from None
    validate_values(config)
    return config


def _merged(section: Any, override: dict[str, Any] | None, cls: type, where: str) -> Any:
    """``section`` (an attrs instance) with the keys of ``override`` replaced, validated as ``cls``."""
    if not override:
        return section
    if not isinstance(override, dict):
        raise ConfigError(f"config key '{where}' must be a mapping of {cls.__name__} keys to values")
    _check_keys(cls, override, where)
    data = _converter.unstructure(section)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(data.get(key), dict):
            data[key] = {**data[key], **value}
        else:
            data[key] = value
    try:
        return _converter.structure(data, cls)
    except (cattrs.BaseValidationError, ValueError, TypeError) as exc:
        if isinstance(exc, cattrs.BaseValidationError):
            message = _format_cattrs_error(exc, data)
            raise ConfigError(message.replace("config key '", f"config key '{where}.")) from None
        raise ConfigError(f"config key '{where}': {exc}") from None


def task_agent_config(config: Config, index: int) -> AgentConfig:
    """The agent settings of ``config.tasks[index]``: the run's ``agent`` with the task's ``agent`` keys and its
    ``parser`` applied. Raises ConfigError naming ``tasks.N.agent.<key>`` for an unknown key or a wrong type."""
    tc = config.tasks[index]
    agent = _merged(config.agent, tc.agent, AgentConfig, f"tasks.{index}.agent")
    if tc.parser is not None:
        agent = attrs.evolve(agent, parser=tc.parser)
    return agent


def task_sampling_config(config: Config, index: int) -> SamplingConfig:
    """The sampling settings of ``config.tasks[index]``: the run's ``sampling`` with the task's ``sampling``
    keys applied. Raises ConfigError for an unknown key, a wrong type, or ``n_samples`` (a run-wide setting:
    every step samples each instance the same number of times)."""
    tc = config.tasks[index]
    if tc.sampling and "n_samples" in tc.sampling:
        raise ConfigError(f"config key 'tasks.{index}.sampling.n_samples': n_samples is per run (sampling.n_samples)"
                          f"; a task may override temperature, top_p, top_k, max_tokens, seed")
    return _merged(config.sampling, tc.sampling, SamplingConfig, f"tasks.{index}.sampling")


def validate_values(config: Config) -> None:
    """Range checks the types cannot express, then every registered config check (``register_config_checks``)."""
    for i in range(len(config.tasks)):  # per-task overrides: unknown keys and wrong types fail at load time
        task_agent_config(config, i)
        task_sampling_config(config, i)
    checks = [
        ("agent.max_turns", config.agent.max_turns >= 1, "at least 1"),
        ("agent.max_context_tokens", config.agent.max_context_tokens >= 16, "at least 16 tokens"),
        ("sampling.n_samples", config.sampling.n_samples >= 1, "at least 1"),
        ("sampling.max_tokens", config.sampling.max_tokens >= 1, "at least 1"),
        ("sampling.temperature", config.sampling.temperature >= 0, "0 (greedy) or more"),
        ("dispatcher.max_parallel_agents", config.dispatcher.max_parallel_agents >= 1, "at least 1"),
        ("engine.max_batch", config.engine.max_batch >= 1, "at least 1"),
        ("train.steps", config.train.steps >= 0, "0 or more"),
        ("train.batch_size", config.train.batch_size >= 1, "at least 1"),
        ("train.max_staleness", config.train.max_staleness >= 0, "0 (synchronous) or more"),
        ("backend.lr", config.backend.lr > 0, "a positive number"),
        ("backend.clip", config.backend.clip > 0, "a positive number"),
        ("tasks", len(config.tasks) >= 1, "a list with at least one task"),
        ("eval.selection", config.eval.selection in EVAL_SELECTIONS,
         f"one of {', '.join(EVAL_SELECTIONS)} (reward-free; the oracle pick is eval.oracle_best_of_n: true)"),
    ]
    for key, ok, valid in checks:
        if not ok:
            raise ConfigError(f"config key '{key}' must be {valid}")
    from .plugins import get_registry

    for reg in get_registry().items("config_checks"):  # the keys a built-in or plugin reads: it checks them
        reg.obj(config)


def _from_config_sources(name: str) -> Path | None:
    """The file the first registered config source that knows ``name`` gives, or None (a source's ConfigError,
    naming what it has, propagates)."""
    from .plugins import get_registry

    for reg in get_registry().items("config_sources"):
        found = reg.obj(name)
        if found is not None:
            return Path(found)
    return None


def load_config(path: str | os.PathLike | None, overrides: list[str] | tuple[str, ...] = (),
                check: Callable[[dict, list[str]], list[str]] | None = None) -> Config:
    """Read a YAML config (or the built-in defaults when ``path`` is None) and apply overrides. ``check(data,
    overrides)`` (a command's: ``skyrl eval``'s refuses ``data.limit`` on a task with ``eval_data``,
    :mod:`skyrl_core.default_plugins.eval.overrides`) sees the config as read, normalised, before the overrides
    apply: it raises ConfigError for an override that cannot do what it says, and returns warnings, which are
    logged. A ``path`` that is no file is looked up in
    the registered config sources (``register_config_sources``; the built-in one finds an example an installed
    plugin ships, ``deep-research:hotpotqa``)."""
    data: Any = {}
    if path is not None:
        p = Path(path)
        if not p.is_file():
            p = path = _from_config_sources(str(path)) or p
        if not p.is_file():
            raise ConfigError(f"config file '{path}' does not exist")
        try:
            data = yaml.safe_load(p.read_text()) or {}
        except yaml.YAMLError as exc:
            raise ConfigError(f"config file '{path}' is not valid YAML: {exc}") from None
        if not isinstance(data, dict):
            raise ConfigError(f"config file '{path}' must hold a mapping at the top level")
    data = _normalise(data)
    data.setdefault("tasks", [{"name": "gsm8k"}])
    if check is not None:
        for warning in check(data, list(overrides)):
            logging.getLogger(__name__).warning("%s", warning)
    for override in overrides:
        apply_override(data, override)
    return config_from_dict(data)


def config_to_yaml(config: Config) -> str:
    return yaml.safe_dump(config.to_dict(), sort_keys=False)
