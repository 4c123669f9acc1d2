"""bash, str_replace_editor and submit on a real project (inflection 0.5.1 from the package index) in the sandbox."""

from __future__ import annotations

import asyncio
import os
import uuid
from pathlib import Path

import pytest

from skyrl_core.plugins import get_plugins, reset_plugins
from skyrl_core.testing import require_sandbox
from skyrl_swe.bash import BACKGROUND_NOTE


def tool(name):
    from skyrl_swe.tools import bash_tool, editor_tool, search_tool, submit_tool

    return {t.name: t for t in (bash_tool, editor_tool, search_tool, submit_tool)}[name]


def test_plugin_registers_everything():
    reset_plugins()
    try:
        reg = get_plugins().registry
        assert {"bash", "str_replace_editor", "search", "submit"} <= set(reg.names("tools"))
        assert {"swe_sandbox", "docker"} <= set(reg.names("runtimes"))
        assert {"swe", "r2e_gym"} <= set(reg.names("tasks"))
        assert "swe_tests" in reg.names("verifiers") and "swe" in reg.names("instruction_builders")
        assert "swe" in reg.names("commands")
        assert reg.entries["tools"]["search"].plugin == "swe"
    finally:
        reset_plugins()


# -- bash --------------------------------------------------------------------------------------------------------
async def test_bash_runs_in_the_repository(ctx):
    res = await tool("bash").call({"command": "ls && python -c 'import inflection; print(inflection.camelize(\"a_b\"))'"},
                                  ctx)
    assert not res.error
    assert "test_inflection.py" in res.output and "AB" in res.output
    failed = await tool("bash").call({"command": "exit 3"}, ctx)
    assert failed.error and "[exit code 3]" in failed.output and failed.metadata["exit_code"] == 3


async def test_bash_timeout_keeps_partial_output(ctx):
    res = await tool("bash").call({"command": "echo started; sleep 20", "timeout": 1}, ctx)
    assert res.error and res.metadata["timed_out"]
    assert "started" in res.output and "timed out after 1 s" in res.output


async def test_bash_truncates_long_output_with_a_note(ctx):
    res = await tool("bash").call({"command": "python -c \"print('\\n'.join(f'line {i}' for i in range(20000)))\""},
                                  ctx)
    assert res.metadata["truncated"]
    assert "line 0" in res.output and "line 19999" in res.output and "truncated" in res.output
    assert len(res.output) < 12000


async def test_bash_stdin_closed_and_pagers_off(ctx):
    res = await tool("bash").call({"command": "read x; echo \"read:[$x] rc=$?\"; cat; echo PAGER=$PAGER; "
                                   "git log --oneline | head -1", "timeout": 10}, ctx)
    assert not res.metadata.get("timed_out")
    assert "read:[] rc=1" in res.output and "PAGER=cat" in res.output and "skyrl baseline" in res.output


def _alive(marker: str) -> bool:
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                if marker.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                    return True
            except OSError:
                pass
    return False


async def test_background_processes_stop_when_the_command_returns(ctx):
    marker = f"skyrl_bg_{uuid.uuid4().hex[:8]}"
    res = await tool("bash").call({"command": f"(exec -a {marker} sleep 300) & echo spawned"}, ctx)
    assert "spawned" in res.output and BACKGROUND_NOTE in res.output and res.metadata["background_stopped"]
    await asyncio.sleep(0.2)
    assert not _alive(marker)
    # the documented way: the server and its client in one command
    both = await tool("bash").call({"command": "python -m http.server 8765 --bind 127.0.0.1 >/dev/null 2>&1 & "
                                                "sleep 1; python -c \"import urllib.request as u; "
                                                "print(u.urlopen('http://127.0.0.1:8765/').status)\""}, ctx)
    assert "200" in both.output, both.output


# -- sandbox isolation -------------------------------------------------------------------------------------------
async def test_sandbox_has_no_network_and_cannot_write_outside(sandbox, ctx):
    if sandbox.isolation != "bubblewrap":
        require_sandbox()  # skips naming why, or fails under SKYRL_REQUIRE_SANDBOX=1 (CI)
        pytest.fail(f"bubblewrap works here but the sandbox started with isolation {sandbox.isolation!r}")
    net = await tool("bash").call({"command": "python -c \"import socket; socket.create_connection(('pypi.org', 443), "
                                   "timeout=3)\""}, ctx)
    assert net.error and ("gaierror" in net.output or "unreachable" in net.output.lower()
                          or "Errno" in net.output)
    outside = Path(__file__).resolve().parent / f"escape-{uuid.uuid4().hex[:6]}"
    res = await tool("bash").call({"command": f"touch {outside}; echo x > /etc/skyrl-escape; "
                                   f"echo inside > ok.txt && cat ok.txt"}, ctx)
    assert "No such file or directory" in res.output  # the host tree is not mounted at all (docs/runtimes.md)
    assert not outside.exists() and not Path("/etc/skyrl-escape").exists()
    assert (sandbox.workspace / "ok.txt").read_text() == "inside\n"


# -- editor ------------------------------------------------------------------------------------------------------
async def edit(ctx, **args):
    return await tool("str_replace_editor").call(args, ctx)


async def test_editor_view_file_range_and_directory(ctx):
    res = await edit(ctx, command="view", path="inflection/__init__.py", view_range=[144, 146])
    assert not res.error
    assert "   144\tdef camelize(string: str, uppercase_first_letter: bool = True) -> str:" in res.output
    assert "   147\t" not in res.output
    listing = await edit(ctx, command="view", path=".")
    assert "inflection/" in listing.output and "inflection/__init__.py" in listing.output
    assert ".git" not in listing.output


async def test_editor_str_replace_insert_undo(ctx, sandbox):
    path = sandbox.workspace / "inflection/__init__.py"
    before = path.read_bytes()
    res = await edit(ctx, command="str_replace", path="inflection/__init__.py",
                     old_str="def dasherize(word: str) -> str:", new_str="def dasherize(word: str) -> str:  # edited")
    assert not res.error and "# edited" in res.output and "has been edited" in res.output
    assert b"# edited" in path.read_bytes()
    ins = await edit(ctx, command="insert", path="inflection/__init__.py", insert_line=0, new_str="# top line")
    assert not ins.error and path.read_text().startswith("# top line\n")
    await edit(ctx, command="undo_edit", path="inflection/__init__.py")
    await edit(ctx, command="undo_edit", path="inflection/__init__.py")
    assert path.read_bytes() == before
    nothing = await edit(ctx, command="undo_edit", path="inflection/__init__.py")
    assert nothing.error and "no edit to undo" in nothing.output


async def test_editor_error_paths(ctx, sandbox):
    none = await edit(ctx, command="str_replace", path="inflection/__init__.py", old_str="def no_such_function(",
                      new_str="x")
    assert none.error and "did not appear verbatim" in none.output
    several = await edit(ctx, command="str_replace", path="inflection/__init__.py", old_str="    return word\n",
                         new_str="    return word  # x\n")
    assert several.error and "occurs" in several.output and "starting at lines" in several.output
    ws = await edit(ctx, command="str_replace", path="inflection/__init__.py",
                    old_str="def  dasherize(word:  str) -> str:", new_str="x")
    assert ws.error and "whitespace is ignored" in ws.output
    missing = await edit(ctx, command="view", path="nope.py")
    assert missing.error and "does not exist" in missing.output
    outside = await edit(ctx, command="view", path="/etc/passwd")
    assert outside.error and "outside the workspace" in outside.output
    escape = await edit(ctx, command="create", path="../escape.py", file_text="x")
    assert escape.error and "outside the workspace" in escape.output
    exists = await edit(ctx, command="create", path="setup.py", file_text="x")
    assert exists.error and "already exists" in exists.output
    bad_range = await edit(ctx, command="view", path="setup.py", view_range=[10, 2])
    assert bad_range.error and "before its start" in bad_range.output
    far = await edit(ctx, command="insert", path="setup.py", insert_line=10_000, new_str="x")
    assert far.error and "outside 0.." in far.output
    (sandbox.workspace / "blob.bin").write_bytes(b"\x00\x01\x02" * 10)
    binary = await edit(ctx, command="view", path="blob.bin")
    assert binary.error and "binary" in binary.output
    no_old = await edit(ctx, command="str_replace", path="setup.py", old_str="")
    assert no_old.error and "non-empty 'old_str'" in no_old.output


async def test_editor_keeps_crlf_tabs_and_encoding(ctx, sandbox):
    (sandbox.workspace / "crlf.py").write_bytes(b"def f():\r\n\treturn 1\r\n")
    res = await edit(ctx, command="str_replace", path="crlf.py", old_str="\treturn 1\n", new_str="\treturn 2\n")
    assert not res.error
    assert (sandbox.workspace / "crlf.py").read_bytes() == b"def f():\r\n\treturn 2\r\n"
    (sandbox.workspace / "latin.py").write_bytes("# caf\xe9\nx = 1\n".encode("latin-1"))
    res = await edit(ctx, command="str_replace", path="latin.py", old_str="x = 1", new_str="x = 'd\xe9j\xe0'")
    assert not res.error
    assert (sandbox.workspace / "latin.py").read_bytes() == "# caf\xe9\nx = 'd\xe9j\xe0'\n".encode("latin-1")
    view = await edit(ctx, command="view", path="crlf.py")
    assert "CRLF" in view.output and "\t2" not in view.output and "\treturn 2" in view.output


async def test_editor_create_and_submit_patch(ctx, sandbox):
    await edit(ctx, command="create", path="inflection/extra.py", file_text="VALUE = 1\n")
    await edit(ctx, command="str_replace", path="inflection/__init__.py",
               old_str="    return word.replace('_', '-')", new_str="    return word.replace('_', '+')")
    res = await tool("submit").call({}, ctx)
    assert res.finish and res.metadata["patch_files"] == ["inflection/__init__.py", "inflection/extra.py"]
    assert "+    return word.replace('_', '+')" in res.answer and "+VALUE = 1" in res.answer
    # the diff does not touch the repository's own index
    status = await tool("bash").call({"command": "git status --porcelain"}, ctx)
    assert "?? inflection/extra.py" in status.output
