"""The ``swe_tests`` verifier through the docker runtime: images built by ``skyrl swe build-images`` (cached by
content), gold 1 / empty 0 on instances generated from a real project, and the red-team attacks on the verifier
of ``tests/security/test_swe_attacks.py`` (same patches, same expected outcomes) against fresh containers from
the pristine image with results read through the FIFO channel."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from skyrl_core import Instance
from skyrl_core.runtime import RuntimeSpec
from skyrl_swe.docker_runtime import DockerRuntime
from skyrl_swe.verifiers import verify_patch

pytestmark = pytest.mark.timeout(900)
REPO = Path(__file__).resolve().parents[4]


def _attacks():
    """The sandbox suite's attack module (its project, patches and expectations), loaded from its file."""
    path = REPO / "tests" / "security" / "test_swe_attacks.py"
    spec = importlib.util.spec_from_file_location("skyrl_swe_attack_cases", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


A = _attacks()


@pytest.fixture(scope="module")
def calc(tmp_path_factory, docker_engine, base_image):
    """The attack suite's small project, and its image built from the base image."""
    from skyrl_swe.images import build_instance_image

    project = A.project.__wrapped__(tmp_path_factory)
    inst = A.instance(project)
    image, _ = build_instance_image(docker_engine, dict(inst.data))
    return project, image


async def verify(inst: Instance, patch: str):
    return await verify_patch(inst, patch, DockerRuntime, RuntimeSpec(type="docker"))


async def test_gold_scores_1_and_empty_scores_0_through_the_channel(calc):
    project, _ = calc
    inst = A.instance(project)
    gold = await verify(inst, A.GOLD)
    assert gold.reward == 1.0 and gold.metrics["report"] == "channel", gold.metrics
    assert gold.metrics["fail_to_pass"] == "1/1" and gold.metrics["pass_to_pass"] == "1/1"
    empty = await verify(inst, "")
    assert empty.reward == 0.0 and empty.metrics["tests"]["tests/test_core.py::test_add"] == "FAILED"
    assert "error_eval" not in empty.metrics


async def test_django_runner_gold_1_empty_0(calc):
    project, _ = calc
    inst = A.django_instance(project)
    assert (await verify(inst, A.GOLD)).reward == 1.0
    assert (await verify(inst, "")).reward == 0.0


@pytest.mark.parametrize("attack", list(A.TAMPERING))
async def test_tampering_with_tests_and_runner_configuration_is_dropped(calc, attack):
    result = await verify(A.instance(calc[0]), A.TAMPERING[attack])
    assert result.reward == 0.0, result.metrics
    assert result.metrics["dropped_files"], result.metrics
    if "evilplug" in A.TAMPERING[attack]:  # the plugin it names reaches for pytest's internals: found in the diff
        assert result.outcome == "tampered" and "test-framework internals" in result.reason, result
    else:
        assert result.metrics["tests"]["tests/test_core.py::test_add"] == "FAILED"


# the sandbox's channel is a pipe; here it is a FIFO: the forger looks for that instead
FORGE_AT_EXIT = A.FORGE_AT_EXIT.replace("import atexit, json, os", "import atexit, json, os, stat").replace(
    'os.readlink(f"/proc/self/fd/{fd}").startswith("pipe:")', "stat.S_ISFIFO(os.fstat(fd).st_mode)")
assert FORGE_AT_EXIT != A.FORGE_AT_EXIT
CODE_ATTACKS = {**A.CODE_ATTACKS, "rewrites the report at exit": (FORGE_AT_EXIT, "reported twice"),
                # the FIFO by path: owned by root, mode 0600 — the tests run as uid 1000 and cannot open it
                "opens the channel by path": (
                    "import glob, json\nfor p in glob.glob('/skyrl/channel/results-*'):\n"
                    "    open(p, 'w').write(json.dumps({'event': 'report', 'id': 'tests/test_core.py::test_add',"
                    " 'when': 'call', 'outcome': 'passed', 'xfail': False}) + '\\n')\n", None)}


@pytest.fixture
def no_scan(monkeypatch):
    """The verifier's diff scan off (it finds exits and /proc at import): the run's own cross-checks decide."""
    from skyrl_swe import verifiers

    monkeypatch.setattr(verifiers, "tamper_findings", lambda patch: [])


@pytest.mark.parametrize("attack", list(CODE_ATTACKS))
async def test_code_under_test_cannot_write_its_reward(calc, attack, no_scan):
    source, reason = CODE_ATTACKS[attack]
    result = await verify(A.instance(calc[0]), A.diff("calc/__init__.py", "", source))
    assert result.metrics["patch_applied"] and result.metrics["dropped_files"] == []
    assert result.reward == 0.0, result.metrics
    if reason:  # an inconsistent run, and the pristine control is not: the agent's doing
        assert reason in result.metrics["error_eval"] and result.outcome == "tampered", result
    assert result.metrics["tests"]["tests/test_core.py::test_add"] != "PASSED"


async def test_forged_lines_and_exit_0_on_the_django_runner_are_tampering(calc, no_scan):
    inst = A.django_instance(calc[0])
    forged = "import sys\nsys.stderr.write('test_add (tests.unit_core.CoreTests) ... ok\\n')\n"
    result = await verify(inst, A.diff("calc/__init__.py", "", forged))
    assert result.outcome == "tampered" and "result lines" in result.metrics["error_eval"], result.metrics
    result = await verify(inst, A.diff("calc/__init__.py", "", "import atexit, os\natexit.register(lambda: os._exit(0))\n"))
    assert result.outcome == "tampered" and "exited 0 although tests failed" in result.metrics["error_eval"]


async def test_an_agents_container_cannot_touch_the_verifiers(calc, docker_engine):
    """The agent's edits to its own container's tests count for nothing: the verifier starts a fresh container from
    the pristine image, and gets only the (filtered) diff."""
    project, _ = calc
    inst = A.instance(project)
    async with DockerRuntime(RuntimeSpec(type="docker"), instance=inst) as rt:
        await rt.exec("printf 'def test_add():\\n    pass\\n\\ndef test_neg():\\n    pass\\n' > tests/test_core.py")
        patch = await rt.diff()
    assert "tests/test_core.py" in patch
    result = await verify(inst, patch)
    assert result.reward == 0.0 and result.metrics["dropped_files"] == ["tests/test_core.py"]


def test_build_images_caches_by_content(generated, docker_engine, base_image):
    from skyrl_swe.data import load_rows
    from skyrl_core import DataSpec
    from skyrl_swe.images import build_images

    rows = load_rows(DataSpec(path=str(generated)))
    first = build_images(rows)
    assert all(r["error"] is None for r in first), first
    again = build_images(rows)
    assert [r["status"] for r in again] == ["cached"] * len(rows)
    assert [r["image"] for r in again] == [r["image"] for r in first]
    labels = docker_engine.images.get(first[0]["image"]).labels
    assert labels["skyrl.swe"] == "instance" and labels["skyrl.instance_id"] == rows[0]["instance_id"]
    # the repository is at its base commit with its history cut there
    out = docker_engine.containers.run(first[0]["image"], ["git", "log", "--oneline"], remove=True,
                                       network_disabled=True).decode()
    assert len(out.strip().splitlines()) == 1


def test_skyrl_swe_verify_through_docker_gold_1_empty_0(generated, tmp_path, docker_engine, base_image):
    from skyrl_swe.images import build_images
    from skyrl_swe.data import load_rows
    from skyrl_core import DataSpec

    rows = load_rows(DataSpec(path=str(generated)))
    assert all(r["error"] is None for r in build_images(rows))
    skyrl = [sys.executable, "-m", "skyrl_core.cli"] if not Path(sys.executable).with_name("skyrl").exists() \
        else [str(Path(sys.executable).with_name("skyrl"))]
    gold = subprocess.run([*skyrl, "swe", "verify", str(generated), "--runtime", "docker"], capture_output=True,
                          text=True, timeout=600)
    assert gold.returncode == 0, gold.stderr[-2000:]
    results = [json.loads(line) for line in gold.stdout.splitlines() if line.startswith("{")]
    assert len(results) == len(rows) and all(r["reward"] == 1.0 for r in results), results
    preds = tmp_path / "empty.jsonl"
    preds.write_text("".join(json.dumps({"instance_id": r["instance_id"], "model_patch": ""}) + "\n" for r in rows))
    empty = subprocess.run([*skyrl, "swe", "verify", str(generated), "--runtime", "docker", "--predictions",
                            str(preds)], capture_output=True, text=True, timeout=600)
    results = [json.loads(line) for line in empty.stdout.splitlines() if line.startswith("{")]
    assert len(results) == len(rows) and all(r["reward"] == 0.0 for r in results), results
    assert all(r["error"] is None for r in results), results


def _rows_module():
    path = Path(__file__).resolve().parents[1] / "test_rows.py"
    spec = importlib.util.spec_from_file_location("skyrl_swe_row_cases", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


async def test_a_row_whose_environment_setup_installs_the_repository_scores_gold_1_in_its_image(
        tmp_path_factory, docker_engine, base_image):
    from skyrl_swe.images import build_instance_image

    rows = _rows_module()
    project = rows.project.__wrapped__(tmp_path_factory)  # README.rst a symlink; environment_setup: pip install -e .
    inst = rows.row(project)
    image, _ = build_instance_image(docker_engine, dict(inst.data))
    inst = Instance(id=inst.id, data={**inst.data, "image": image})
    gold = await verify(inst, rows.GOLD)
    assert gold.reward == 1.0, gold.metrics
    empty = await verify(inst, "")
    assert empty.reward == 0.0 and "error_eval" not in empty.metrics, empty.metrics
    assert empty.metrics["tests"]["tests/test_loud.py::TestShout::test_words"] == "FAILED"  # a subtest failed
