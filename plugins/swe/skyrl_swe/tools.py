"""The tools the swe plugin registers, as the agent sees them: name, description, JSON Schema of the arguments and
handler. ``bash``, ``str_replace_editor``, ``search`` and ``localize`` run code that lives in their own modules
(:mod:`skyrl_swe.bash`, :mod:`skyrl_swe.editor`, :mod:`skyrl_swe.search`, :mod:`skyrl_swe.localize`); ``submit`` is
here whole. Every tool acts inside the trajectory's repository runtime (``swe_sandbox`` or ``docker``) and answers
an unprepared or missing runtime with an error naming it.

``submit`` ends a SWE trajectory; the answer is the patch, the ``git diff`` of the workspace against the pristine
repository (new files included). Named ``submit`` so it does not clash with the core's ``finish``."""

from __future__ import annotations

from skyrl_core import Tool, ToolContext, ToolResult

from .bash import DEFAULT_TIMEOUT_S, MAX_COMMAND_CHARS, MAX_TIMEOUT_S, run_bash
from .editor import MAX_TEXT_CHARS, run_editor
from .git_safety import PatchTooLarge
from .localize import run_localize
from .runtime import prepare_for_tool
from .search import MAX_QUERY_CHARS, run_search
from .verifiers import split_patch


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


bash_tool = Tool(
    name="bash",
    description=(
        "Run a bash command in the repository (the working directory is the repository root). stdin is closed "
        "and pagers are off, so interactive programs get no input: use non-interactive flags. Long output "
        "keeps its head and tail. Processes left in the background stop when the command returns. Default "
        f"timeout {DEFAULT_TIMEOUT_S:g} s, always within the agent's limit for one tool call."),
    parameters={
        "type": "object",
        "properties": {
            "command": {"type": "string", "maxLength": MAX_COMMAND_CHARS,
                        "description": "the bash command to run (put long data in a file with the editor)"},
            "timeout": {"type": "number", "exclusiveMinimum": 0, "maximum": MAX_TIMEOUT_S,
                        "description": "seconds before the command is stopped"},
        },
        "required": ["command"],
        "additionalProperties": False,
    },
    handler=run_bash,
)


editor_tool = Tool(
    name="str_replace_editor",
    description=(
        "View, create and edit files. `view` shows a file with line numbers (`view_range` [start, end], end -1 = "
        "to the end) or lists a directory; `create` writes a new file (`file_text`); `str_replace` replaces "
        "`old_str`, which must occur exactly once, with `new_str`; `insert` adds `new_str` after line "
        "`insert_line` (0 = top); `undo_edit` reverts the last edit of a file. Paths are relative to the "
        "repository root. Indentation, tabs and line endings must match the file exactly."),
    parameters={
        "type": "object",
        "properties": {
            "command": {"type": "string", "enum": ["view", "create", "str_replace", "insert", "undo_edit"],
                        "description": "the operation"},
            "path": {"type": "string", "description": "file or directory, relative to the repository root"},
            "file_text": {"type": "string", "maxLength": MAX_TEXT_CHARS,
                          "description": "content of the new file (create)"},
            "old_str": {"type": "string", "maxLength": MAX_TEXT_CHARS,
                        "description": "exact text to replace, occurring once (str_replace)"},
            "new_str": {"type": "string", "maxLength": MAX_TEXT_CHARS,
                        "description": "replacement (str_replace) or text to insert (insert)"},
            "insert_line": {"type": "integer", "minimum": 0, "description": "insert after this line (insert)"},
            "view_range": {"type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 2,
                           "description": "[start, end] lines to view; end -1 = to the end"},
        },
        "required": ["command", "path"],
        "additionalProperties": False,
    },
    handler=run_editor,
)


search_tool = Tool(
    name="search",
    description=(
        "Search the repository's code by structure. Query forms: a name (`camelize`, fuzzy when not exact); a "
        "qualified path (`pkg/mod.py:Class.method`, or `pkg/mod.py` for a file outline); a dotted name "
        "(`Class.method`); `class:X`, `def:X`, `method:X`; `subclass:Base` (classes deriving from Base); "
        "`calls:func` (call sites); `text:exact words` (substring); a quoted string, option key (`max-line-length`) or "
        "message id (`E1101`): the definitions containing it; a name assigned at module level (`pprint = ...`): "
        "the assigned definition; an UPPER_CASE word or a name used but never defined: where it is used; or "
        "a few words (fielded BM25 over modules and definitions, tests last). "
        "Shows code with line numbers (an outline for long bodies), what a single match calls and is used by, "
        "and a hint for the next query."),
    parameters={
        "type": "object",
        "properties": {
            "query": {"type": "string", "maxLength": MAX_QUERY_CHARS,
                      "description": "what to find (see the query forms)"},
            "path": {"type": "string", "description": "only files under this directory or file"},
            "kind": {"type": "string", "enum": ["class", "function", "method"],
                     "description": "only definitions of this kind"},
            "max_results": {"type": "integer", "minimum": 1, "maximum": 50,
                            "description": "definitions to show (default 5)"},
        },
        "required": ["query"],
        "additionalProperties": False,
    },
    handler=run_search,
)


localize_tool = Tool(
    name="localize",
    description=(
        "Find where an issue's fix belongs: give the whole issue text (traceback included); returns the files "
        "and functions most likely to need changes, each with the evidence that points at it (traceback "
        "frames, names, quoted strings, text similarity). Call it first, then read candidates with `search`."),
    parameters={
        "type": "object",
        "properties": {
            "issue": {"type": "string", "minLength": 1, "maxLength": 200_000,
                      "description": "the issue text, verbatim"},
            "path": {"type": "string", "description": "only files under this directory"},
            "max_results": {"type": "integer", "minimum": 1, "maximum": 50,
                            "description": "files and functions to list (default 10)"},
        },
        "required": ["issue"],
        "additionalProperties": False,
    },
    handler=run_localize,
)


submit_tool = Tool(
    name="submit",
    description=("Submit your changes and end the task. The submission is the diff of every file you changed in "
                 "the repository; call it once the fix is complete."),
    parameters={"type": "object", "properties": {}, "additionalProperties": False},
    handler=run_submit,
)


TOOLS = (bash_tool, editor_tool, search_tool, localize_tool, submit_tool)  # in the order the plugin registers them
