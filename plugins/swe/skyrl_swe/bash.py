"""The ``bash`` tool: one shell command in the trajectory's runtime.

stdin is closed and pagers are disabled (``PAGER=cat``, ``GIT_PAGER=cat``, ``MANPAGER=cat``, no git prompts), so an
interactive program ends instead of waiting; a command that runs past its timeout is killed with its process
group and the output it produced is returned with a note; long output keeps its head and tail with a note of
what was cut. Processes a command leaves in the background are killed when the runtime closes at the end of the
trajectory.
"""

from __future__ import annotations

from skyrl_core import Tool, ToolContext, ToolResult
from skyrl_core.runtime import truncate_output

from .runtime import prepare_for_tool

DEFAULT_TIMEOUT_S = 120.0
MAX_TIMEOUT_S = 1800.0
MAX_OUTPUT_CHARS = 10000

NONINTERACTIVE_ENV = {
    "PAGER": "cat", "GIT_PAGER": "cat", "MANPAGER": "cat", "SYSTEMD_PAGER": "", "LESS": "-FRX",
    "GIT_TERMINAL_PROMPT": "0", "GIT_EDITOR": "true", "EDITOR": "true", "VISUAL": "true", "DEBIAN_FRONTEND":
    "noninteractive", "PIP_NO_INPUT": "1", "PYTHONUNBUFFERED": "1", "TERM": "dumb", "COLUMNS": "200",
}


async def run_bash(args: dict, ctx: ToolContext) -> ToolResult:
    runtime = ctx.runtime
    if runtime is None:
        return ToolResult(output="the bash tool needs a runtime, but this trajectory has none", error=True)
    failure = await prepare_for_tool(ctx)
    if failure is not None:
        return failure
    command = args["command"]
    if not command.strip():
        return ToolResult(output="Error: empty command; give a shell command such as `ls`", error=True)
    timeout = min(float(args.get("timeout") or ctx.store.get("_tool_timeout_s") or DEFAULT_TIMEOUT_S), MAX_TIMEOUT_S)
    env = dict(NONINTERACTIVE_ENV)
    env.update(getattr(runtime, "tool_env", None) or {})
    result = await runtime.exec(command, timeout_s=timeout, env=env)
    output, truncated = truncate_output(result.output, MAX_OUTPUT_CHARS)
    truncated = truncated or result.truncated
    if result.timed_out:
        if "[command timed out" not in output:
            output += f"\n[command timed out after {timeout:g} s and was killed]"
        return ToolResult(output=output.strip() + "\nHint: run long jobs with a smaller scope (one test file), or "
                          "raise `timeout`.", error=True,
                          metadata={"timed_out": True, "truncated": truncated})
    text = output.rstrip()
    if result.exit_code != 0:
        text = f"{text}\n[exit code {result.exit_code}]".lstrip("\n")
    elif not text:
        text = "[command finished with no output]"
    return ToolResult(output=text, error=result.exit_code != 0,
                      metadata={"exit_code": result.exit_code, "truncated": truncated,
                                "duration_s": round(result.duration_s, 3)})


bash_tool = Tool(
    name="bash",
    description=(
        "Run a bash command in the repository (the working directory is the repository root). stdin is closed "
        "and pagers are off, so interactive programs do not work; long output is cut in the middle. Default "
        f"timeout {DEFAULT_TIMEOUT_S:g} s."),
    parameters={
        "type": "object",
        "properties": {
            "command": {"type": "string", "description": "the bash command to run"},
            "timeout": {"type": "number", "exclusiveMinimum": 0, "maximum": MAX_TIMEOUT_S,
                        "description": "seconds before the command is killed"},
        },
        "required": ["command"],
        "additionalProperties": False,
    },
    handler=run_bash,
)
