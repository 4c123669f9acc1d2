"""Every skyrl hook. Each receives a ``register`` callback, ``register(obj, name=None)``
(:class:`skyrl_core.plugins.Registrar`); what each kind must register is its contract in :mod:`skyrl_core.contracts`,
checked at registration. Hooks are called through pluggy, so ``wrapper=True`` hookimpls and ``tryfirst``/``trylast``
work (``docs/hooks.md``)."""

import pluggy

hookspec = pluggy.HookspecMarker("skyrl")
hookimpl = pluggy.HookimplMarker("skyrl")


@hookspec
def register_tools(register):
    """Register Tool instances (name from ``tool.name``)."""


@hookspec
def register_instruction_builders(register):
    """Register instruction builders: ``(instance, task) -> list[message]``."""


@hookspec
def register_verifiers(register):
    """Register verifiers: ``(trajectory, runtime, instance) -> VerifierResult`` (sync or async)."""


@hookspec
def register_tasks(register):
    """Register Task definitions (data loader, instruction builder, tools, runtime, verifier)."""


@hookspec
def register_dispatchers(register):
    """Register dispatcher classes, constructed as ``(DispatcherConfig, EngineStats) -> Dispatcher``."""


@hookspec
def register_inference_engines(register):
    """Register inference-engine factories ``(Config) -> Engine``: they receive the whole run config."""


@hookspec
def register_runtimes(register):
    """Register runtime classes, constructed as ``(RuntimeSpec) -> Runtime`` (then ``start``, ``exec``, ``close``)."""


@hookspec
def register_backends(register):
    """Register training-backend factories ``(Config, Engine | None) -> Backend``: whole run config, its engine."""


@hookspec
def register_parsers(register):
    """Register tool-call parsers: objects (or classes) with ``parse(text, finish_reason) -> ParseResult``."""


@hookspec
def register_commands(register):
    """Register CLI subcommands: a click command or a typer app, named by ``name``."""


@hookspec
def register_advantage_estimators(register):
    """Register advantage estimators: ``(rewards, group_ids, std_normalize) -> list[float]``, named by ``name``."""


@hookspec
def register_policy_losses(register):
    """Register policy losses: ``(logprobs, old_logprobs, advantages, mask, config, **kw) -> (loss, metrics)``."""


@hookspec
def register_loggers(register):
    """Register metric-logger factories ``(Path, Config | None) -> logger`` (run directory, run config)."""


@hookspec
def register_eval_writers(register):
    """Register eval output writers ``(Path, list[Trajectory], Config) -> dict[str, Path]``, named by ``name``."""


@hookspec
def register_config_checks(register):
    """Register config checks ``(Config) -> None`` raising ConfigError: a built-in's or plugin's keys, at load."""


@hookspec
def register_config_sources(register):
    """Register config sources ``(name) -> Path | None``: where a config named by other than a file path is."""


@hookspec
def register_placements(register):
    """Register placements (skyrl_core.placement.Placement): where runtimes, tools, verifiers and engine replicas run."""


@hookspec
def register_chat_formats(register):
    """Register chat formats ``(tokenizer, keep_thinking=, template_kwargs=) -> ChatFormat``; rollouts use ``default``."""


@hookspec
def register_engine_builders(register):
    """Register engine builders ``(Config, Registry) -> Engine`` (awaited); the rollout session asks for ``default``."""


@hookspec
def register_harness_runners(register):
    """Register harness runners ``(Engine, ChatFormat, parser) -> runner``; tasks with a ``harness`` use ``default``."""


@hookspec
def register_format_detectors(register):
    """Register format detectors ``(text, tools) -> (parser, format) | None``; the agent loop asks for ``default``."""


@hookspec
def register_async_loops(register):
    """Register asynchronous loops (check, producer); a run with ``train.max_staleness`` > 0 asks for ``async``."""
