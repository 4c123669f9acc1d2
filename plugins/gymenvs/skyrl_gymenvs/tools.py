"""The ``gym_step`` tool: one action of the agent, handed as text to the trajectory's skyrl-gym environment.

skyrl-gym's envs are text-in/text-out (``BaseTextEnv.step(action: str)``): each parses the model's whole reply for
its own markup (``#### 42`` for gsm8k, ``<search>...</search>`` / ``<answer>...</answer>`` for search,
``<sql>...</sql>`` / ``<solution>...</solution>`` for text2sql). skyrl's agent loop acts through tool calls, so the
mapping is one tool whose only argument, ``action``, is that reply text: the env's step reads it exactly as it
would read a completion. The tool's result is the env's observation messages (their contents joined); when the
env reports ``done`` the tool ends the trajectory (its action is the trajectory's answer). The reward is not shown
to the model; the ``gymenv_reward`` verifier reads it from the runtime.
"""

from __future__ import annotations

from skyrl_core import Tool, ToolContext, ToolResult

from .runtime import ActionRefused, EnvDone

MAX_ACTION_CHARS = 20000


async def gym_step(args: dict, ctx: ToolContext) -> ToolResult:
    runtime = ctx.runtime
    if not hasattr(runtime, "step") or getattr(runtime, "name", None) != "gymenv":
        return ToolResult(output="Error: gym_step acts only in a gymenvs task (runtime 'gymenv').", error=True)
    try:
        out = await runtime.step(args["action"])
    except EnvDone as exc:
        return ToolResult(output=f"Error: {exc}.", error=True, finish=True)
    except ActionRefused as exc:
        return ToolResult(output=f"Error: {exc}. Nothing was run; the turn is not counted.", error=True,
                          metadata={"refused": True})
    except Exception as exc:  # the env's own failure: shown to the model, recorded for the metrics
        return ToolResult(output=f"Error: the environment failed on this action: {type(exc).__name__}: {exc}",
                          error=True, metadata={"env_error": type(exc).__name__})
    text = "\n".join(str(m.get("content", "")) for m in out["observations"] if isinstance(m, dict)).strip()
    meta = {"env_reward": out["reward"], "env_done": out["done"]}
    if out["done"]:
        return ToolResult(output=text or "The environment has finished.", finish=True, answer=args["action"],
                          metadata=meta)
    return ToolResult(output=text or "(the environment returned no observation)", metadata=meta)


gym_step_tool = Tool(
    name="gym_step",
    description=("Act in the environment: `action` is your reply, written exactly as the instructions ask (with "
                 "the tags or the '####' marker they name). The environment's answer comes back as the result; "
                 "it ends the episode when the task is complete."),
    parameters={
        "type": "object",
        "properties": {"action": {"type": "string", "maxLength": MAX_ACTION_CHARS,
                                  "description": "your reply to the environment, in the format it asks for"}},
        "required": ["action"],
        "additionalProperties": False,
    },
    handler=gym_step,
    finishes=True,
)
