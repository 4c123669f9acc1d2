"""Split hygiene: a task's eval split never poses a problem its run trains on, for every built-in task, and the
quickstart's held-out questions are held out. The bundled GSM8K splits are the data (no folder outside the repo)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import attrs
import pytest

from skyrl_core.config import load_config
from skyrl_core.default_plugins.gsm8k.dataset import load_gsm8k, load_gsm8k_steps
from skyrl_core.rollout import RolloutSession, clean_eval_split, instance_content
from skyrl_core.tasks import DataSpec, Instance

QUICKSTART_TRAIN = DataSpec(split="train", shuffle=True, seed=0, limit=256)
QUICKSTART_EVAL = DataSpec(split="test", shuffle=True, seed=1, limit=100)
Q = ("question",)  # the gsm8k tasks' content_fields


def select(load, spec):
    """Task.select's slicing (shuffle with seed, then offset and limit) over one loader."""
    from skyrl_core.tasks import Task

    return Task(name="t", description="", load=load, instruction_builder="", tools=("python",),
                verifier="").select(spec)


def test_content_ignores_case_spacing_and_the_final_stop_but_not_numbers():
    a = Instance(id="1-0", data={"question": "Calculate 48 / 2."})
    b = Instance(id="9-3", data={"question": "calculate 48/2"})
    c = Instance(id="9-4", data={"question": "Calculate 48/3."})
    assert instance_content(a, Q) == instance_content(b, Q) == "calculate48/2"
    assert instance_content(c, Q) != instance_content(a, Q)
    swe = Instance(id="x", data={"problem_statement": "Fix  the\nbug", "repo": "r"})
    assert instance_content(swe, ("problem_statement",)) == "fixthebug"
    # no content_fields declared: the whole instance (no field name is hard-coded in the core; a generator's
    # seed tells two of its problems apart, as osworld's miniwob rows need)
    assert instance_content(swe) == '{"problem_statement":"fixthe\\nbug","repo":"r"}'
    seeded = [Instance(id=str(k), data={"task": "click-button", "seed": k}) for k in (0, 1)]
    assert instance_content(seeded[0]) != instance_content(seeded[1])
    plain = Instance(id="y", data={"b": 1, "a": [2]})
    assert instance_content(plain) == '{"a":[2],"b":1}'


def test_a_task_declares_which_fields_pose_its_problem(tiny_engine, plugins):
    """A task's ``content_fields`` (the Task contract) decide the eval/train overlap check, not a list in the core:
    here ``body`` holds the problem and ``note`` differs between the train and the eval copy of it."""
    from skyrl_core.contracts import member
    from skyrl_core.hookspecs import hookimpl
    from skyrl_core.tasks import Task

    rows = {"train": [Instance(id="t1", data={"body": "Add 2 and 2.", "note": "from train"})],
            "test": [Instance(id="e1", data={"body": "add 2 and 2", "note": "from eval"}),
                     Instance(id="e2", data={"body": "Add 3 and 4.", "note": "from eval"})]}
    assert member(plugins.registry.get("tasks", "gsm8k"), "tasks", "content_fields") == Q

    class Bodies:
        @hookimpl
        def register_tasks(self, register):
            register(Task(name="bodies", description="", load=lambda spec: rows[spec.split],
                          instruction_builder="gsm8k", tools=("python",), verifier="gsm8k_answer",
                          content_fields=("body",)))

    plugins.register_plugin(Bodies(), "bodies-plugin")
    config = load_config(None, ["tasks=[{name: bodies}]", "data.split=train", "eval_data={split: test}"])
    session = RolloutSession(config, tiny_engine, registry=plugins.registry)
    assert [i.id for _, i in session.load_instances("eval")] == ["e2"]
    assert session.split_report["bodies"]["eval_train_overlap"] == 1


def test_quickstart_eval_overlapped_its_train_questions_and_no_longer_does():
    train = select(load_gsm8k_steps, QUICKSTART_TRAIN)
    contents = {instance_content(i, Q) for i in train}
    naive = select(load_gsm8k_steps, QUICKSTART_EVAL)
    leaked = [i for i in naive if instance_content(i, Q) in contents]
    assert len(leaked) == 8  # the defect: 8 of 100 "held-out" questions were train questions
    kept, report = clean_eval_split(select(load_gsm8k_steps, attrs.evolve(QUICKSTART_EVAL, limit=None)),
                                    contents, 100, Q)
    assert len(kept) == 100 and report["eval_kept"] == 100
    assert not {instance_content(i, Q) for i in kept} & contents
    assert len({instance_content(i, Q) for i in kept}) == 100
    assert report["eval_train_overlap"] >= 8
    # the clean split keeps the order of the shuffled test split: the questions that were clean stay in
    naive_clean = [i.id for i in naive if instance_content(i, Q) not in contents]
    assert [i.id for i in kept][:10] == [i for i in naive_clean if i in {k.id for k in kept}][:10]


def test_gsm8k_word_problems_eval_drops_train_problems():
    train = select(load_gsm8k, DataSpec(split="train", limit=50))
    contents = {instance_content(i, Q) for i in train}
    # an eval split drawn from the same file: its first 50 rows are the train rows and must go
    kept, report = clean_eval_split(select(load_gsm8k, DataSpec(split="train", limit=None)), contents, 30, Q)
    assert report["eval_train_overlap"] == 50
    assert [i.id for i in kept] == [str(i) for i in range(50, 80)]
    test_kept, _ = clean_eval_split(select(load_gsm8k, DataSpec(split="test")), contents, fields=Q)
    assert not {instance_content(i, Q) for i in test_kept} & contents


def test_gsm8k_steps_repeats_within_eval_count_once():
    steps = select(load_gsm8k_steps, DataSpec(split="test"))
    kept, report = clean_eval_split(steps, set(), fields=Q)
    assert report["eval_repeats"] > 0  # "Calculate 2*3." recurs among GSM8K test steps
    assert len(kept) + report["eval_repeats"] == len(steps)
    assert len({instance_content(i, Q) for i in kept}) == len(kept)


@pytest.fixture(scope="module")
def tiny_engine(tiny_chat_model_dir):
    from skyrl_core.default_plugins.engines.hf import HFEngine

    engine = HFEngine(model=tiny_chat_model_dir, max_batch=2, device="cpu")
    try:
        yield engine
    finally:
        asyncio.run(engine.close())


def test_session_eval_split_of_the_quickstart_is_clean(tiny_engine, plugins):
    import logging

    config = load_config(Path(__file__).resolve().parents[1] / "examples" / "quickstart.yaml")
    session = RolloutSession(config, tiny_engine)
    train = session.load_instances("train")
    seen: list[logging.LogRecord] = []
    catch = logging.Handler()
    catch.emit = seen.append
    levels = {name: logging.getLogger(name).level for name in ("skyrl.note", "skyrl_core.rollout")}
    for name in levels:
        logging.getLogger(name).addHandler(catch)
        logging.getLogger(name).setLevel(logging.INFO)
    try:
        evals = session.load_instances("eval")
    finally:
        for name, level in levels.items():
            logging.getLogger(name).removeHandler(catch)
            logging.getLogger(name).setLevel(level)
    # the expected split hygiene is a console note (INFO on skyrl.note), not a WARNING
    (left_out,) = [r for r in seen if "left out of the eval" in r.getMessage()]
    assert left_out.name == "skyrl.note" and left_out.levelno == logging.INFO
    assert len(train) == 256 and len(evals) == 100
    assert not {instance_content(i, Q) for _, i in evals} & {instance_content(i, Q) for _, i in train}
    assert session.split_report["gsm8k_steps"]["eval_train_overlap"] >= 8
    assert session.split_report["gsm8k_steps"]["eval_kept"] == 100


def test_swe_rows_are_compared_by_problem_statement_not_id():
    """The swe plugin's instances hold SWE-bench fields; the same issue under two ids (SWE-bench and a mirror
    dataset re-export it) is one problem, and another issue of the same repository is not."""
    issue = "Pluralize of 'octopus' is wrong.\n\nExpected `octopi`,\r\n got `octopuses`."

    def row(iid, text):
        return Instance(id=iid, data={"instance_id": iid, "repo": "jpvanhal/inflection", "base_commit": "abc",
                                      "problem_statement": text, "FAIL_TO_PASS": ["t"], "PASS_TO_PASS": []})

    train = [row("jpvanhal__inflection-1", issue)]
    evals = [row("mirror__inflection-7", "  " + issue.replace("\n\n", "\n") + "  "),
             row("jpvanhal__inflection-2", "Singularize of 'data' is wrong.")]
    swe = ("problem_statement",)  # the swe plugin's tasks' content_fields
    kept, report = clean_eval_split(evals, {instance_content(i, swe) for i in train}, fields=swe)
    assert [i.id for i in kept] == ["jpvanhal__inflection-2"] and report["eval_train_overlap"] == 1


def test_an_eval_split_that_is_the_train_data_is_an_error_naming_the_task(tiny_engine, plugins):
    from skyrl_core.errors import ConfigError

    whole = load_config(None, ["tasks=[{name: gsm8k_steps}]", "data.split=test",
                               "eval_data={split: test, limit: 5}"])
    with pytest.raises(ConfigError, match=r"task 'gsm8k_steps': every one of its \d+ eval_data instances poses a "
                                          r"problem of the run's train data"):
        RolloutSession(whole, tiny_engine).load_instances("eval")
    # train on the first 5 test steps, evaluate on test: the eval fills its 5 from the rows after them
    part = load_config(None, ["tasks=[{name: gsm8k_steps}]", "data.split=test", "data.limit=5",
                              "eval_data={split: test, limit: 5}"])
    session = RolloutSession(part, tiny_engine)
    train = {instance_content(i, Q) for _, i in session.load_instances("train")}
    evals = session.load_instances("eval")
    assert len(evals) == 5 and not {instance_content(i, Q) for _, i in evals} & train
    assert session.split_report["gsm8k_steps"]["eval_train_overlap"] >= 5
