"""skyrl-gymenvs: found through its entry point, and what it registers works — the tool, the
task's splits, and the verifier, including answers that try to game it."""

import json
import subprocess
import sys

import pytest
from skyrl_core import DataSpec, ToolContext, Trajectory
from skyrl_core.errors import ToolArgumentsError

from skyrl_gymenvs.tasks import count_task
from skyrl_gymenvs.tools import count_letters_tool
from skyrl_gymenvs.verifiers import exact_count


def test_listed_by_skyrl_plugins_with_its_capabilities():
    proc = subprocess.run([sys.executable, "-m", "skyrl_core.cli", "plugins", "--json"], capture_output=True,
                          text=True, check=True)
    plugin = {p["name"]: p for p in json.loads(proc.stdout)}["gymenvs"]
    assert plugin["distribution"] == "skyrl-gymenvs"
    assert not plugin.get("error"), plugin.get("error")
    caps = plugin["capabilities"]
    assert caps["tools"] == ["gymenvs_count_letters"]
    assert caps["tasks"] == ["gymenvs_count"]
    assert caps["verifiers"] == ["gymenvs_exact"]
    assert caps["instruction_builders"] == ["gymenvs_count"]


async def test_tool_counts_and_rejects_bad_arguments():
    assert (await count_letters_tool.call({"text": "banana", "letter": "a"}, ToolContext())).output == "3"
    with pytest.raises(ToolArgumentsError, match="argument 'letter'"):
        await count_letters_tool.call({"text": "banana", "letter": "an"}, ToolContext())


def test_splits_are_fixed_and_disjoint():
    train = count_task.select(DataSpec(split="train"))
    test = count_task.select(DataSpec(split="test"))
    assert (len(train), len(test)) == (16, 8)
    assert [i.data["word"] for i in test[:2]] == ["strawberry", "hippopotamus"]
    assert all(i.data["answer"] == i.data["word"].count(i.data["letter"]) for i in train + test)
    assert not {i.data["word"] for i in train} & {i.data["word"] for i in test}
    with pytest.raises(ValueError, match="valid: train, test"):
        count_task.select(DataSpec(split="validation"))


def _trajectory(answer=None, final=""):
    return Trajectory(instance_id="test-0", sample_index=0, task=count_task.name, group_id="g", answer=answer,
                      messages=[{"role": "assistant", "content": final}])


async def test_verifier_rewards_the_right_count():
    strawberry = count_task.select(DataSpec(split="test", limit=1))[0]
    assert (await exact_count(_trajectory(answer="3"), None, strawberry)).reward == 1.0
    assert (await exact_count(_trajectory(final="The letter occurs 3 times."), None, strawberry)).reward == 1.0
    assert (await exact_count(_trajectory(answer="2"), None, strawberry)).reward == 0.0


@pytest.mark.parametrize("hedge", ["2 or 3", "1, 2, 3, 4, 5", "3.0", "-3", "three", ""])
async def test_verifier_is_not_fooled_by_hedged_answers(hedge):
    strawberry = count_task.select(DataSpec(split="test", limit=1))[0]
    result = await exact_count(_trajectory(answer=hedge or None, final=hedge), None, strawberry)
    assert result.reward == 0.0
