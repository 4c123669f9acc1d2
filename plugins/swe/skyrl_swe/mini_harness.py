"""mini-swe-agent (the ``mini-swe-agent`` 2.4.6 package, unmodified) as the run stage of the ``mini_swe_agent``
task: its own agent loop (``DefaultAgent``), its own model class (litellm, pointed at the trajectory's recording
gateway session) and its own prompt config, with its commands executed by skyrl's runtime.

Where each part runs:

- the agent loop and litellm run in this process (a worker thread), so no model-written text ever reaches a host
  shell: mini-swe-agent's only path to a shell is its environment's ``execute``;
- the environment is :class:`RuntimeEnvironment`, mini-swe-agent's ``LocalEnvironment`` with ``execute``
  replaced: each command runs through the trajectory's runtime (``swe_sandbox``: bubblewrap, no network, the
  workspace the only writable tree; or ``docker``), never through ``subprocess`` on the host. mini-swe-agent
  chooses its environment by class (``environment_class`` in its configs), so this is its own extension point;
- every model call goes to the gateway session, which records it with the engine's exact token ids and logprobs
  (docs/gateway.md); the task's verifier (``swe_tests``) scores the workspace afterwards.

Settings (``data.options.mini_swe_agent`` in a run config, all optional): ``config`` (a config file mini-swe-agent
ships, default ``mini_textbased.yaml``: one fenced ``mswea_bash_command`` block per reply, no tool calling, which a
small model can follow), ``model_class`` (mini-swe-agent's model class name, default ``litellm_textbased``; use
``litellm`` with a tool-calling config such as ``mini.yaml``), ``step_limit`` (model calls, default 3),
``command_timeout_s`` (one command's bound, default 60), ``call_timeout_s`` (how long litellm waits for one model
call, default 3600: a call is sent once and waited for, never resent while it is still generating).
"""

from __future__ import annotations

import asyncio
import os
import threading
from typing import Any

MODEL_NAME = "skyrl"  # litellm's provider prefix picks its OpenAI client; the gateway serves whichever engine it fronts
DEFAULTS: dict[str, Any] = {"config": "mini_textbased.yaml", "model_class": "litellm_textbased", "step_limit": 3,
                            "command_timeout_s": 60, "call_timeout_s": 3600}


def _mini() -> Any:
    """The ``minisweagent`` package, imported quietly and offline: no banner on stdout
    (``MSWEA_SILENT_STARTUP``), litellm's bundled model table instead of its download at import
    (``LITELLM_LOCAL_MODEL_COST_MAP``), no cost table needed for a local model (``MSWEA_COST_TRACKING``) and one
    retry of a failed call, not ten over minutes (``MSWEA_MODEL_RETRY_STOP_AFTER_ATTEMPT``: the gateway answers a
    retry of a lost call by replacing it), litellm's debug banners off. Each variable is set only when the environment does not set it already."""
    for key, value in (("MSWEA_SILENT_STARTUP", "1"), ("LITELLM_LOCAL_MODEL_COST_MAP", "True"),
                       ("MSWEA_COST_TRACKING", "ignore_errors"), ("MSWEA_MODEL_RETRY_STOP_AFTER_ATTEMPT", "2")):
        os.environ.setdefault(key, value)
    try:
        import minisweagent
        import minisweagent.agents.default  # noqa: F401
        import minisweagent.environments.local  # noqa: F401
        import minisweagent.models  # noqa: F401
        import litellm
    except ImportError as exc:
        raise ImportError("the mini_swe_agent task needs the 'mini-swe-agent' package: "
                          "pip install 'skyrl-swe[mini]' (mini-swe-agent==2.4.6)") from exc
    litellm.suppress_debug_info = True  # else each call's cost lookup for the unpriced local model prints a banner
    return minisweagent


def settings(options: dict[str, Any] | None) -> dict[str, Any]:
    """The harness settings: :data:`DEFAULTS` updated with ``options``. Raises ValueError naming an unknown key or
    a bad value, and listing the valid keys."""
    options = dict(options or {})
    unknown = sorted(set(options) - set(DEFAULTS))
    if unknown:
        raise ValueError(f"data.options.mini_swe_agent: unknown key(s) {unknown}; valid: {sorted(DEFAULTS)}")
    out = {**DEFAULTS, **options}
    for key in ("step_limit", "command_timeout_s", "call_timeout_s"):
        if not isinstance(out[key], (int, float)) or isinstance(out[key], bool) or out[key] <= 0:
            raise ValueError(f"data.options.mini_swe_agent.{key} must be a positive number, got {out[key]!r}")
    return out


def _config(name: str) -> dict[str, Any]:
    import yaml
    from minisweagent.config import builtin_config_dir

    path = builtin_config_dir / name
    if not path.is_file():
        shipped = sorted(p.name for p in builtin_config_dir.glob("*.yaml"))
        raise ValueError(f"data.options.mini_swe_agent.config {name!r} is not a config mini-swe-agent ships; "
                         f"valid: {', '.join(shipped)}")
    return yaml.safe_load(path.read_text()) or {}


def _environment_class() -> type:
    from minisweagent.environments.local import LocalEnvironment

    class RuntimeEnvironment(LocalEnvironment):
        """mini-swe-agent's local environment with its one host-shell step, ``execute``, replaced: the command runs
        through the trajectory's skyrl runtime (awaited on the rollout's event loop from the agent's thread).
        ``stop`` set (the run stage ended: timeout or cancel) refuses every later command."""

        def __init__(self, *, runtime: Any, loop: asyncio.AbstractEventLoop, stop: threading.Event,
                     **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.runtime, self.loop, self.stop = runtime, loop, stop

        def execute(self, action: dict, cwd: str = "", *, timeout: int | None = None) -> dict[str, Any]:
            if self.stop.is_set():
                raise RuntimeError("the run stage ended: no more commands")
            bound = float(timeout or self.config.timeout)
            call = self.runtime.exec(action.get("command", ""), timeout_s=bound, env=dict(self.config.env))
            result = asyncio.run_coroutine_threadsafe(call, self.loop).result()
            output = {"output": result.output, "returncode": result.exit_code if result.exit_code is not None else -1,
                      "exception_info": ""}
            if result.timed_out or result.limits:
                output["exception_info"] = (f"the command was stopped: it ran past {bound:g} s" if result.timed_out
                                            else f"the command hit the sandbox's limits: {', '.join(result.limits)}")
            self._check_finished(output)  # mini-swe-agent's own submission rule (raises Submitted)
            return output

    return RuntimeEnvironment


async def run_mini_swe_agent(base_url: str, trajectory: Any, runtime: Any, instance: Any = None,
                             sampling: Any = None) -> None:
    """The harness of the ``mini_swe_agent`` task (``Task.harness``, docs/gateway.md): mini-swe-agent's
    ``DefaultAgent.run`` on the instance's ``problem_statement``, its model litellm's OpenAI client on
    ``base_url`` (the trajectory's gateway session), its commands run by ``runtime``. ``sampling`` (the run's
    ``SamplingParams``) gives each call's ``temperature``, ``top_p``, ``max_tokens`` and ``seed``.

    Leaves ``mini_exit_status`` (``Submitted``, ``LimitsExceeded``, ``RepeatedFormatError``, ...) and
    ``mini_steps`` (model calls) in ``trajectory.metrics``. Raises what the agent raised (the run then ends
    ``error_run``, masked); ValueError for bad ``data.options.mini_swe_agent``."""
    _mini()
    from minisweagent.agents.default import DefaultAgent
    from minisweagent.models import get_model

    data = instance.data if instance is not None else {}
    opts = settings(data.get("mini_swe_agent"))
    config = _config(opts["config"])
    knobs = {} if sampling is None else {k: v for k, v in (("temperature", sampling.temperature),
                                                           ("top_p", sampling.top_p), ("max_tokens", sampling.max_tokens),
                                                           ("seed", sampling.seed)) if v is not None}
    model_config = {**config.get("model", {}), "model_class": opts["model_class"], "cost_tracking": "ignore_errors"}
    # one HTTP request per call, waited for as long as the engine takes: a client that times out and resends while
    # the first request is still generating is refused by the session (409 session_busy), so litellm's 600 s
    # default and the OpenAI client's own two retries would turn a slow call on a loaded machine into an error
    model_config["model_kwargs"] = {**model_config.get("model_kwargs", {}), **knobs, "api_base": base_url,
                                    "api_key": os.environ.get("SKYRL_GATEWAY_TOKEN") or "skyrl-gateway",
                                    "timeout": float(opts["call_timeout_s"]), "max_retries": 0}
    model = get_model(f"openai/{MODEL_NAME}", model_config)
    env_config = {k: v for k, v in config.get("environment", {}).items() if k in ("env", "timeout")}
    env_config["timeout"] = int(opts["command_timeout_s"])
    stop = threading.Event()
    env = _environment_class()(runtime=runtime, loop=asyncio.get_running_loop(), stop=stop, **env_config)
    agent_config = {**config.get("agent", {}), "step_limit": int(opts["step_limit"]), "cost_limit": 0.0,
                    "output_path": None}
    agent = DefaultAgent(model, env, **agent_config)
    try:
        result = await asyncio.to_thread(agent.run, data.get("problem_statement", ""))
    finally:
        stop.set()
        trajectory.metrics["mini_steps"] = agent.n_calls
    trajectory.metrics["mini_exit_status"] = result.get("exit_status", "")
