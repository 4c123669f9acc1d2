"""`run_eval` of installed verifiers (v1) tasksets from the verifiers repository's own ``environments/`` folder:
the environment's rollout goes through the recording gateway, and every reward equals what verifiers' own
pipeline (``Env.run_episode``, which scores the trace itself) gives the same completions.

The tasksets are installed packages (``pip install ./environments/reverse_text`` from a copy of
github.com/PrimeIntellect-ai/verifiers); a test skips, naming the package, when one is not installed. Datasets come
from the few rows under ``tests/data`` (written for these tests)."""

from __future__ import annotations

import asyncio
import importlib.util
from pathlib import Path

import pytest

pytest.importorskip("verifiers")
pytest.importorskip("torch")

from skyrl_core.inference.base import Engine, GenerationOutput  # noqa: E402

DATA = Path(__file__).parents[1] / "skyrl_verifiers" / "data"


def needs(package: str) -> None:
    if importlib.util.find_spec(package) is None:
        pytest.skip(f"the verifiers environment package {package!r} is not installed: pip install "
                    f"./environments/{package} from the verifiers repository")


class Answers(Engine):
    """A scripted policy on a real tokenizer: the reply to a prompt is the first canned answer whose key occurs in
    the rendered prompt (greedy, deterministic), so a reward can be checked against known completions."""

    scripted_policy = True
    name = "answers"

    def __init__(self, tokenizer, answers: dict[str, str]) -> None:
        super().__init__()
        self.tokenizer, self.answers, self.max_context = tokenizer, answers, 4096
        self.calls: list[tuple[list[int], list[int]]] = []
        self.sampled: list[tuple[int, float]] = []

    async def generate(self, input_ids, sampling):
        prompt = self.tokenizer.decode(input_ids)
        text = next((a for k, a in self.answers.items() if k in prompt), "no idea")
        ids = self.tokenizer.encode(text, add_special_tokens=False) + [self.tokenizer.eos_token_id]
        self.calls.append((list(input_ids), ids))
        self.sampled.append((sampling.max_tokens, sampling.temperature))
        return GenerationOutput(output_ids=ids, output_logprobs=[-0.5] * len(ids), finish_reason="stop")


def eval_config(tmp_path, model_dir, name, options, split="test", limit=None):
    """A run of the task ``verifiers`` on taskset ``name``: train rows from its ``train`` split and eval rows from
    ``split``; with ``split=None`` (a taskset without splits) the eval runs on its one dataset (first ``limit``)."""
    import json

    from skyrl_core.config import load_config

    rows = f"name: {name}, options: {json.dumps(options)}"
    data = (f"    data: {{{rows}, split: train}}\n    eval_data: {{{rows}, split: {split}}}\n" if split
            else f"    data: {{{rows}, limit: {limit}}}\n")
    path = tmp_path / "vf.yaml"
    path.write_text(f"model: {model_dir}\nengine: {{type: hf, device: cpu, max_batch: 4}}\n"
                    f"tasks:\n  - name: verifiers\n{data}"
                    "sampling: {temperature: 0.0, max_tokens: 24, n_samples: 1, seed: 0}\n")
    return load_config(str(path))


async def verifiers_own_rewards(name, options, engine, tokenizer, limit=None):
    """Each task's reward from verifiers' own pipeline: ``Env.run_episode`` (scoring not deferred) against a
    fresh gateway on the same engine."""
    import verifiers.v1 as vf

    from skyrl_core.default_plugins.chat.template import ChatFormat
    from skyrl_core.default_plugins.engines.gateway import Gateway
    from skyrl_verifiers.environments import MODEL_NAME, environment

    env, tasks = environment(name, options, limit)
    gateway = Gateway(engine, ChatFormat(tokenizer), require_open=True)
    await gateway.start()
    rewards = []
    try:
        async with env.serving():
            for task in tasks[:limit]:
                sid = gateway.open()
                ctx = vf.ModelContext(model=MODEL_NAME, client=vf.EvalClientConfig(base_url=gateway.base_url(sid)))
                episode = await env.run_episode(task, ctx)
                gateway.end(sid)
                assert episode.ok, episode.errors
                rewards.append(episode.traces[-1].reward)
    finally:
        await gateway.stop()
    return rewards


def run(config, tmp_path, engine):
    from skyrl_core.default_plugins.eval.run import run_eval

    done = []
    metrics = asyncio.run(run_eval(config, tmp_path / "out", engine=engine, on_trajectory_done=done.append))
    return metrics, sorted(done, key=lambda t: int(t.instance_id.rsplit("-", 1)[1]))


REVERSE = {"shipped_data": "reverse_text"}


def test_reverse_text_rewards_equal_verifiers_own(tmp_path, tiny_chat_model_dir):
    """Single-turn: reverse-text's LCS reward, through skyrl's run_eval and through verifiers' own pipeline."""
    needs("reverse_text")
    from skyrl_core.default_plugins.engines.models import load_tokenizer

    tok = load_tokenizer(tiny_chat_model_dir)
    engine = Answers(tok, {"hello world": "<reversed_text>dlrow olleh</reversed_text>",
                           "abc": "<reversed_text>cb</reversed_text>"})
    metrics, done = run(eval_config(tmp_path, tiny_chat_model_dir, "reverse-text", REVERSE), tmp_path, engine)
    assert metrics["finish_reasons"] == {"finished": 2}, metrics.get("error_messages")
    assert engine.sampled == [(24, 0.0)] * 2  # the run's sampling.* reached the environment's calls
    rewards = [t.reward for t in done]
    assert rewards[0] == 1.0 and rewards[1] == pytest.approx(0.8)  # SequenceMatcher("cb", "cba").ratio()
    own = {"dataset_name": str(DATA / "reverse_text"), "dataset_split": "test"}
    assert rewards == asyncio.run(verifiers_own_rewards("reverse-text", own, engine, tok))
    for traj in done:
        (transition,) = traj.transitions  # one model call, recorded with the engine's exact ids
        assert any(transition.output_ids == out for _, out in engine.calls)
        assert traj.metrics["vf_lcs"] == traj.reward and not traj.masked


def test_a_real_model_runs_reverse_text_end_to_end(tmp_path, tiny_chat_model_dir):
    """The real hf engine (tiny random model): every trajectory finishes with its calls recorded and a reward
    from the rubric in [0, 1]."""
    needs("reverse_text")
    from skyrl_core.default_plugins.eval.run import run_eval

    config = eval_config(tmp_path, tiny_chat_model_dir, "reverse-text", REVERSE)
    done = []
    metrics = asyncio.run(run_eval(config, tmp_path / "out", on_trajectory_done=done.append))
    assert metrics["finish_reasons"] == {"finished": 2}, metrics.get("error_messages")
    for traj in done:
        assert traj.transitions and all(t.output_ids for t in traj.transitions)
        assert 0.0 <= traj.reward <= 1.0 and traj.metrics["outcome"] == "scored"


@pytest.mark.slow  # ~50 s on 2 loaded cores: verifiers starts an MCP tool server and its chat program per episode
def test_glossary_tool_call_rewards_equal_verifiers_own(tmp_path, tiny_chat_model_dir):
    """Tool-using: glossary's facts_lookup (an MCP tool server verifiers starts per rollout). The policy calls the
    tool (a Hermes <tool_call>, returned to the harness in OpenAI form by the gateway) and answers with the fact the
    tool returned: two recorded calls, reward 1, and verifiers' own pipeline gives the same."""
    needs("glossary")
    from glossary.servers.facts import FACTS
    from skyrl_core.default_plugins.engines.models import load_tokenizer

    tok = load_tokenizer(tiny_chat_model_dir)
    fact = FACTS["ada lovelace"]
    engine = Answers(tok, {fact: f"<answer>{fact}</answer>",  # after the tool's result
                           "Ada Lovelace": '<tool_call>\n{"name": "facts_lookup", "arguments": '
                                           '{"name": "Ada Lovelace"}}\n</tool_call>'})
    metrics, done = run(eval_config(tmp_path, tiny_chat_model_dir, "glossary", {}, split=None, limit=1), tmp_path,
                        engine)
    assert metrics["finish_reasons"] == {"finished": 1}, metrics.get("error_messages")
    (traj,) = done
    assert traj.reward == 1.0 and traj.metrics["vf_looked_up"] == 1.0
    assert len(traj.transitions) == 2 and traj.metrics["gateway_tool_calls"] == 1  # the tool round trip
    assert any(m.get("role") == "tool" and fact in str(m.get("content")) for m in traj.messages), traj.messages
    assert [traj.reward] == asyncio.run(verifiers_own_rewards("glossary", {}, engine, tok, limit=1))


@pytest.mark.slow  # ~70 s on 2 loaded cores: two three-turn episodes, each with its own chat program
def test_color_codeword_multi_turn_rewards_equal_verifiers_own(tmp_path, tiny_chat_model_dir):
    """Multi-turn: color-codeword's env scripts the user over three turns (its taskset is an endless seeded stream,
    bounded by data.limit). The policy answers each turn; the last answer is the whole codeword: three recorded
    calls extending one conversation, reward 1 (exact match), and verifiers' own pipeline gives the same."""
    needs("color_codeword")
    from skyrl_core.default_plugins.engines.models import load_tokenizer
    from skyrl_verifiers.environments import environment

    tok = load_tokenizer(tiny_chat_model_dir)
    (task,) = environment("color-codeword", {}, 1)[1]
    answer = task.data.answer
    engine = Answers(tok, {"Combine your previous answer": answer, "more squares": answer[:4],
                           "Here are 2 squares": answer[:2]})
    metrics, done = run(eval_config(tmp_path, tiny_chat_model_dir, "color-codeword", {}, split=None, limit=1),
                        tmp_path, engine)
    assert metrics["finish_reasons"] == {"finished": 1}, metrics.get("error_messages")
    (traj,) = done
    assert traj.reward == 1.0 and traj.metrics["vf_exact_match"] == 1.0
    assert len(traj.transitions) == 3 and traj.metrics["gateway_extended"] == 2  # one growing conversation
    assert [m["content"] for m in traj.messages if m["role"] == "assistant"] == [answer[:2], answer[:4], answer]
    assert [traj.reward] == asyncio.run(verifiers_own_rewards("color-codeword", {}, engine, tok, limit=1))


# -- the three environments this plugin ships (skyrl_verifiers/envs): no package to install, so these run from a
# fresh clone and in CI

def test_shipped_single_turn_arithmetic_rewards_equal_verifiers_own(tmp_path, tiny_chat_model_dir):
    """Single-turn (skyrl-arithmetic): a right and a wrong tagged sum score 1 and 0, through skyrl's run_eval and
    through verifiers' own pipeline; each trajectory is one recorded call with the engine's ids."""
    from skyrl_core.default_plugins.engines.models import load_tokenizer
    from skyrl_verifiers.environments import environment

    tok = load_tokenizer(tiny_chat_model_dir)
    first, second = environment("skyrl-arithmetic", {"dataset_split": "test"})[1][:2]
    engine = Answers(tok, {first.data.prompt_text: f"<answer>{first.data.answer}</answer>",
                           second.data.prompt_text: f"<answer>{second.data.answer + 1}</answer>"})
    config = eval_config(tmp_path, tiny_chat_model_dir, "skyrl-arithmetic", {"size": 2})
    metrics, done = run(config, tmp_path, engine)
    assert metrics["finish_reasons"] == {"finished": 2}, metrics.get("error_messages")
    assert [t.reward for t in done] == [1.0, 0.0]
    assert [t.reward for t in done] == asyncio.run(
        verifiers_own_rewards("skyrl-arithmetic", {"dataset_split": "test", "size": 2}, engine, tok))
    for traj in done:
        (transition,) = traj.transitions
        assert any(transition.output_ids == out for _, out in engine.calls)
        assert traj.metrics["vf_tagged"] == 1.0 and traj.metrics["vf_correct"] == traj.reward


@pytest.mark.slow  # verifiers starts an MCP tool server and its chat program per episode (~30 s on 2 loaded cores)
def test_shipped_tool_using_codebook_rewards_equal_verifiers_own(tmp_path, tiny_chat_model_dir):
    """Tool-using (skyrl-codebook): the policy calls codebook_lookup (a Hermes <tool_call> the gateway returns in
    OpenAI form), the per-rollout MCP server answers with the code, the policy gives it: two recorded calls in one
    datum, reward 1, and verifiers' own pipeline gives the same."""
    from skyrl_core.default_plugins.engines.models import load_tokenizer
    from skyrl_verifiers.envs.codebook import CODES

    tok = load_tokenizer(tiny_chat_model_dir)
    code = CODES["pebble"]
    engine = Answers(tok, {code: f"<answer>{code}</answer>",  # after the tool's result
                           "pebble": '<tool_call>\n{"name": "codebook_lookup", "arguments": {"word": "pebble"}}\n'
                                     '</tool_call>'})
    config = eval_config(tmp_path, tiny_chat_model_dir, "skyrl-codebook", {"dataset_split": "test"}, split=None,
                         limit=1)
    metrics, done = run(config, tmp_path, engine)
    assert metrics["finish_reasons"] == {"finished": 1}, metrics.get("error_messages")
    (traj,) = done
    assert traj.reward == 1.0 and traj.metrics["vf_lookups"] == 1.0
    assert len(traj.transitions) == 2 and traj.metrics["gateway_tool_calls"] == 1
    assert traj.metrics["gateway_extended"] == 1 and traj.metrics["gateway_drift"] == 0
    assert any(m.get("role") == "tool" and code in str(m.get("content")) for m in traj.messages), traj.messages
    assert [traj.reward] == asyncio.run(
        verifiers_own_rewards("skyrl-codebook", {"dataset_split": "test"}, engine, tok, limit=1))


@pytest.mark.slow  # three turns with the env's scripted user (~20 s on 2 loaded cores)
def test_shipped_multi_turn_guess_rewards_equal_verifiers_own(tmp_path, tiny_chat_model_dir):
    """Multi-turn (skyrl-guess): the env answers each guess (higher / lower), so its next user message depends on
    the reply. The policy guesses 8, then the secret after the env's hint: two recorded calls extending one
    conversation, reward 1, and verifiers' own pipeline gives the same."""
    from skyrl_core.default_plugins.engines.models import load_tokenizer
    from skyrl_verifiers.environments import environment

    tok = load_tokenizer(tiny_chat_model_dir)
    (task,) = environment("skyrl-guess", {"dataset_split": "test", "size": 1})[1]
    secret = task.data.answer
    assert secret != 8  # the test's script guesses 8 first
    engine = Answers(tok, {"higher than 8": str(secret), "lower than 8": str(secret), "Your guess?": "8"})
    config = eval_config(tmp_path, tiny_chat_model_dir, "skyrl-guess", {"size": 1})
    metrics, done = run(config, tmp_path, engine)
    assert metrics["finish_reasons"] == {"finished": 1}, metrics.get("error_messages")
    (traj,) = done
    assert traj.reward == 1.0 and traj.metrics["vf_guesses"] == 2.0
    assert len(traj.transitions) == 2 and traj.metrics["gateway_extended"] == 1  # one growing conversation
    hint = f"My number is {'higher' if secret > 8 else 'lower'} than 8."
    assert [m["content"] for m in traj.messages if m["role"] in ("user", "assistant")][-3:] == ["8", hint, str(secret)]
    assert [traj.reward] == asyncio.run(
        verifiers_own_rewards("skyrl-guess", {"dataset_split": "test", "size": 1}, engine, tok))


def test_a_real_model_runs_a_shipped_environment_end_to_end(tmp_path, tiny_chat_model_dir):
    """The real hf engine (tiny random model) on skyrl-arithmetic: both trajectories finish with their call
    recorded (the engine's ids) and a rubric reward in {0, 1}."""
    from skyrl_core.default_plugins.eval.run import run_eval

    config = eval_config(tmp_path, tiny_chat_model_dir, "skyrl-arithmetic", {"size": 2})
    done = []
    metrics = asyncio.run(run_eval(config, tmp_path / "out", on_trajectory_done=done.append))
    assert metrics["finish_reasons"] == {"finished": 2}, metrics.get("error_messages")
    for traj in done:
        assert len(traj.transitions) == 1 and traj.transitions[0].output_ids
        assert traj.reward in (0.0, 1.0) and traj.metrics["outcome"] == "scored"
