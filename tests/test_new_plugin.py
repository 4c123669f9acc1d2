"""`skyrl new plugin`: the template generates the documented layout, refuses bad names, and the generated plugin
installs, is listed by `skyrl plugins` with its capabilities, passes its own tests (a real `skyrl eval` of two
instances included) and uninstalls."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from skyrl_core.cli import main
from skyrl_core.default_plugins.scaffold import TEMPLATE, generate_plugin, plugin_names
from skyrl_core.errors import SkyrlError

EXPECTED_TREE = [
    ".github/workflows/test.yml", "README.md", "pyproject.toml",
    "skyrl_letter_count/__init__.py", "skyrl_letter_count/data/test.jsonl", "skyrl_letter_count/data/train.jsonl",
    "skyrl_letter_count/examples/letter-count.yaml",
    "skyrl_letter_count/tasks.py", "skyrl_letter_count/tools.py", "skyrl_letter_count/verifiers.py",
    "tests/conftest.py", "tests/test_eval.py", "tests/test_plugin.py",
]


def _tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def test_template_ships_inside_the_package():
    assert (TEMPLATE / "cookiecutter.json").is_file()
    assert json.loads((TEMPLATE / "cookiecutter.json").read_text())["plugin_name"] == "my-task"


def test_generates_the_documented_layout(tmp_path):
    out = generate_plugin("letter-count", tmp_path, description="Counts letters.", author="Ada")
    assert out == tmp_path / "skyrl-letter-count"
    assert _tree(out) == EXPECTED_TREE
    pyproject = (out / "pyproject.toml").read_text()
    assert 'name = "skyrl-letter-count"' in pyproject
    assert 'letter_count = "skyrl_letter_count"' in pyproject
    assert 'authors = [{name = "Ada"}]' in pyproject and 'description = "Counts letters."' in pyproject
    # data files are copied verbatim and every generated Python file is valid Python
    assert (out / "skyrl_letter_count/data/test.jsonl").read_bytes() == \
        (TEMPLATE / "{{cookiecutter.dist_name}}/{{cookiecutter.module_name}}/data/test.jsonl").read_bytes()
    for path in out.rglob("*.py"):
        compile(path.read_text(), str(path), "exec")
        assert "{{" not in path.read_text(), path


def test_generated_data_is_the_same_in_every_process(tmp_path):
    """The old template picked the letter with max(set(word)): a different question per PYTHONHASHSEED."""
    out = generate_plugin("seeded", tmp_path)
    code = ("import sys; sys.path.insert(0, sys.argv[1]); from skyrl_seeded.tasks import load;"
            "from skyrl_core import DataSpec; print([(i.id, i.data['letter']) for i in load(DataSpec(split='train'))])")
    seen = {subprocess.run([sys.executable, "-c", code, str(out)], capture_output=True, text=True, check=True,
                           env={**os.environ, "PYTHONHASHSEED": seed}).stdout for seed in ("0", "1", "2")}
    assert len(seen) == 1 and "('train-0', 'a')" in seen.pop()


@pytest.mark.parametrize("bad, why", [("Letter", "not valid"), ("1task", "not valid"), ("my_task", "not valid"),
                                      ("a--b", "not valid"), ("train", "taken"), ("skyrl-foo", "prefix"),
                                      ("", "not valid")])
def test_bad_names_are_refused_with_the_reason(bad, why, tmp_path):
    with pytest.raises(SkyrlError, match=why):
        generate_plugin(bad, tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_names_are_derived():
    assert plugin_names("letter-count") == {"dist_name": "skyrl-letter-count", "module_name": "skyrl_letter_count",
                                            "entry_point": "letter_count"}


def test_cli_generates_and_refuses_an_existing_directory(tmp_path, capsys):
    with pytest.raises(SystemExit) as done:
        main(["new", "plugin", "word-len", "--output-dir", str(tmp_path), "--no-input", "--description", "Lengths."])
    assert done.value.code == 0
    assert "created" in capsys.readouterr().out
    assert (tmp_path / "skyrl-word-len" / "skyrl_word_len" / "tasks.py").is_file()
    with pytest.raises(SystemExit) as again:
        main(["new", "plugin", "word-len", "--output-dir", str(tmp_path), "--no-input"])
    assert again.value.code == 2
    assert "exists already" in capsys.readouterr().err


def test_cli_bad_name_is_one_line_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as done:
        main(["new", "plugin", "Bad_Name", "--output-dir", str(tmp_path), "--no-input"])
    assert done.value.code == 2
    err = capsys.readouterr().err
    assert "plugin name 'Bad_Name' is not valid" in err and "Traceback" not in err


@pytest.mark.slow
def test_generated_plugin_installs_lists_passes_its_tests_and_uninstalls(tmp_path):
    out = generate_plugin("tmpl-check", tmp_path)
    pip = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", str(out)],
                         capture_output=True, text=True)
    assert pip.returncode == 0, pip.stderr
    env = {k: v for k, v in os.environ.items() if k != "SKYRL_LOAD_PLUGINS"}
    try:
        listing = subprocess.run([sys.executable, "-m", "skyrl_core.cli", "plugins", "--json"], capture_output=True,
                                 text=True, env=env, check=True)
        plugin = {p["name"]: p for p in json.loads(listing.stdout)}["tmpl_check"]
        assert plugin["distribution"] == "skyrl-tmpl-check"
        assert plugin["capabilities"]["tasks"] == ["tmpl_check_count"]
        tests = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"],
                               capture_output=True, text=True, env=env, cwd=str(out))
        assert tests.returncode == 0, tests.stdout[-3000:]
        assert "11 passed" in tests.stdout, tests.stdout[-1500:]
    finally:
        subprocess.run([sys.executable, "-m", "pip", "uninstall", "-y", "-q", "skyrl-tmpl-check"], capture_output=True)
    gone = subprocess.run([sys.executable, "-m", "skyrl_core.cli", "plugins", "--json"], capture_output=True,
                          text=True, env=env, check=True)
    assert "tmpl_check" not in [p["name"] for p in json.loads(gone.stdout)]


def _new_plugin_cli(tmp_path, *args, answers=""):
    """`skyrl new plugin ...` on a terminal-less stdin holding ``answers``: (rc, stdout, stderr)."""
    proc = subprocess.run([sys.executable, "-m", "skyrl_core.cli", "new", "plugin", *args, "--output-dir",
                           str(tmp_path)], input=answers, capture_output=True, text=True, timeout=300)
    return proc.returncode, proc.stdout, proc.stderr


def test_interactive_mode_asks_only_description_and_author(tmp_path):
    """The old interactive mode asked six questions, the name again first, and let the derived names be edited."""
    rc, out, err = _new_plugin_cli(tmp_path, "word-len", answers="Lengths of words.\nAda\n")
    assert rc == 0, err
    prompts = [p.split(" [")[0].strip() for p in out.split("created")[0].split(":") if p.strip()]
    assert prompts == ["description", "author"], out
    root = tmp_path / "skyrl-word-len"
    pyproject = (root / "pyproject.toml").read_text()
    assert 'name = "skyrl-word-len"' in pyproject and 'word_len = "skyrl_word_len"' in pyproject
    assert 'description = "Lengths of words."' in pyproject and 'authors = [{name = "Ada"}]' in pyproject
    assert "skyrl eval word-len:word-len" in out  # the shipped example, by name


@pytest.mark.parametrize("args, answers, message", [
    (("Bad_Name",), "x\ny\n", "plugin name 'Bad_Name' is not valid"),
    (("ok-name",), 'say "hi"\nAda\n', "--description 'say \"hi\"' is not valid"),
    (("ok-name", "--no-input", "--author", 'A"da'), "", "--author 'A\"da' is not valid"),
])
def test_every_refusal_is_one_line_in_both_modes(tmp_path, args, answers, message):
    rc, _out, err = _new_plugin_cli(tmp_path, *args, answers=answers)
    assert rc == 2 and message in err, err
    assert "Traceback" not in err and "FailedHookException" not in err and len(err.strip().splitlines()) <= 3
    assert list(tmp_path.iterdir()) == []


def test_the_templates_hook_refuses_edited_derived_names(tmp_path):
    """Run through cookiecutter directly, the hook keeps the names derived; `skyrl new plugin` reports a hook
    refusal as its one-line error, not cookiecutter's traceback."""
    from cookiecutter.exceptions import FailedHookException
    from cookiecutter.main import cookiecutter

    with pytest.raises(FailedHookException):
        cookiecutter(str(TEMPLATE), no_input=True, output_dir=str(tmp_path),
                     extra_context={"plugin_name": "word-len", "module_name": "other"})
    assert list(tmp_path.iterdir()) == []


def test_the_generated_workflow_installs_what_a_user_can(tmp_path):
    """The workflow pins the CPU torch and installs skyrl-core from a source pip can reach (this checkout here;
    skyrl-core is on no package index), the same lines as the generated README's install."""
    import yaml

    out = generate_plugin("flow-check", tmp_path)
    flow = yaml.safe_load((out / ".github/workflows/test.yml").read_text())
    runs = [s["run"] for s in flow["jobs"]["test"]["steps"] if "run" in s]
    assert "pip install torch==2.13.0" in runs
    assert 'pip install "skyrl-core[hf] @ $SKYRL_CORE"' in runs
    source = flow["env"]["SKYRL_CORE"]
    assert source == Path(__file__).resolve().parents[1].as_uri()
    readme = (out / "README.md").read_text()
    for line in runs[1:-1]:
        assert line in readme, line


# The workflow's steps themselves run as written in CI, after the README commands in the same fresh venv:
# scripts/readme-commands (a .ci/run suite); 945 s on this loaded machine (load 10-12), so not a pytest case.
