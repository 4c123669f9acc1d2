"""The ``submit`` tool: ends a SWE trajectory; the answer is the patch, the ``git diff`` of the workspace against
the pristine repository (new files included). Named ``submit`` so it does not clash with the core's ``finish``."""

from __future__ import annotations

from skyrl_core import Tool, ToolContext, ToolResult

from .runtime import PatchTooLarge, prepare_for_tool
from .verifier import split_patch


async def run_submit(args: dict, ctx: ToolContext) -> ToolResult:
    failure = await prepare_for_tool(ctx)
    if failure is not None:
        return failure
    runtime = ctx.runtime
    if runtime is None:
        return ToolResult(output="submit needs a runtime with a repository, but this trajectory has none", error=True)
    if not hasattr(runtime, "diff"):  # the patch is never computed by running git on the host in a workspace
        return ToolResult(output=f"submit needs a repository runtime (swe_sandbox or docker), but this trajectory's "
                                 f"runtime is {getattr(runtime, 'name', type(runtime).__name__)}", error=True)
    try:
        patch = await runtime.diff()
    except PatchTooLarge as exc:  # not submitted: the agent can shrink its changes and submit again
        return ToolResult(output=f"Error: not submitted: {exc}", error=True)
    # every file the patch touches, by its `diff --git` header (an empty new file has no +++ line; a name git
    # quotes is unquoted)
    files = [path for path, _ in split_patch(patch)]
    shown = ", ".join(files[:50]) + (f" and {len(files) - 50} more" if len(files) > 50 else "")
    summary = (f"Submitted a patch changing {len(files)} file(s): {shown}" if files else
               "Submitted an empty patch (no file was changed).")
    notes = list(getattr(runtime, "diff_notes", None) or [])
    return ToolResult(output="\n".join([summary, *notes]), finish=True, answer=patch,
                      metadata={"patch_files": files})


submit_tool = Tool(
    name="submit",
    description=("Submit your changes and end the task. The submission is the diff of every file you changed in "
                 "the repository; call it once the fix is complete."),
    parameters={"type": "object", "properties": {}, "additionalProperties": False},
    handler=run_submit,
)
