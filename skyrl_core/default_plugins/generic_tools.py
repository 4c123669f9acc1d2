"""Generic tools: ``python`` (run code in the trajectory's runtime) and ``finish`` (end with an answer)."""

from __future__ import annotations

import sys
import uuid

from ..hookspecs import hookimpl
from ..tools import Tool, ToolContext, ToolResult


async def run_python(args: dict, ctx: ToolContext) -> ToolResult:
    """Write the code to a file in the workspace and run it with the interpreter; stdout+stderr come back."""
    runtime = ctx.runtime
    if runtime is None:
        return ToolResult(output="the python tool needs a runtime, but this trajectory has none", error=True)
    timeout = float(args.get("timeout_s") or ctx.store.get("_tool_timeout_s", 30.0))
    fname = f".skyrl_py_{uuid.uuid4().hex[:8]}.py"
    await runtime.write_file(fname, args["code"])
    result = await runtime.exec([sys.executable, "-I", fname], timeout_s=timeout)
    output = result.output.rstrip()
    if result.limits:  # each named in the output by the runtime ([limit NAME: ...])
        return ToolResult(output=output, error=True, metadata={"limits": list(result.limits),
                                                               "exit_code": result.exit_code,
                                                               "timed_out": result.timed_out})
    if result.timed_out:
        return ToolResult(output=output or f"[no output; timed out after {timeout:g} s]", error=True,
                          metadata={"timed_out": True})
    if result.exit_code != 0:
        return ToolResult(output=f"{output}\n[exit code {result.exit_code}]".strip(), error=True,
                          metadata={"exit_code": result.exit_code})
    if not output:
        output = "[no output: use print() to see values]"
    return ToolResult(output=output, metadata={"exit_code": 0, "truncated": result.truncated})


python_tool = Tool(
    name="python",
    description="Run Python 3 code and return what it prints (stdout and stderr). Use print() to see results.",
    parameters={
        "type": "object",
        "properties": {"code": {"type": "string", "description": "Python source code to run"}},
        "required": ["code"],
        "additionalProperties": False,
    },
    handler=run_python,
)


async def finish(args: dict, ctx: ToolContext) -> ToolResult:
    answer = args.get("answer")
    return ToolResult(output=f"Finished with answer: {answer}", finish=True, answer=answer)


finish_tool = Tool(
    name="finish",
    description="Finish the task and submit the final answer.",
    parameters={
        "type": "object",
        "properties": {"answer": {"type": ["string", "number"], "description": "the final answer"}},
        "required": ["answer"],
        "additionalProperties": False,
    },
    handler=finish,
    finishes=True,
)


@hookimpl(trylast=True)
def register_tools(register):
    register(python_tool)
    register(finish_tool)
