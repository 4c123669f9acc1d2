"""GSM8K tasks on the real data: loaders, answer extraction on every reference solution, steps, verifier."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from skyrl_core.errors import ConfigError, MissingExtraError
from skyrl_core.default_plugins.gsm8k.dataset import (calculation_steps, evaluate, extract_number, final_answer,
                                                   load_gsm8k, load_gsm8k_steps, read_rows)
from skyrl_core.default_plugins.gsm8k.instructions import build_instruction
from skyrl_core.default_plugins.gsm8k.verifiers import gsm8k_answer
from skyrl_core.tasks import DataSpec, Instance, run_verifier
from skyrl_core.transitions import Trajectory


def traj(answer=None, messages=()):
    t = Trajectory(instance_id="0", sample_index=0, task="gsm8k", group_id="g")
    t.answer = answer
    t.messages = list(messages)
    return t


def test_bundled_splits_load_offline():
    test = load_gsm8k(DataSpec(split="test"))
    train = load_gsm8k(DataSpec(split="train"))
    assert len(test) == 1319 and len(train) == 7473
    first = test[0]
    assert first.id == "0"
    assert first.data["answer"] == "18"
    assert first.data["question"].startswith("Janet")
    assert first.data["solution"].endswith("#### 18")
    assert set(first.data) == {"question", "answer", "solution", "steps"}
    assert [i.id for i in test] == [str(k) for k in range(1319)]


def test_bundled_copy_is_the_upstream_file():
    """The bundled files are byte for byte the upstream ones (their sha256 in SOURCE.txt, recorded from
    openai/grade-school-math): checked in CI without the ../shared folder this test used to skip without."""
    import hashlib

    data = Path(__file__).resolve().parents[1] / "skyrl_core" / "default_plugins" / "gsm8k" / "data"
    recorded = dict(line.split()[::-1] for line in (data / "SOURCE.txt").read_text().split("sha256:")[1].splitlines()
                    if line.strip())
    assert set(recorded) == {"test.jsonl", "train.jsonl"}
    for name, digest in recorded.items():
        assert hashlib.sha256((data / name).read_bytes()).hexdigest() == digest, name


# the GSM8K copy inside the package (MIT, skyrl_core/default_plugins/gsm8k/data/LICENSE): the tests need nothing
# outside the repo
BUNDLED_TEST = Path(__file__).resolve().parents[1] / "skyrl_core" / "default_plugins" / "gsm8k" / "data" / "test.jsonl"


def test_commas_removed_from_answers():
    rows = [json.loads(line) for line in BUNDLED_TEST.open()]
    comma_rows = [i for i, r in enumerate(rows) if "," in r["answer"].rsplit("####", 1)[1]]
    assert len(comma_rows) == 14
    test = load_gsm8k(DataSpec(split="test"))
    assert all(re.fullmatch(r"-?\d+(\.\d+)?", test[i].data["answer"]) for i in comma_rows)
    assert test[comma_rows[0]].data["answer"] == rows[comma_rows[0]]["answer"].rsplit("####", 1)[1].strip().replace(",", "")


def test_every_reference_solution_parses():
    rows = [json.loads(line) for line in BUNDLED_TEST.open()]
    assert len(rows) == 1319
    instances = load_gsm8k(DataSpec(path=str(BUNDLED_TEST.parent), split="test"))
    parsed = 0
    for row, inst in zip(rows, instances):
        expected = float(row["answer"].rsplit("####", 1)[1].strip().replace(",", ""))
        assert float(final_answer(row["answer"])) == expected
        # the verifier's extractor on the whole worked answer finds the same number ("#### n" wins)
        assert extract_number(row["answer"]) == expected
        # and a trajectory whose last message is the worked answer gets reward 1
        result = gsm8k_answer(traj(messages=[{"role": "assistant", "content": row["answer"]}]), None, inst)
        parsed += result.reward == 1.0
    assert parsed == 1319


def test_steps_extraction_counts():
    all_steps = load_gsm8k_steps(DataSpec(split="test", options={"verified": False}))
    verified = load_gsm8k_steps(DataSpec(split="test"))
    single = load_gsm8k_steps(DataSpec(split="test", options={"single_op": True}))
    rows = read_rows(DataSpec(split="test"))
    annotations = sum(len(calculation_steps(r["answer"])) for r in rows)
    assert annotations == 4282
    # 76 annotations are a bare number ("<<125=125>>"), not a calculation; every other one states its exact value
    assert len(all_steps) == len(verified) == 4206
    assert len(single) == 3647
    assert all(len(s.data["operators"]) == 1 for s in single)
    ids = [s.id for s in all_steps]
    assert len(set(ids)) == len(ids)
    assert all(re.fullmatch(r"\d+-\d+", i) for i in ids)
    first = verified[0]
    assert (first.id, first.data["question"], first.data["answer"]) == ("0-0", "Calculate 16-3-4.", "9")
    by_id = {s.id: s for s in verified}
    assert by_id["0-1"].data["question"] == "Calculate 9*2." and by_id["0-1"].data["answer"] == "18"
    for step in verified:
        value, _ops = evaluate(step.data["expression"])
        assert abs(value - float(step.data["answer"])) <= 1e-6 * max(1.0, abs(value))


def test_verified_drops_wrong_annotations(tmp_path):
    path = tmp_path / "rounded.jsonl"
    path.write_text(json.dumps({"question": "q", "answer": "a <<10/3=3.33>> b <<2*3=6>> c <<7=7>>\n#### 6"}) + "\n")
    assert [s.id for s in load_gsm8k_steps(DataSpec(path=str(path)))] == ["0-1"]
    assert [s.id for s in load_gsm8k_steps(DataSpec(path=str(path), options={"verified": False}))] == ["0-0", "0-1"]


def test_steps_options():
    only_mul = load_gsm8k_steps(DataSpec(split="test", options={"ops": "*", "single_op": True}))
    assert only_mul and all(s.data["operators"] == "*" for s in only_mul)
    one_each = load_gsm8k_steps(DataSpec(split="test", options={"max_per_question": 1}))
    rows = {s.id.split("-")[0] for s in one_each}
    assert len(one_each) == len(rows)
    with pytest.raises(ConfigError, match="unknown data.options single_ops"):
        load_gsm8k_steps(DataSpec(split="test", options={"single_ops": True}))


def test_single_step_problems():
    single = load_gsm8k(DataSpec(split="test", options={"max_steps": 1}))
    assert len(single) == 83
    assert all(s.data["steps"] <= 1 for s in single)


def test_json_and_plain_answer_files(tmp_path):
    rows = [{"question": "What is 2+2?", "answer": "#### 4"}, {"question": "Half of 9?", "answer": 4.5}]
    path = tmp_path / "mine.json"
    path.write_text(json.dumps(rows))
    insts = load_gsm8k(DataSpec(path=str(path)))
    assert [(i.data["question"], i.data["answer"]) for i in insts] == [("What is 2+2?", "4"), ("Half of 9?", "4.5")]


def test_bad_input_errors_name_the_culprit(tmp_path, monkeypatch):
    with pytest.raises(ConfigError, match="no split 'eval'.*test, train"):
        load_gsm8k(DataSpec(split="eval"))
    with pytest.raises(ConfigError, match="does not exist"):
        load_gsm8k(DataSpec(path=str(tmp_path / "missing.jsonl")))
    with pytest.raises(ConfigError, match="folder without test.jsonl"):
        load_gsm8k(DataSpec(path=str(tmp_path)))
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question": "q"}\n')
    with pytest.raises(ConfigError, match="row 0.*needs 'question'"):
        load_gsm8k(DataSpec(path=str(bad)))
    parquet = tmp_path / "test.parquet"
    parquet.write_bytes(b"PAR1")
    monkeypatch.setitem(sys.modules, "pandas", None)  # as if not installed
    with pytest.raises(MissingExtraError, match="pip install pandas pyarrow"):
        load_gsm8k(DataSpec(path=str(parquet)))
    monkeypatch.setitem(sys.modules, "datasets", None)
    with pytest.raises(MissingExtraError, match="data.name 'gsm8k'.*pip install datasets"):
        load_gsm8k(DataSpec(name="gsm8k"))


VERIFIER_CASES = [
    ("18", None, "18", 1.0, "18"),
    (18, None, "18", 1.0, "18"),
    (18.0, None, "18", 1.0, "18"),
    ("$18.00", None, "18", 1.0, "18"),
    ("18 dollars", None, "18", 1.0, "18"),
    ("15 dollars", None, "18", 0.0, "15"),
    ("1,000", None, "1000", 1.0, "1000"),
    ("25%", None, "25", 1.0, "25"),
    ("0.3333333333", None, "0.3333333333", 1.0, "0.3333333333"),
    ("1000000.5", None, "1000000", 1.0, "1000000.5"),  # within the 1e-6 relative tolerance
    ("1000002", None, "1000000", 0.0, "1000002"),
    ("The answer is 42.", None, "42", 1.0, "42"),
    ("-7", None, "-7", 1.0, "-7"),
    (None, "She makes 9 * 2 = $18 every day.", "18", 1.0, "18"),
    ("", "so the total is 3 bolts", "3", 1.0, "3"),
    ("unknown", "I think it is 12.", "12", 1.0, "12"),
    (None, None, "18", 0.0, None),
]


@pytest.mark.parametrize("answer,message,reference,reward,parsed", VERIFIER_CASES)
def test_verifier_cases(answer, message, reference, reward, parsed):
    messages = [{"role": "user", "content": "q 99"}]
    if message is not None:
        messages.append({"role": "assistant", "content": message})
    inst = Instance(id="x", data={"question": "q", "answer": reference, "solution": ""})
    result = gsm8k_answer(traj(answer, messages), None, inst)
    assert result.reward == reward
    assert result.metrics["parsed_answer"] == parsed
    assert result.metrics["reference"] == reference


def test_a_reference_without_a_number_is_unverifiable_not_a_zero():
    """A broken row says nothing about the policy: masked (docs/runtimes.md, "Verifier outcomes"), never trained
    as a wrong answer; a right answer to a good row is scored."""
    broken = Instance(id="x", data={"question": "q", "answer": "see the solution", "solution": ""})
    result = gsm8k_answer(traj("18"), None, broken)
    assert (result.outcome, result.reward) == ("unverifiable", 0.0) and "holds no number" in result.reason
    good = gsm8k_answer(traj("18"), None, Instance(id="y", data={"question": "q", "answer": "18", "solution": ""}))
    assert (good.outcome, good.reward) == ("scored", 1.0)


async def test_registered_task_builder_and_verifier(plugins):
    registry = plugins.registry
    task = registry.get("tasks", "gsm8k")
    steps_task = registry.get("tasks", "gsm8k_steps")
    assert task.tools == ("python", "finish") and steps_task.verifier == "gsm8k_answer"
    instances = task.select(DataSpec(split="test", limit=3, offset=1))
    assert [i.id for i in instances] == ["1", "2", "3"]
    builder = registry.get("instruction_builders", "gsm8k")
    messages = builder(instances[0], task)
    assert [m["role"] for m in messages] == ["system", "user"]
    assert messages[1]["content"] == instances[0].data["question"]
    assert "python" in messages[0]["content"] and "finish" in messages[0]["content"]
    assert "<tool_call>" not in messages[0]["content"] and "{" not in messages[0]["content"]
    verifier = registry.get("verifiers", "gsm8k_answer")
    result = await run_verifier(verifier, traj(instances[0].data["answer"]), None, instances[0])
    assert result.reward == 1.0


def test_build_instruction_for_steps():
    inst = load_gsm8k_steps(DataSpec(split="test", limit=1))[0]
    assert build_instruction(inst)[1]["content"] == "Calculate 16-3-4."


def test_fewshot_builder_shows_one_worked_python_call(plugins):
    builder = plugins.registry.get("instruction_builders", "gsm8k_fewshot")
    inst = load_gsm8k_steps(DataSpec(split="test", limit=1))[0]
    messages = builder(inst, None)
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool", "assistant", "user"]
    assert messages[-1]["content"] == "Calculate 16-3-4."
    (call,) = messages[2]["tool_calls"]
    code = json.loads(call["function"]["arguments"])["code"]
    assert call["function"]["name"] == "python" and code == "print(12*7)"
    assert messages[3]["content"] == "84" == str(eval(code.removeprefix("print(").removesuffix(")")))
    assert extract_number(messages[4]["content"]) == 84
    messages[2]["tool_calls"].clear()  # callers get copies: the module's demonstration is untouched
    assert builder(inst, None)[2]["tool_calls"]


def test_evaluate_is_safe():
    assert evaluate("(3+5)*2") == (16.0, ["*", "+"])
    assert evaluate("1,000/4")[0] == 250.0
    for bad in ("__import__('os')", "2**1000000", "1/0", "x+1"):
        with pytest.raises(ValueError):
            evaluate(bad)
