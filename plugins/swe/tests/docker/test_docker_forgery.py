"""Forging reward 1 in the docker runtime (issue #30): the attacks of ``tests/security/test_swe_forgery.py``
against fresh containers from the pristine image, a compiled ``sitecustomize.pyc`` written with the agent's
own shell and carried by the container's binary diff, and a verification container killed under its test run."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from skyrl_core.runtime import RuntimeSpec
from skyrl_swe.docker_runtime import DockerRuntime
from skyrl_swe.verifiers import swe_tests, verify_patch

pytestmark = pytest.mark.timeout(900)
REPO = Path(__file__).resolve().parents[4]


def _load(name: str):
    path = REPO / "tests" / "security" / f"{name}.py"
    sys.path.insert(0, str(path.parent))  # the forgery suite imports the attack suite by name
    try:
        spec = importlib.util.spec_from_file_location(f"skyrl_swe_{name}_cases", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(path.parent))


A = _load("test_swe_attacks")
F = _load("test_swe_forgery")
ADD = "tests/test_core.py::test_add"


@pytest.fixture(scope="module")
def calc(tmp_path_factory, docker_engine, base_image):
    from skyrl_swe.images import build_instance_image

    project = A.project.__wrapped__(tmp_path_factory)
    build_instance_image(docker_engine, dict(A.instance(project).data))
    return project


@pytest.fixture
def no_scan(monkeypatch):
    from skyrl_swe import verifiers

    monkeypatch.setattr(verifiers, "tamper_findings", lambda patch: [])


async def verify(inst, patch: str, cls=DockerRuntime):
    return await verify_patch(inst, patch, cls, RuntimeSpec(type="docker"))


@pytest.mark.parametrize("attack", list(F.ATTACKS))
async def test_attack_hidden_from_the_scan_betrays_itself_in_docker(calc, attack):
    _, hidden = F.ATTACKS[attack]
    result = await verify(A.instance(calc), F.init_py(hidden))
    if attack in F.FORGER_FINDS_NOTHING:  # the descriptor it names is closed: an honest failure
        assert (result.reward, result.outcome, result.metrics["tests"][ADD]) == (0.0, "scored", "FAILED"), result
        return
    assert (result.reward, result.outcome) == (0.0, "tampered"), result
    assert "canary test" in result.reason


async def test_a_pytest_py_at_the_root_never_runs_in_docker(calc, no_scan):
    result = await verify(A.instance(calc), A.diff("pytest.py", None, F.SHADOW_PYTEST))
    assert (result.reward, result.outcome) == (0.0, "scored"), result
    assert result.metrics["tests"][ADD] == "FAILED"


async def test_a_compiled_sitecustomize_from_the_agents_shell(calc, monkeypatch):
    """bash in the agent's container compiles ``sitecustomize`` with the image's own Python and leaves only the
    ``.pyc``; the container's diff carries it (``--binary``) to swe_tests."""
    inst = A.instance(calc)
    async with DockerRuntime(RuntimeSpec(type="docker"), instance=inst) as rt:
        res = await rt.exec("printf 'import calc.core\\ncalc.core.add = lambda a, b: a + b\\n' > /tmp/sitecustomize.py"
                            " && python3 -c \"import py_compile; py_compile.compile('/tmp/sitecustomize.py', "
                            "cfile='sitecustomize.pyc')\" && ls sitecustomize.pyc")
        assert res.exit_code == 0, res.output
        result = await swe_tests(None, rt, inst)
        assert "GIT binary patch" in result.metrics["model_patch"]
        assert (result.reward, result.outcome) == (0.0, "tampered"), result
        assert "sitecustomize.pyc: a compiled file" in result.reason
        patch = result.metrics["model_patch"]
    monkeypatch.setattr("skyrl_swe.verifiers.tamper_findings", lambda patch: [])
    result = await verify(inst, patch)  # applied, but the launcher never lets site import it
    assert result.metrics["patch_applied"] and (result.reward, result.outcome) == (0.0, "scored"), result
    assert result.metrics["tests"][ADD] == "FAILED"


class KilledUnderTests(DockerRuntime):
    """A verification container really killed (``docker kill``) as its test run starts."""

    async def exec_with_channel(self, argv, env, timeout_s):
        self.client.api.kill(self.container_name)
        return await super().exec_with_channel(argv, env, timeout_s)


async def test_a_container_killed_under_the_test_run_is_unverifiable(calc):
    result = await verify(A.instance(calc), A.GOLD, KilledUnderTests)
    assert result.outcome == "unverifiable", result
    assert "RuntimeLost" in result.reason and "control run" in result.reason, result.reason
