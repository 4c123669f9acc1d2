"""`skyrl new plugin`: the template (its only copy: cookiecutter/skyrl-plugin) generates the documented layout,
refuses bad names, works from a wheel and from an editable install, and the generated plugin's CI workflow runs as
written in a fresh venv: skyrl installed from a checkout's path, the plugin listed by `skyrl plugins` with its
capabilities and passing its own tests (a real `skyrl eval` of two instances included)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from skyrl_core.cli import main
from skyrl_core.default_plugins.scaffold import find_template, generate_plugin, plugin_names, skyrl_checkout
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


ROOT = Path(__file__).resolve().parents[1]
TEMPLATE = ROOT / "cookiecutter" / "skyrl-plugin"


def test_the_template_is_the_checkouts_only_copy():
    """The design card's top level: cookiecutter/skyrl-plugin, and no second copy inside the package."""
    assert find_template() == TEMPLATE
    assert json.loads((TEMPLATE / "cookiecutter.json").read_text())["plugin_name"] == "my-task"
    assert not list((ROOT / "skyrl_core").rglob("cookiecutter.json"))


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
    """The workflow pins the CPU torch from PyTorch's CPU index and installs skyrl from a checkout of its repository
    (skyrl is on no package index), the same lines as the generated README's install; the repository and commit
    it checks out are this checkout's."""
    import yaml

    out = generate_plugin("flow-check", tmp_path)
    flow = yaml.safe_load((out / ".github/workflows/test.yml").read_text())
    steps = flow["jobs"]["test"]["steps"]
    runs = [s["run"] for s in steps if "run" in s]
    assert "pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu" in runs
    assert "pip install './.skyrl[hf]'" in runs
    checkout = [s["with"] for s in steps if "repository" in s.get("with", {})]
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    assert checkout == [{"repository": checkout[0]["repository"], "ref": head.strip() or "main", "path": ".skyrl"}]
    assert re.fullmatch(r"[\w.-]+/[\w.-]+", checkout[0]["repository"])  # owner/name, or the OWNER/skyrl placeholder
    readme = (out / "README.md").read_text()
    for line in runs[1:-1]:
        assert line in readme, line


@pytest.mark.parametrize("origin, repository", [("git@github.com:ada/skyrl.git", "ada/skyrl"),
                                                 ("https://github.com/ada/sky-rl", "ada/sky-rl"),
                                                 ("https://gitlab.com/ada/skyrl.git", "OWNER/skyrl")])
def test_the_workflow_checks_out_the_repository_and_commit_skyrl_runs_from(tmp_path, origin, repository):
    git = ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    subprocess.run(git + ["commit", "-q", "--allow-empty", "-m", "x"], check=True)
    subprocess.run(git + ["remote", "add", "origin", origin], check=True)
    head = subprocess.run(git + ["rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    assert skyrl_checkout(tmp_path) == {"skyrl_repository": repository, "skyrl_ref": head}


def _readme_commands():
    """scripts/readme-commands as a module: its `workflow_steps` runs a generated plugin's workflow."""
    import importlib.machinery
    import importlib.util

    loader = importlib.machinery.SourceFileLoader("readme_commands", str(ROOT / "scripts" / "readme-commands"))
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader("readme_commands", loader))
    loader.exec_module(module)
    return module


def _fresh_venv(path: Path, with_pip: bool = True) -> tuple[Path, dict]:
    """A fresh venv (with its own pip, or without: ensurepip takes 15 s on a loaded machine), and the env to run in
    it (its bin/ first, nothing of the checkout on PYTHONPATH). Call :func:`_share_dependencies` after installing
    skyrl-core."""
    subprocess.run([sys.executable, "-m", "venv", str(path)] + ([] if with_pip else ["--without-pip"]), check=True,
                   capture_output=True)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "SKYRL_LOAD_PLUGINS")}
    ours = str(Path(sys.prefix) / "bin")  # this interpreter's venv: its scripts would run outside the fresh one
    env["PATH"] = ":".join([str(path / "bin")] + [p for p in env["PATH"].split(":") if p != ours])
    return path / "bin" / "python", env


def _share_dependencies(python: Path) -> None:
    """Put this interpreter's site-packages after the venv's own (a .pth line), so skyrl-core's dependencies (torch,
    transformers, ...) are not installed again while skyrl-core and the plugin are the venv's own. The editable
    installs there stay out: their finders come from .pth files, which a plain path line does not run."""
    import sysconfig

    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    Path(site, "_shared_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    # pip finds pytest satisfied there and writes no script for it: the one it would have written
    script = python.parent / "pytest"
    script.write_text(f"#!{python}\nimport sys\nfrom pytest import console_main\nsys.exit(console_main())\n")
    script.chmod(0o755)


def _imported_from(python: Path, env: dict, cwd: Path) -> str:
    return subprocess.run([str(python), "-c", "import skyrl_core; print(skyrl_core.__file__)"], env=env, cwd=cwd,
                          capture_output=True, text=True, check=True).stdout.strip()


@pytest.mark.parametrize("install", ["wheel", "editable"])
def test_skyrl_new_plugin_works_when_installed(tmp_path, install):
    """Installed into a fresh venv from a built wheel (which carries the template; its only copy is cookiecutter/ at
    the repository root) or editable (which uses the checkout's copy), and run outside the checkout: `skyrl new
    plugin` generates the documented layout."""
    python, env = _fresh_venv(tmp_path / "venv", with_pip=False)
    pip = [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps"]
    if install == "wheel":
        wheels = tmp_path / "wheels"
        subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w",
                        str(wheels), str(ROOT)], check=True, capture_output=True)
        subprocess.run(pip + ["--no-index", str(next(wheels.glob("skyrl_core-*.whl")))], env=env, check=True,
                       capture_output=True)
        _share_dependencies(python)
    else:
        _share_dependencies(python)  # setuptools, for the build without isolation
        subprocess.run(pip + ["--no-build-isolation", "-e", str(ROOT)], env=env, check=True, capture_output=True)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    where = _imported_from(python, env, elsewhere)
    assert where.startswith(str(tmp_path / "venv" / "lib")) if install == "wheel" else \
        where == str(ROOT / "skyrl_core" / "__init__.py")
    proc = subprocess.run([str(tmp_path / "venv" / "bin" / "skyrl"), "new", "plugin", "letter-count", "--no-input"],
                          env={**env, "SKYRL_LOAD_PLUGINS": ""}, cwd=elsewhere, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = elsewhere / "skyrl-letter-count"
    assert _tree(out) == EXPECTED_TREE
    assert _tree(out) == _tree(generate_plugin("letter-count", tmp_path / "from-checkout"))
    if install == "wheel":  # a wheel knows no repository: the placeholders
        assert 'repository: "OWNER/skyrl", ref: "main"' in (out / ".github/workflows/test.yml").read_text()


@pytest.mark.slow
def test_the_generated_workflow_runs_as_written(tmp_path):
    """The generated plugin's CI workflow, its `run:` lines as written (scripts/readme-commands' `workflow_steps`),
    from the plugin's directory in a fresh venv, with this checkout linked where the workflow checks skyrl out:
    skyrl-core installs from the checkout's path, the plugin installs, and its tests pass (listing by `skyrl
    plugins`, tool, splits, verifier attacks, a real `skyrl eval` of two rows). torch and the other dependencies
    come from the shared site-packages (so pip finds them satisfied and downloads nothing); skyrl-core and the
    plugin are the venv's own."""
    python, env = _fresh_venv(tmp_path / "venv")
    _share_dependencies(python)
    plugin = generate_plugin("flow-run", tmp_path)
    steps = _readme_commands().workflow_steps(plugin, ROOT, Path(sys.executable), env)
    assert [cwd for _label, cwd, _env, _script in steps] == [plugin] * len(steps)
    for _label, cwd, step_env, script in steps:
        proc = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=cwd, env=step_env, capture_output=True,
                              text=True, stdin=subprocess.DEVNULL)
        assert proc.returncode == 0, f"{script}\n{(proc.stdout + proc.stderr)[-3000:]}"
    assert "11 passed" in proc.stdout, proc.stdout[-1500:]
    assert _imported_from(python, env, plugin).startswith(str(tmp_path / "venv" / "lib"))
