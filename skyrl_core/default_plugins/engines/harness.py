"""The run stage of an external harness (docs/gateway.md, "External harnesses"): an agent skyrl did not write
runs against a recording-gateway session, and the session's transitions become the trajectory.

:func:`run_harness` opens a session on a started :class:`~.gateway.Gateway`, starts the harness with
``OPENAI_BASE_URL`` pointing at that session, waits for it within a bound, ends the session and fills the
trajectory: its transitions (exact token ids and logprobs, as the gateway recorded them), its last messages, its
turns and the gateway's metrics (``gateway_*``). The init and eval stages stay the dispatcher's: the runtime is
started and the verifier run around this stage as for any task.

A harness is either a Python callable ``harness(base_url, trajectory, runtime)`` (sync callables run in a
worker thread; an async one is awaited) or a command (a string for ``sh -c``, or an argv list) executed in the
task's runtime, so its file and shell actions touch the task's workspace, with ``OPENAI_BASE_URL``,
``OPENAI_API_BASE`` (older clients, litellm) and ``OPENAI_API_KEY`` set. A sandboxed command reaches the gateway
only when the runtime has ``network: true``.

Finish reasons (every failure is loss-masked; the trajectory keeps what the session recorded):

- ``finished``: the harness returned (a command: exit code 0) after at least one model call;
- ``timeout``: it ran past ``timeout_s`` (a command is killed by the runtime; a sync callable's thread cannot be
  killed and is abandoned, its later requests refused with 409 ``session_ended``);
- ``error_run``: it raised, or the command exited non-zero (the error names the exit code and the output's tail);
- ``no_llm_call``: it returned without ever calling the endpoint (nothing to train on; also masked).
"""

from __future__ import annotations

import asyncio
import inspect
import time
from typing import Any, Callable, Sequence

from skyrl_core.transitions import ERROR_RUN, FINISHED, TIMEOUT, Trajectory

NO_LLM_CALL = "no_llm_call"


async def run_harness(trajectory: Trajectory, *, gateway: Any, harness: Callable[..., Any] | str | Sequence[str],
                      runtime: Any = None, timeout_s: float = 600.0, env: dict[str, str] | None = None) -> None:
    """Run ``harness`` against a fresh session of ``gateway`` (started: :meth:`Gateway.start`) and fill
    ``trajectory`` in place (``transitions``, ``messages``, ``turns``, ``metrics``, ``finish_reason``, ``masked``,
    ``error``). ``runtime`` runs a command harness (required for one; ValueError without); ``timeout_s`` bounds
    the harness in seconds; ``env`` adds variables for a command. Never raises for a harness's failure;
    cancellation propagates (the session is ended first)."""
    if not callable(harness) and runtime is None:
        raise ValueError("a command harness runs in the task's runtime: pass runtime=")
    sid = gateway.open()  # a fresh URL-safe id; the trajectory's id may hold '#' or '/'
    trajectory.metrics["gateway_session"] = sid
    url = gateway.base_url(sid)
    t0 = time.perf_counter()
    failure: tuple[str, str] | None = None
    try:
        if callable(harness):
            failure = await _run_callable(harness, url, trajectory, runtime, timeout_s)
        else:
            failure = await _run_command(harness, url, runtime, timeout_s, gateway.token, env or {})
    finally:
        session = gateway.end(sid)
        trajectory.transitions[:] = list(session.transitions)
        trajectory.turns = len(session.transitions)
        trajectory.metrics.update({f"gateway_{k}": v for k, v in session.metrics.items()})
        trajectory.metrics["harness_s"] = time.perf_counter() - t0
        if session.messages:
            reply = session.replies[-1][0] if session.replies else None
            trajectory.messages = [dict(m) for m in session.messages] + ([dict(reply)] if reply else [])
    if failure is not None:
        trajectory.fail(*failure)
    elif not trajectory.transitions:
        trajectory.fail(NO_LLM_CALL, f"the harness finished without calling the model endpoint ({url})")
    else:
        trajectory.finish_reason = FINISHED
        trajectory.masked = False


async def _run_callable(harness: Callable[..., Any], url: str, trajectory: Trajectory, runtime: Any,
                        timeout_s: float) -> tuple[str, str] | None:
    if inspect.iscoroutinefunction(harness):
        call = harness(url, trajectory, runtime)
    else:
        call = asyncio.to_thread(harness, url, trajectory, runtime)
    try:
        await asyncio.wait_for(call, timeout_s)
    except (asyncio.TimeoutError, TimeoutError):
        return TIMEOUT, f"the harness ran past its bound of {timeout_s:g} s"
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        return ERROR_RUN, f"the harness raised {type(exc).__name__}: {exc}"[:2000]
    return None


async def _run_command(command: str | Sequence[str], url: str, runtime: Any, timeout_s: float,
                       token: str | None, env: dict[str, str]) -> tuple[str, str] | None:
    variables = {**env, "OPENAI_BASE_URL": url, "OPENAI_API_BASE": url, "OPENAI_API_KEY": token or "skyrl-gateway"}
    try:
        result = await runtime.exec(command if isinstance(command, str) else list(command), timeout_s=timeout_s,
                                    env=variables)
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # the runtime itself failed to run it
        return ERROR_RUN, f"the runtime could not run the harness: {type(exc).__name__}: {exc}"[:2000]
    if result.timed_out:
        return TIMEOUT, f"the harness command ran past its bound of {timeout_s:g} s"
    if result.exit_code != 0:
        tail = (result.output or "")[-1500:]
        limits = f" (limits hit: {', '.join(result.limits)})" if result.limits else ""
        return ERROR_RUN, f"the harness command exited with {result.exit_code}{limits}; output tail:\n{tail}"
    return None


class HarnessRunner:
    """The run stage for a rollout session whose tasks name external harnesses: one recording gateway
    (``require_open``, 127.0.0.1, a free port) around the session's ``engine``, ``chat`` format and ``parser``,
    started on first use in the running event loop and shared by every trajectory (one session each).

    ``await runner.run(trajectory, harness, runtime, timeout_s)`` is :func:`run_harness`; ``await runner.close()``
    stops the gateway (the engine stays the caller's)."""

    def __init__(self, engine: Any, chat: Any, parser: Any, token: str | None = None) -> None:
        self.engine, self.chat, self.parser, self.token = engine, chat, parser, token
        self.gateway: Any = None
        self._lock = asyncio.Lock()

    async def _started(self) -> Any:
        async with self._lock:
            if self.gateway is None:
                from .gateway import Gateway

                gateway = Gateway(self.engine, self.chat, self.parser, require_open=True, token=self.token)
                await gateway.start()
                self.gateway = gateway
        return self.gateway

    async def run(self, trajectory: Trajectory, harness: Callable[..., Any] | str | Sequence[str],
                  runtime: Any = None, timeout_s: float = 600.0, env: dict[str, str] | None = None) -> None:
        """:func:`run_harness` on this runner's gateway (started here on first use)."""
        await run_harness(trajectory, gateway=await self._started(), harness=harness, runtime=runtime,
                          timeout_s=timeout_s, env=env)

    async def close(self) -> None:
        """Stop the gateway if it was started; the recorded sessions stay readable on ``gateway``."""
        if self.gateway is not None:
            await self.gateway.stop()
