"""skyrl-verifiers: found through its entry point, what it registers, and bad input named clearly."""

import json
import subprocess
import sys

import pytest
from skyrl_core import DataSpec, Trajectory

pytest.importorskip("verifiers")

from skyrl_verifiers.tasks import verifiers_task  # noqa: E402
from skyrl_verifiers.verifiers import rubric_score  # noqa: E402


def test_listed_by_skyrl_plugins_with_its_capabilities():
    proc = subprocess.run([sys.executable, "-m", "skyrl_core.cli", "plugins", "--json"], capture_output=True,
                          text=True, check=True)
    plugin = {p["name"]: p for p in json.loads(proc.stdout)}["verifiers"]
    assert plugin["distribution"] == "skyrl-verifiers"
    assert not plugin.get("error"), plugin.get("error")
    caps = plugin["capabilities"]
    assert caps["tasks"] == ["verifiers"] and caps["verifiers"] == ["verifiers_rubric"]
    assert caps["instruction_builders"] == ["verifiers_prompt"]


def test_the_task_runs_an_external_harness():
    assert verifiers_task.harness is not None and verifiers_task.tools == ()


def test_the_shipped_rows_load_as_instances_of_an_installed_taskset():
    pytest.importorskip("reverse_text", reason="pip install ./environments/reverse_text (verifiers repository)")
    test = verifiers_task.select(DataSpec(name="reverse-text", split="test", options={"shipped_data": "reverse_text"}))
    assert [(i.id, i.data["prompt"]) for i in test] == [("reverse-text-0", "hello world"), ("reverse-text-1", "abc")]
    assert len(verifiers_task.select(DataSpec(name="reverse-text", split="train",
                                              options={"shipped_data": "reverse_text"}))) == 3


@pytest.mark.parametrize("spec, match", [
    (DataSpec(), "needs data.name"),
    (DataSpec(name="no-such-taskset-xyz"), "'no-such-taskset-xyz' is not installed"),
    (DataSpec(name="reverse-text", options={"shipped_data": "nope"}), "shipped_data 'nope' is not shipped; valid: "
                                                                      "reverse_text"),
])
def test_bad_data_is_named(spec, match):
    if spec.name == "reverse-text":
        pytest.importorskip("reverse_text", reason="pip install ./environments/reverse_text (verifiers repository)")
    with pytest.raises(ValueError, match=match):
        verifiers_task.select(spec)


async def test_a_trajectory_without_a_recorded_trace_is_unverifiable_not_zero():
    traj = Trajectory(instance_id="reverse-text-0", sample_index=0, task="verifiers", group_id="g")
    verdict = await rubric_score(traj, None, None)
    assert verdict.outcome == "unverifiable" and "no verifiers trace" in verdict.reason


@pytest.mark.parametrize("taskset, n_train, n_test", [("skyrl-arithmetic", 8, 8), ("skyrl-codebook", 5, 3),
                                                      ("skyrl-guess", 6, 6)])
def test_the_shipped_environments_load_with_disjoint_splits(taskset, n_train, n_test):
    """The three environments this plugin ships need no install; train and test never pose the same task."""
    from skyrl_verifiers.environments import environment

    train = verifiers_task.select(DataSpec(name=taskset, split="train"))
    test = verifiers_task.select(DataSpec(name=taskset, split="test"))
    assert (len(train), len(test)) == (n_train, n_test)
    answers = lambda split: [t.data.answer for t in environment(taskset, {"dataset_split": split})[1]]  # noqa: E731
    if taskset != "skyrl-guess":  # guess's prompt is one sentence; its tasks differ by the secret only
        assert not {i.data["prompt"] for i in train} & {i.data["prompt"] for i in test}
    assert answers("train") != answers("test")


def test_a_shipped_environments_bad_split_is_named():
    with pytest.raises(ValueError, match="skyrl-codebook: dataset_split 'dev'; valid: train, test"):
        verifiers_task.select(DataSpec(name="skyrl-codebook", split="dev"))


@pytest.mark.parametrize("reply, answer", [("<answer>12</answer>", 12), ("3 + 4 = 7", 7), ("no number", None),
                                           ("<answer>5</answer>, not 9", 5), ("<answer> -2 </answer>", -2)])
def test_arithmetic_reads_the_tagged_answer_else_the_last_integer(reply, answer):
    from skyrl_verifiers.envs.arithmetic import answer_of

    assert answer_of(reply) == answer
