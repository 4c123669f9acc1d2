"""scripts/readme-commands, the check that runs the READMEs' runnable blocks in a fresh venv (#37): which blocks
it finds, how it shrinks their runs, and that it fails a block that exits nonzero or whose pip installs nothing
for a requirement's extra. The full run is a CI suite of its own (.ci/run)."""

from __future__ import annotations

import runpy
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "readme-commands"
rc = runpy.run_path(str(SCRIPT), run_name="readme_commands")


def test_the_marked_blocks_are_the_install_lines_a_user_runs_first():
    blocks = rc["find_blocks"](ROOT)
    where = [(readme, text.splitlines()[0]) for readme, _line, _o, text in blocks]
    assert where[0][0] == "README.md" and "python3 -m venv .venv" in where[0][1]  # the fresh-machine one-liner
    assert ("plugins/deep-research/README.md", where[1][1]) in where and "pip install -e plugins/deep-research" in where[1][1]
    for _readme, _line, overrides, text in blocks:
        shrunk = rc["shrink"](text, overrides)
        for line in shrunk.splitlines():
            if "skyrl train" in line or "skyrl eval" in line:
                assert line.split("#")[0].rstrip().endswith(overrides), line


def test_shrink_appends_before_a_trailing_comment_and_leaves_other_lines():
    block = "pip install x   # a comment\nskyrl eval a:b eval_data.limit=10   # ten\nskyrl plugins"
    assert rc["shrink"](block, "eval_data.limit=1").splitlines() == [
        "pip install x   # a comment", "skyrl eval a:b eval_data.limit=10 eval_data.limit=1   # ten", "skyrl plugins"]


def test_a_failing_block_and_a_requirement_that_installed_nothing_fail_the_check(tmp_path):
    readme = ("<!-- runnable -->\n```bash\necho fine\n```\n\n<!-- runnable -->\n```bash\n"
              "echo \"WARNING: lxml 6.1.3 does not provide the extra 'html_clean'\" >&2\n```\n\n"
              "```bash\nexit 1   # not marked: never run\n```\n<!-- runnable -->\n```bash\nfalse\n```\n")
    (tmp_path / "README.md").write_text(readme)
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    proc = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("ok ") and "README.md:2" in lines[0]
    assert lines[1].startswith("FAIL") and "does not provide the extra 'html_clean'" in lines[1]
    assert any(line.startswith("FAIL") and "(exit 1)" in line for line in lines)
    assert lines[-1].startswith("1 passed, 2 failed")
