"""Hostile inputs to the swe tools and the patch they submit, each beside its bound: a command over the kernel's
128 KiB argument limit, oversized arguments (whose schema errors are cut), a path outside the workspace (one
message for every tool), names git quotes, empty new files, nested repositories, a `.gitmodules` with an update
command, and a patch over the size bound. On a real project (inflection 0.5.1) in the bubblewrap sandbox."""

from __future__ import annotations

import pytest

from skyrl_core import Instance
from skyrl_core.tools import ToolArgumentsError
from skyrl_swe.bash import MAX_COMMAND_CHARS
from skyrl_swe.git_safety import MAX_PATCH_BYTES
from skyrl_swe.verifiers import filter_patch, split_patch, swe_tests


def tool(name):
    from skyrl_swe.tools import bash_tool, editor_tool, localize_tool, search_tool, submit_tool

    return {t.name: t for t in (bash_tool, editor_tool, search_tool, localize_tool, submit_tool)}[name]


async def test_a_command_over_the_kernel_argument_limit_runs(ctx):
    big = "x" * 300_000  # over MAX_ARG_STRLEN (128 KiB): as an argv entry, execve fails with E2BIG
    res = await tool("bash").call({"command": f"v='{big}'; echo ${{#v}}"}, ctx)
    assert not res.error and res.output.strip() == "300000", res.output[:300]
    # the command file is private to the command and gone afterwards
    res = await tool("bash").call({"command": "ls ${TMPDIR:-/tmp} | grep -c skyrl-command || true"}, ctx)
    assert res.output.strip().splitlines()[0] == "1"  # only the running command's own file


async def test_oversized_arguments_are_refused_by_the_schema_with_a_short_message(ctx):
    cases = [("bash", {"command": "#" * (MAX_COMMAND_CHARS + 1)}),
             ("str_replace_editor", {"command": "create", "path": "big.txt", "file_text": "a" * 20_000_000}),
             ("search", {"query": "q" * 5_000_000})]
    for name, args in cases:
        with pytest.raises(ToolArgumentsError) as info:
            await tool(name).call(args, ctx)
        assert "is too long" in str(info.value) and len(str(info.value)) < 600, (name, str(info.value)[:200])
        assert "characters cut" in str(info.value)
    assert not (ctx.runtime.workspace / "big.txt").exists()


async def test_a_path_outside_the_workspace_gets_one_message_from_every_tool(ctx):
    answers = [await tool("str_replace_editor").call({"command": "view", "path": "/etc"}, ctx),
               await tool("search").call({"query": "camelize", "path": "/etc"}, ctx),
               await tool("search").call({"query": "camelize", "path": "../.."}, ctx),
               await tool("localize").call({"issue": "camelize breaks", "path": "/etc"}, ctx)]
    for res in answers:
        assert res.error and "is outside the workspace" in res.output and "no definition" not in res.output, \
            res.output[:300]


async def test_submit_reads_quoted_names_empty_files_nested_repositories_and_gitmodules(ctx, tmp_path):
    marker = tmp_path / "update-command-ran"
    script = (
        "printf 'x = 1\\n' > 'with space.py' && printf 'y = 2\\n' > 'ünïcode.py' && "
        "printf 'z = 3\\n' > \"$(printf 'tab\\tand\\\"quote.py')\" && : > empty_new.py && "
        "mkdir -p nested/empty && git -C nested/empty init -q && "
        "mkdir -p nested/full && git -C nested/full init -q && echo w > nested/full/w.py && "
        "git -C nested/full -c user.name=a -c user.email=a@a add w.py && "
        "git -C nested/full -c user.name=a -c user.email=a@a commit -qm w && "
        f"printf '[submodule \"s\"]\\n\\tpath = nested/full\\n\\turl = ./nested/full\\n"
        f"\\tupdate = !touch {marker}\\n' > .gitmodules")
    res = await tool("bash").call({"command": script}, ctx)
    assert not res.error, res.output
    sub = await tool("submit").call({}, ctx)
    assert not sub.error and sub.finish, sub.output
    files = sub.metadata["patch_files"]
    assert sorted(files) == sorted([".gitmodules", "empty_new.py", "tab\tand\"quote.py", "with space.py",
                                    "ünïcode.py"]), files
    assert "changing 5 file(s)" in sub.output and "nested/empty/" in sub.output and "nested/full/" in sub.output
    assert "nested/full/w.py" not in sub.answer and "Subproject" not in sub.answer
    assert not marker.exists()
    # the verifier's filter reads the same names, and drops .gitmodules and any submodule entry
    kept, dropped = filter_patch(sub.answer + GITLINK, set())
    assert [p for p, _ in split_patch(kept)] == [p for p in files if p != ".gitmodules"]
    assert sorted(dropped) == [".gitmodules", "vendored"]


GITLINK = ("diff --git a/vendored b/vendored\nnew file mode 160000\nindex 0000000..1234567\n--- /dev/null\n"
           "+++ b/vendored\n@@ -0,0 +1 @@\n+Subproject commit 1234567890123456789012345678901234567890\n")


async def test_a_patch_of_only_empty_new_files_is_not_an_empty_patch(ctx):
    await tool("bash").call({"command": ": > a_new_module.py && mkdir -p pkg && : > pkg/__init__.py"}, ctx)
    sub = await tool("submit").call({}, ctx)
    assert "changing 2 file(s): a_new_module.py, pkg/__init__.py" in sub.output, sub.output
    assert "empty patch" not in sub.output


async def test_a_patch_over_the_size_bound_is_refused_by_submit_and_scores_0(ctx):
    mib = MAX_PATCH_BYTES // (1024 * 1024) + 2
    res = await tool("bash").call({"command": f"head -c {mib}M /dev/zero | tr '\\0' 'a' | fold -w 100 > dump.txt"},
                                  ctx)
    assert not res.error, res.output
    sub = await tool("submit").call({}, ctx)
    assert sub.error and not sub.finish and "over the patch bound" in sub.output and "dump.txt" in sub.output
    inst = Instance(id="x", data={"FAIL_TO_PASS": ["t.py::t"], "PASS_TO_PASS": [], "test_patch": ""})

    class Trajectory:
        finish_reason = "finish"
        answer = None

    result = await swe_tests(Trajectory(), ctx.runtime, inst)
    assert result.reward == 0.0 and "over the patch bound" in result.metrics["error"]
    assert result.outcome == "scored"
    # a text patch over the bound (a predictions file) is refused before anything parses it
    from skyrl_swe.verifiers import verify_patch

    big = await verify_patch(inst, "+" * (MAX_PATCH_BYTES + 1))
    assert big.reward == 0.0 and "over the bound" in big.metrics["error"]


def test_split_patch_reads_every_header_form():
    patch = ("diff --git a/x y.py b/x y.py\nnew file mode 100644\nindex 0000000..e69de29\n"
             'diff --git "a/q\\"t.py" "b/q\\"t.py"\nnew file mode 100644\n'
             "diff --git a/old name.py b/new name.py\nsimilarity index 100%\nrename from old name.py\n"
             "rename to new name.py\n"
             'diff --git "a/\\303\\274.py" "b/\\303\\274.py"\n--- "a/\\303\\274.py"\n+++ "b/\\303\\274.py"\n'
             "diff --git a/s p.py b/s p.py\n--- a/s p.py\t\n+++ b/s p.py\t\n@@ -1 +1 @@\n-a\n+b\n")
    assert [p for p, _ in split_patch(patch)] == ["x y.py", 'q"t.py', "new name.py", "ü.py", "s p.py"]


async def test_a_command_that_cannot_be_written_whole_is_not_run(ctx):
    # the command travels through a file in $TMPDIR: when it cannot be written whole, none of it runs
    res = await tool("bash").call({"command": "echo ran > marker.txt"}, _with_env(ctx, TMPDIR="/proc"))
    assert res.error and not (ctx.runtime.workspace / "marker.txt").exists(), res.output


def _with_env(ctx, **env):
    ctx.runtime.tool_env = {**ctx.runtime.tool_env, **env}
    return ctx
