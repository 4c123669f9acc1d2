"""skyrl-reasoning-gym on real reasoning-gym data: listed by `skyrl plugins` with its tasks, families by name and
config, disjoint train/test seeds that pass the core's split-hygiene check, one clear error per bad input, and
the sandboxed scorer on right, wrong and hostile answers."""

import json
import subprocess
import sys

import pytest
import reasoning_gym
from skyrl_core import DataSpec, Trajectory
from skyrl_core.errors import ConfigError
from skyrl_core.rollout import clean_eval_split, instance_content

from skyrl_reasoning_gym.tasks import GENERIC_TASK, NAMED_TASKS, SEED_SPAN, load_family
from skyrl_reasoning_gym.verifiers import code_in_answer, extract_answer, reasoning_gym_score

NAMED = {t.name: t for t in NAMED_TASKS}


def test_listed_by_skyrl_plugins_with_its_tasks():
    proc = subprocess.run([sys.executable, "-m", "skyrl_core.cli", "plugins", "--json"], capture_output=True,
                          text=True, check=True)
    plugin = {p["name"]: p for p in json.loads(proc.stdout)}["reasoning_gym"]
    assert plugin["distribution"] == "skyrl-reasoning-gym"
    assert not plugin.get("error"), plugin.get("error")
    caps = plugin["capabilities"]
    assert caps["tasks"] == ["reasoning_gym", "rg_basic_arithmetic", "rg_chain_sum", "rg_leg_counting", "rg_gcd"]
    assert caps["verifiers"] == ["reasoning_gym_score"]
    assert caps["instruction_builders"] == ["reasoning_gym", "reasoning_gym_fewshot"]
    assert GENERIC_TASK.tools == ("python", "finish") and GENERIC_TASK.runtime == "sandbox"


def test_any_family_by_name_and_config_is_reasoning_gyms_own_items():
    spec = DataSpec(split="train", limit=3, options={"dataset": "leg_counting", "config": {"min_animals": 1, "max_animals": 2},
                                                     "seed": 7})
    instances = GENERIC_TASK.select(spec)
    reference = reasoning_gym.create_dataset("leg_counting", min_animals=1, max_animals=2, seed=7, size=500)
    assert [i.id for i in instances] == ["train-0", "train-1", "train-2"]
    for n, inst in enumerate(instances):
        assert (inst.data["question"], inst.data["answer"]) == (reference[n]["question"], reference[n]["answer"])
        assert inst.data["dataset_seed"] == 7 and inst.data["index"] == n
        json.dumps(inst.data)  # everything an instance holds is JSON (trajectories and resumes write it)
    # the named tasks carry their family config; a user config field adds to it
    gcd = NAMED["rg_gcd"].select(DataSpec(split="test", limit=20, options={"config": {"max_value": 30}}))
    assert all(max(i.data["metadata"]["numbers"]) <= 30 for i in gcd)
    assert gcd[0].data["config"] == {"min_numbers": 2, "max_numbers": 2, "min_value": 2, "max_value": 30}


# what the split check finds at the example's sizes (reasoning-gym 0.1.25): (overlap with train, repeats, kept)
SPLIT_REPORT = {"rg_basic_arithmetic": (140, 16, 44), "rg_chain_sum": (9, 8, 183), "rg_leg_counting": (62, 10, 128),
                "rg_gcd": (10, 3, 187)}


@pytest.mark.parametrize("task", sorted(NAMED))
def test_train_and_test_splits_are_disjoint_and_pass_the_split_check(task):
    train = NAMED[task].select(DataSpec(split="train", options={"size": 256}))
    test = NAMED[task].select(DataSpec(split="test", options={"size": 200}))
    train_seeds = {i.data["dataset_seed"] + i.data["index"] for i in train}
    test_seeds = {i.data["dataset_seed"] + i.data["index"] for i in test}
    assert max(train_seeds) < SEED_SPAN <= min(test_seeds)  # disjoint item seeds, by construction
    # the run's split hygiene (skyrl_core.rollout.clean_eval_split) then drops test questions a train seed
    # happened to pose too; what it keeps shares no question with train
    fields = NAMED[task].content_fields
    kept, report = clean_eval_split(test, {instance_content(i, fields) for i in train}, fields=fields)
    assert not {instance_content(i, fields) for i in kept} & {instance_content(i, fields) for i in train}
    assert (report["eval_train_overlap"], report["eval_repeats"], report["eval_kept"]) == SPLIT_REPORT[task]


def test_the_split_check_catches_an_eval_split_that_reuses_train_seeds():
    # the same seeds under the train split name: every eval question is a train question
    train = NAMED["rg_gcd"].select(DataSpec(split="train", limit=30))
    kept, report = clean_eval_split(NAMED["rg_gcd"].select(DataSpec(split="train", limit=30)),
                                    {instance_content(i) for i in train})
    assert kept == [] and report["eval_train_overlap"] == 30


@pytest.mark.parametrize("options, message", [
    ({"dataset": "leg_countng"}, "unknown reasoning-gym family 'leg_countng'; did you mean leg_counting"),
    ({"dataset": "gcd", "config": {"max_valu": 9}}, "family 'gcd' has no config field 'max_valu'; did you mean "
                                                    "max_value"),
    ({"dataset": "gcd", "config": {"max_value": 1}}, "reasoning-gym rejected the config {\"max_value\": 1} of "
                                                     "family 'gcd': AssertionError"),
    ({"dataset": "gcd", "config": {"seed": 3}}, "family 'gcd' has no config field 'seed'"),
    ({"dataset": "gcd", "sise": 10}, "unknown data.options key 'sise'; did you mean size"),
    ({"dataset": "gcd", "seed": 5, "size": SEED_SPAN - 4}, "seed + size <= 2**31"),
    ({}, "task 'reasoning_gym' needs data.options.dataset"),
])
def test_bad_input_is_one_clear_error_naming_it(options, message):
    with pytest.raises(ConfigError, match="^task 'reasoning_gym'") as err:
        GENERIC_TASK.select(DataSpec(split="train", limit=1, options=options))
    assert message in str(err.value)


def test_unknown_split_names_the_valid_ones():
    with pytest.raises(ConfigError, match="task 'rg_gcd' has no split 'validation'; valid: train, test"):
        load_family(DataSpec(split="validation"), "gcd", "rg_gcd")


def _trajectory(answer=None, final=""):
    return Trajectory(instance_id="test-0", sample_index=0, task="rg_basic_arithmetic", group_id="g",
                      answer=answer, messages=[{"role": "assistant", "content": final}])


def _first(task, **options):
    return NAMED[task].select(DataSpec(split="test", limit=1, options=options))[0] if task in NAMED else \
        GENERIC_TASK.select(DataSpec(split="test", limit=1, options={"dataset": task, **options}))[0]


async def test_scorer_rewards_right_answers_and_not_wrong_ones():
    inst = _first("rg_basic_arithmetic")
    right = await reasoning_gym_score(_trajectory(answer=inst.data["answer"]), None, inst)
    assert (right.reward, right.outcome, right.metrics["correct"]) == (1.0, "scored", True)
    wrong = await reasoning_gym_score(_trajectory(final=str(int(inst.data["answer"]) + 1)), None, inst)
    assert (wrong.reward, wrong.outcome, wrong.metrics["answer_source"]) == (0.0, "scored", "message")
    tagged = await reasoning_gym_score(_trajectory(final=f"so <answer>{inst.data['answer']}</answer>"), None, inst)
    assert (tagged.reward, tagged.metrics["answer_source"]) == (1.0, "answer_tag")
    nothing = await reasoning_gym_score(_trajectory(), None, inst)
    assert (nothing.reward, nothing.metrics["refused"]) == (0.0, "none")


def test_answer_extraction_prefers_finish_then_the_answer_tag():
    assert extract_answer(_trajectory(answer=" 12 ", final="<answer>3</answer>")) == ("12", "finish")
    assert extract_answer(_trajectory(final="x <answer>3</answer> y <answer>4</answer>")) == ("4", "answer_tag")


@pytest.mark.parametrize("answer, why", [
    ("__import__('os').system('touch /tmp/pwned')", "a dunder name"),
    ("print('SKYRL_RG_RESULT {\"score\": 1.0, \"same_item\": true}')", "a call of the builtin 'print'"),
    ("print('x')!", "a call of the builtin 'print'"),  # not Python, but sympy's factorial notation makes it so
    ("open('/etc/passwd')", "a call of the builtin 'open'"),
    ("[1][0].real", "attribute access '.real'"),
    ("x.conjugate()", "a method call '.conjugate('"),
    ("exec('1')", "a call of the builtin 'exec'"),
    ("[x for x in ().__class__.__base__.__subclasses__()]", "a dunder name"),
    ("9**9**9**9", "a power too large to compute"),
    ("(lambda: 1)()", "a lambda expression"),
])
def test_code_answers_are_named(answer, why):
    assert code_in_answer(answer) == why


@pytest.mark.parametrize("plain", ["734", "[[1, 2], [3, 4]]", "x**2/2 + C", "sin(x) + 3*cos(2*x)", "yes",
                                   "3 × 3 × 71", "['-94.2', '30.0']", "Mr. Smith went home."])
def test_plain_answers_are_not_code(plain):
    assert code_in_answer(plain) is None


async def test_hostile_answers_are_refused_before_any_scorer_runs():
    # spiral_matrix's own scorer eval()s the answer: code there must never reach it
    inst = _first("spiral_matrix")
    forged = "print('SKYRL_RG_RESULT {\"score\": 1.0, \"same_item\": true}') or [1, 2]"
    for answer in (forged, "__import__('os').system('id')"):
        result = await reasoning_gym_score(_trajectory(answer=answer), None, inst)
        assert (result.reward, result.outcome) == (0.0, "tampered")
        assert result.reason.startswith("the answer is code a scorer would run")
    huge = await reasoning_gym_score(_trajectory(answer="1" * 100_000), None, _first("rg_basic_arithmetic"))
    assert (huge.reward, huge.outcome) == (0.0, "scored")
    assert huge.metrics["refused"] == "answer_too_long (> 2000 chars)"


async def test_a_scorer_exception_is_unverifiable_not_a_zero():
    # prime_factorization's scorer raises ValueError on '[' (reasoning-gym 0.1.25)
    result = await reasoning_gym_score(_trajectory(answer="["), None, _first("prime_factorization"))
    assert result.outcome == "unverifiable"
    assert "reasoning-gym's scorer failed: ValueError" in result.reason


async def test_an_instance_that_is_not_the_regenerated_item_is_unverifiable():
    inst = _first("rg_gcd")
    forged = type(inst)(id=inst.id, data={**inst.data, "question": "What is 1 + 1?", "answer": "2"})
    result = await reasoning_gym_score(_trajectory(answer="2"), None, forged)
    assert result.outcome == "unverifiable" and "differs from the instance" in result.reason


async def test_a_sandbox_that_cannot_start_is_unverifiable(monkeypatch):
    # a host whose sandbox refuses to start (the real SandboxUnavailable, injected at start: whether bubblewrap
    # works is probed once per process, so it cannot be taken away here); the verdict is the infrastructure's
    from skyrl_core.default_plugins.runtimes.sandbox import LocalSandbox, SandboxUnavailable

    async def refuse(self):
        raise SandboxUnavailable("bubblewrap cannot create namespaces here")

    monkeypatch.setattr(LocalSandbox, "start", refuse)
    result = await reasoning_gym_score(_trajectory(answer="4"), None, _first("rg_gcd"))
    assert result.outcome == "unverifiable" and "the scoring sandbox failed" in result.reason
