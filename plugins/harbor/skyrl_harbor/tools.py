"""The ``terminal`` tool: one bash command in the trajectory's runtime (the task's sandbox), as Harbor's agents
drive a terminal. The command starts in the task's WORKDIR; its output (stdout and stderr together, capped by the
runtime) and exit code come back, and each limit it hit is named."""

from skyrl_core import Tool, ToolContext, ToolResult


async def run_terminal(args: dict, ctx: ToolContext) -> ToolResult:
    """Run ``args["command"]`` with ``bash -c`` in ``ctx.runtime``; ``timeout_s`` (seconds) defaults to the
    agent's tool timeout. Errors (no runtime, non-zero exit, a limit) come back as an error result, never raised."""
    runtime = ctx.runtime
    if runtime is None:
        return ToolResult(output="the terminal tool needs a runtime, but this trajectory has none", error=True)
    timeout = float(args.get("timeout_s") or ctx.store.get("_tool_timeout_s", 30.0))
    result = await runtime.exec(args["command"], timeout_s=timeout)
    output = result.output.rstrip()
    meta = {"exit_code": result.exit_code, "timed_out": result.timed_out, "limits": list(result.limits)}
    if result.limits or result.timed_out or result.exit_code != 0:
        note = f"[exit code {result.exit_code}]" if result.exit_code not in (None, 0) else ""
        return ToolResult(output=f"{output}\n{note}".strip() or "[no output]", error=True, metadata=meta)
    return ToolResult(output=output or "[no output; exit code 0]", metadata=meta)


terminal_tool = Tool(
    name="terminal",
    description="Run a bash command in the task's environment (starting in its working directory) and return "
                "its output and exit code.",
    parameters={
        "type": "object",
        "properties": {
            "command": {"type": "string", "maxLength": 20000, "description": "the bash command line to run"},
            "timeout_s": {"type": "number", "minimum": 1, "maximum": 600, "description": "seconds (optional)"},
        },
        "required": ["command"],
        "additionalProperties": False,
    },
    handler=run_terminal,
)
