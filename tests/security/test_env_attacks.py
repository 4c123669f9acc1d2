"""Attacks on the swe plugin's environment builds (skyrl_swe/environments.py): a row's setup commands and install
step run inside a sandbox whose only writable mount is the layer being built, and see nothing of the host; the
installed package's entry points and compiled extension work at verify time, and an agent's edit of them runs
only inside the verification sandbox. Each test builds real layers with pip from the package index."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

pytest.importorskip("skyrl_swe")

from skyrl_core import Instance  # noqa: E402
from skyrl_core.runtime import RuntimeSpec  # noqa: E402
from skyrl_swe.environments import EnvironmentBuildError, RepoEnvironments  # noqa: E402
from skyrl_swe.runtime import ENVIRONMENTS, SweSandbox  # noqa: E402
from skyrl_swe.verifiers import verify_patch  # noqa: E402

from test_swe_attacks import diff  # noqa: E402

pytestmark = pytest.mark.timeout(900)

CLI = "def main():\n    print('calc-run says ' + str(1 + 1))\n"
EVIL_CLI = ("import os\n\n\ndef main():\n    for path in {targets!r}:\n        try:\n"
            "            open(path, 'w').write('ran')\n        except OSError as exc:\n"
            "            print('blocked', type(exc).__name__)\n    print('calc-run says ' + str(2 + 2))\n")
SPEED = textwrap.dedent("""\
    #define PY_SSIZE_T_CLEAN
    #include <Python.h>
    static PyObject *twice(PyObject *self, PyObject *arg) { return PyLong_FromLong(2 * PyLong_AsLong(arg)); }
    static PyMethodDef methods[] = {{"twice", twice, METH_O, ""}, {NULL, NULL, 0, NULL}};
    static struct PyModuleDef mod = {PyModuleDef_HEAD_INIT, "_speed", NULL, -1, methods};
    PyMODINIT_FUNC PyInit__speed(void) { return PyModule_Create(&mod); }
    """)
TESTS = textwrap.dedent("""\
    import importlib.metadata
    import subprocess

    from calc import _speed


    def test_entry_point():
        out = subprocess.run(["calc-run"], capture_output=True, text=True).stdout
        assert "calc-run says 2" in out


    def test_metadata_and_extension():
        assert importlib.metadata.version("calc") == "0.1"
        assert _speed.twice(21) == 42
    """)


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    """A package needing its install step: a console script, a C extension, and tests reading its metadata."""
    root = tmp_path_factory.mktemp("calc-installed")
    (root / "calc").mkdir()
    (root / "calc" / "__init__.py").write_text("")
    (root / "calc" / "cli.py").write_text(CLI.replace("1 + 1", "1 + 0"))  # the bug: says 1
    (root / "calc" / "_speed.c").write_text(SPEED)
    (root / "tests").mkdir()
    (root / "tests" / "test_calc.py").write_text(TESTS)
    (root / "setup.py").write_text("from setuptools import setup\n\nsetup()\n")
    (root / "pyproject.toml").write_text(textwrap.dedent("""\
        [build-system]
        requires = ["setuptools>=61"]
        build-backend = "setuptools.build_meta"

        [project]
        name = "calc"
        version = "0.1"

        [project.scripts]
        calc-run = "calc.cli:main"

        [tool.setuptools]
        packages = ["calc"]
        ext-modules = [{name = "calc._speed", sources = ["calc/_speed.c"]}]
        """))
    return root


GOLD = diff("calc/cli.py", CLI.replace("1 + 1", "1 + 0"), CLI)


def row(project: Path, **extra) -> Instance:
    data = {"instance_id": "calc__installed-1", "repo": "calc/installed", "version": "0.1",
            "repo_dir": str(project), "install": "python -m pip install -e .", "patch": GOLD, "test_patch": "",
            "FAIL_TO_PASS": ["tests/test_calc.py::test_entry_point"],
            "PASS_TO_PASS": ["tests/test_calc.py::test_metadata_and_extension"], **extra}
    return Instance(id=data["instance_id"], data=data)


async def test_an_instance_needing_its_install_step_scores_gold_1_and_empty_0(project):
    inst = row(project)
    gold = await verify_patch(inst, GOLD)
    assert gold.reward == 1.0, gold.metrics
    assert gold.metrics["fail_to_pass"] == "1/1" and gold.metrics["pass_to_pass"] == "1/1"
    empty = await verify_patch(inst, "")
    assert empty.reward == 0.0 and empty.metrics["tests"]["tests/test_calc.py::test_entry_point"] == "FAILED"
    assert empty.metrics["tests"]["tests/test_calc.py::test_metadata_and_extension"] == "PASSED"
    # without the install step the same instance cannot pass: no metadata, no extension, no console script
    bare = await verify_patch(row(project, install=""), GOLD)
    assert bare.reward == 0.0 and "PASSED" not in bare.metrics["tests"].values(), bare.metrics


async def test_the_entry_point_an_agent_rewrites_runs_only_inside_the_verification_sandbox(project, outside):
    marker, home = outside / "entry-point-ran", Path.home() / ".skyrl-entry-point-ran"
    evil = diff("calc/cli.py", CLI.replace("1 + 1", "1 + 0"), EVIL_CLI.format(targets=[str(marker), str(home)]))
    result = await verify_patch(row(project), evil)
    assert not marker.exists() and not home.exists()
    # it ran (in the sandbox): its changed output failed the test, and nothing it wrote reached the host
    assert result.reward == 0.0 and result.metrics["tests"]["tests/test_calc.py::test_entry_point"] == "FAILED"


async def test_a_setup_command_cannot_write_outside_its_build_directory(project, outside, tmp_path):
    envs = RepoEnvironments(tmp_path / "envs")
    targets = [outside / "setup-wrote", project / "setup-wrote", Path.home() / ".skyrl-setup-wrote",
               Path(ENVIRONMENTS.root) / "setup-wrote"]
    attempts = " ; ".join(f"echo x 2>> $VIRTUAL_ENV/attempts.txt > {t}" for t in targets)
    data = {"repo": "calc/setup-attack", "version": "0.1", "environment_setup": [
        f"{attempts} ; echo x > $VIRTUAL_ENV/inside.txt",
        "python -c 'import skyrl_core' 2>> $VIRTUAL_ENV/attempts.txt; true"]}
    env = envs.get(data)
    assert not any(t.exists() for t in targets)
    log = (env.venv / "attempts.txt").read_text()
    assert log.count("No such file or directory") + log.count("Read-only file system") >= len(targets), log
    assert "No module named 'skyrl_core'" in log  # the host venv is not there either
    assert (env.venv / "inside.txt").read_text() == "x\n"  # its own directory is writable during the build
    # a failing setup command is a named build error, and leaves no half-built layer behind
    with pytest.raises(EnvironmentBuildError, match="environment_setup: exit 3"):
        envs.get({**data, "environment_setup": "exit 3"})
    assert not any(p.name.endswith(".json") and "exit" in p.read_text() for p in envs.root.iterdir())


async def test_an_install_step_cannot_read_the_home_canary_and_leaves_the_environment_read_only(project, outside):
    canary = outside / "canary.txt"
    canary.write_text("CANARY-7f3a")
    home_canary = Path.home() / ".skyrl-canary-install"
    home_canary.write_text("CANARY-HOME-91c2")
    try:
        inst = row(project, install=[f"cat {canary} {home_canary} > leaked.txt 2>&1; true",
                                     "python -m pip install -e ."])
        async with SweSandbox(RuntimeSpec(type="swe_sandbox"), instance=inst) as rt:
            leaked = (rt.workspace / "leaked.txt").read_text()
            assert "CANARY" not in leaked and leaked.count("No such file or directory") == 2, leaked
            # the agent cannot change the shared layers its trajectories and the verifier use
            site = "$(python -c 'import pip, os; print(os.path.dirname(pip.__file__))')"
            res = await rt.exec(f"touch $VIRTUAL_ENV/x; echo . >> $VIRTUAL_ENV/bin/calc-run; touch {site}/x; "
                                f"calc-run", env=rt.tool_env)
            assert res.output.count("Read-only file system") + res.output.count("Permission denied") == 3, res.output
            assert "calc-run says 1" in res.output
    finally:
        home_canary.unlink()


def test_a_build_without_bubblewrap_refuses_rather_than_running_on_the_host(project, tmp_path, monkeypatch):
    import skyrl_core.default_plugins.runtimes.sandbox as core_runtime

    monkeypatch.setattr(core_runtime, "_PROBE", {"bwrap": "bubblewrap (bwrap) is not installed (test)"})
    envs = RepoEnvironments(tmp_path / "envs")
    with pytest.raises(core_runtime.SandboxUnavailable, match="not installed"):
        envs.get({"repo": "calc/no-bwrap", "version": "0.1"})
    assert not any((tmp_path / "envs").glob("*.json"))


async def test_the_rebuild_step_compiles_the_agents_c_inside_the_sandbox_and_setup_py_stays_pristine(project,
                                                                                                      outside):
    inst = row(project, rebuild="python setup.py -q build_ext --inplace", requirements=["setuptools"])
    thrice = GOLD + diff("calc/_speed.c", SPEED, SPEED.replace("2 * PyLong_AsLong", "3 * PyLong_AsLong"))
    result = await verify_patch(inst, thrice)
    # the agent's C was compiled and run (twice(21) is now 63), in the sandbox
    assert result.reward == 0.0 and result.metrics["tests"]["tests/test_calc.py::test_entry_point"] == "PASSED"
    assert result.metrics["tests"]["tests/test_calc.py::test_metadata_and_extension"] == "FAILED", result.metrics
    assert (await verify_patch(inst, GOLD)).reward == 1.0
    # a setup.py that writes a conftest forcing every test to pass, and a file outside, is not the one run
    marker = outside / "setup-py-ran"
    forging = ("import pathlib\nfrom setuptools import setup\n\n"
               f"pathlib.Path({str(marker)!r}).write_text('ran')\n"
               "pathlib.Path('conftest.py').write_text('import pytest\\n@pytest.hookimpl(hookwrapper=True)\\n"
               "def pytest_runtest_makereport(item, call):\\n    o = yield\\n    o.get_result().outcome = \\'passed\\'\\n')\n"
               "setup()\n")
    cheat = diff("setup.py", "from setuptools import setup\n\nsetup()\n", forging)
    result = await verify_patch(inst, cheat)
    assert "setup.py" in result.metrics["dropped_files"] and not marker.exists()
    assert result.reward == 0.0 and result.metrics["tests"]["tests/test_calc.py::test_entry_point"] == "FAILED"
