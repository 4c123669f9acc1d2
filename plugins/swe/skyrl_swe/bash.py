"""The ``bash`` tool: one shell command in the trajectory's runtime.

What the model is told, and why it is true:

- **Deadline.** The command runs under its own deadline: the requested ``timeout`` (default 120 s, at most
  1800 s), always shorter than the agent loop's deadline for the tool call (``agent.tool_timeout_s``, minus a
  margin of 10 %, at least 3 s), so the loop's deadline never fires first and throws the output away. When the
  command runs past it, coreutils ``timeout`` stops it (TERM, KILL 1 s later) and the observation keeps the output
  produced so far, the exit status (124, or 137 when it had to be killed) and ``[timed out after N s]``.
- **stdin** is closed (``/dev/null``) and pagers are off (``PAGER=cat`` ...). A program that waits for input
  reads end-of-file at once; when the output or the command shows that happened (``EOFError``, "not a
  terminal", a ``[Y/n]`` prompt, an interactive program such as ``python`` with no script, ``git commit``
  without ``-m``), the observation says so and how to give the input non-interactively.
- **Output** longer than 10,000 characters keeps its head and tail; the note gives the bytes the command really
  wrote (counted by the runtime before its own cap), not the length of what reached this tool.
- **Background processes** a command starts (``server &``) are stopped when the command returns, in every
  runtime: under bubblewrap the command's PID namespace ends with it; in docker the tool kills the process group
  its command ran in and the runtime then kills what was orphaned to the container's init (``setsid`` children
  included); elsewhere the tool kills the process group. The observation says so when it happened; start a server and its client in one
  command (``python -m http.server 8000 & sleep 1; curl -s localhost:8000``).
"""

from __future__ import annotations

import re

from skyrl_core import ToolContext, ToolResult
from skyrl_core.runtime import truncate_output

from .runtime import prepare_for_tool

DEFAULT_TIMEOUT_S = 120.0
MAX_TIMEOUT_S = 1800.0
MAX_OUTPUT_CHARS = 10000
KILL_AFTER_S = 1.0
MAX_COMMAND_CHARS = 1_000_000  # a command travels on stdin, so the bound is ours, not the kernel's 128 KiB

NONINTERACTIVE_ENV = {
    "PAGER": "cat", "GIT_PAGER": "cat", "MANPAGER": "cat", "SYSTEMD_PAGER": "", "LESS": "-FRX",
    "GIT_TERMINAL_PROMPT": "0", "GIT_EDITOR": "true", "EDITOR": "true", "VISUAL": "true", "DEBIAN_FRONTEND":
    "noninteractive", "PIP_NO_INPUT": "1", "PYTHONUNBUFFERED": "1", "TERM": "dumb", "COLUMNS": "200",
}

# stdin: the command (never an argument: Linux refuses one argument over 128 KiB, MAX_ARG_STRLEN), written to a
# private file and run from there; $1: its deadline in seconds. The command runs in the background so that its
# process group (made by `timeout`) can be killed once it returns, with whatever it left running; the marker line
# carries the exit status and whether anything was left.
_WRAPPER = r"""
script=$(mktemp "${TMPDIR:-/tmp}/skyrl-command.XXXXXX") || exit 125
# never run a command cut short (a full /tmp): refuse it whole
cat > "$script" || { rm -f "$script"; echo "the command could not be written to ${TMPDIR:-/tmp} (full?): not run" >&2; exit 125; }
if command -v timeout >/dev/null 2>&1; then
  timeout -k __KILL__ "$1" bash "$script" </dev/null &
else
  bash "$script" </dev/null &
fi
pid=$!
wait "$pid"
rc=$?
rm -f "$script"
left=0
if kill -0 -- -"$pid" 2>/dev/null; then left=1; kill -KILL -- -"$pid" 2>/dev/null; fi
printf '\n\036skyrl-bash rc=%s left=%s\n' "$rc" "$left"
exit "$rc"
""".replace("__KILL__", f"{KILL_AFTER_S:g}")
_MARKER = re.compile(r"\n?\x1eskyrl-bash rc=(\d+) left=([01])\n?$")
_LIMIT_NOTES = re.compile(r"(\n\[limit [a-z_]+: [^\n]*\])+$")
_RUNTIME_SIZE = re.compile(r"(\[\.\.\. output truncated: the command wrote )\d+( bytes)")

_WAITED_FOR_INPUT = re.compile(
    r"EOFError|EOF when reading a line|Inappropriate ioctl for device|not a (?:terminal|tty)|"
    r"input device is not a TTY|no tty present|stdin is not a tty|\[[Yy]/[Nn]\]|\([Yy]/[Nn]\)|"
    r"Press (?:any key|ENTER|RETURN)|Aborted!|Password:|Vim: Warning: Input is not from a terminal", re.I)
_INTERACTIVE = re.compile(
    r"^\s*(?:sudo\s+)?(?:(?:python3?|ipython|node|irb|psql|mysql|sqlite3)\s*(?:-i\s*)?$|"
    r"(?:vi|vim|nvim|nano|emacs|less|more|top|htop|man)\b|git\s+(?:commit(?!.*\s(?:-[a-zA-Z]*[mFC]|--message|"
    r"--file|--no-edit)\b)|rebase\s+-i|add\s+-[ip])\b)")
STDIN_HINT = ("Hint: stdin is closed, so a command that waits for input reads end-of-file. Give the input "
              "non-interactively: flags such as -y / --yes / --no-input, `git commit -m \"...\"`, a script file "
              "instead of a REPL, a heredoc (cmd <<'EOF' ... EOF) or `printf 'y\\n' | cmd`.")
BACKGROUND_NOTE = ("[processes this command left in the background were stopped when it returned: each command "
                   "runs on its own; start a server and the commands that use it in one command]")


def deadline(requested: float | None, agent_timeout_s: float | None) -> tuple[float, float, bool]:
    """(the command's deadline, the runtime's backstop deadline, whether the request was capped), in seconds.

    The command's deadline is ``requested`` (default 120 s, at most 1800 s) but always ``agent_timeout_s`` minus
    a margin (10 %, at least 3 s) when the agent loop bounds the call; the backstop lies inside the margin."""
    want = min(float(requested or DEFAULT_TIMEOUT_S), MAX_TIMEOUT_S)
    if not agent_timeout_s:
        return want, want + KILL_AFTER_S + 2.0, False
    margin = max(3.0, 0.1 * float(agent_timeout_s))
    cap = max(0.5, float(agent_timeout_s) - margin)
    limit = min(want, cap)
    return limit, limit + 0.8 * margin, limit < want


def needs_input(command: str, output: str) -> bool:
    """Whether ``command`` evidently waited for input on its closed stdin (by its output, or being an
    interactive program run without a script)."""
    return bool(_WAITED_FOR_INPUT.search(output[-4000:]) or _INTERACTIVE.search(command))


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
    agent_timeout = ctx.store.get("_tool_timeout_s")
    limit, backstop, capped = deadline(args.get("timeout"), agent_timeout)
    env = dict(NONINTERACTIVE_ENV)
    env.update(getattr(runtime, "tool_env", None) or {})
    result = await runtime.exec(["bash", "-c", _WRAPPER, "skyrl-bash", f"{limit:g}"], timeout_s=backstop,
                                env=env, stdin=command)
    raw = result.output
    # the runtime appends one [limit NAME: ...] line per limit hit after the command's own output (and our marker)
    limit_notes = _LIMIT_NOTES.search(raw)
    if limit_notes:
        raw = raw[:limit_notes.start()]
    marker = _MARKER.search(raw)
    exit_code, left = (int(marker.group(1)), marker.group(2) == "1") if marker else (result.exit_code, False)
    produced = result.output_bytes
    if marker:
        raw = raw[:marker.start()]
        produced = None if produced is None else max(0, produced - len(marker.group(0).encode()))
    if result.truncated and produced is not None:  # the runtime's note counts our status marker too
        raw = _RUNTIME_SIZE.sub(rf"\g<1>{produced}\g<2>", raw, count=1)
    # a cut of the runtime's cut keeps its note of the true size (truncate_output); under this cap it stays
    output, truncated = truncate_output(raw, MAX_OUTPUT_CHARS, produced)
    truncated = truncated or result.truncated
    timed_out = result.timed_out or (exit_code in (124, 137) and result.duration_s >= limit - 0.05)
    notes: list[str] = [n for n in limit_notes.group(0).split("\n") if n and "[limit output:" not in n] \
        if limit_notes else []
    if left:
        notes.append(BACKGROUND_NOTE)
    if timed_out:
        why = f" (capped by agent.tool_timeout_s = {agent_timeout:g} s)" if capped else ""
        status = f"exit status {exit_code}" if exit_code is not None else "killed"
        if not any(n.startswith("[limit wall_time:") for n in notes):
            notes.append(f"[limit wall_time: timed out after {limit:g} s{why}: the command was stopped, {status}; "
                         f"the output above is what it wrote until then]")
        notes.append("Hint: run long jobs with a smaller scope (one test file), in the background of one "
                     "command with a time limit, or raise `timeout`.")
    elif exit_code not in (0, None):
        notes.append(f"[exit code {exit_code}]")
    if needs_input(command, output):
        notes.append(STDIN_HINT)
    text = output.rstrip()
    if not text and not notes:
        text = "[command finished with no output]"
    text = "\n".join(p for p in [text, *notes] if p)
    limits = list(dict.fromkeys([*result.limits, *(["wall_time"] if timed_out else []),
                                 *(["output"] if truncated else [])]))
    return ToolResult(output=text, error=timed_out or exit_code != 0 or bool(limits),
                      metadata={"exit_code": exit_code, "limits": limits, "timed_out": timed_out, "truncated": truncated,
                                "output_bytes": produced, "timeout_s": limit,
                                "background_stopped": left, "duration_s": round(result.duration_s, 3)})
