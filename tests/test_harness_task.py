"""A task whose run stage is an external harness (the ``harness`` member of ``skyrl_core.Task``; docs/gateway.md,
"External harnesses"): ``run_eval`` starts the harness against a recording-gateway session instead of skyrl's agent
loop, while the init stage (the runtime) and the eval stage (the task's verifier) stay the dispatcher's."""

from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("torch")
httpx = pytest.importorskip("httpx")
pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from skyrl_core import DataSpec, Instance, Task, VerifierResult, hookimpl  # noqa: E402

# An OpenAI chat/completions client in the sandbox's own python (stdlib only): two turns, then the last reply is
# written into the task's workspace, where the verifier reads it.
SCRIPT = r"""
import json, os, urllib.request
base = os.environ["OPENAI_BASE_URL"]
messages = [{"role": "user", "content": "Say hello."}]
for turn in range(2):
    req = urllib.request.Request(base + "/chat/completions", method="POST",
        data=json.dumps({"model": "skyrl", "messages": messages, "temperature": 0.0, "max_tokens": 6}).encode(),
        headers={"Content-Type": "application/json", "Authorization": "Bearer " + os.environ["OPENAI_API_KEY"]})
    reply = json.load(urllib.request.urlopen(req))["choices"][0]["message"]
    messages += [reply, {"role": "user", "content": "Again."}]
open("answer.txt", "w").write(reply["content"] or "")
"""

SEEN_INSTANCES: list[str] = []


async def answer_matches(trajectory, runtime, instance) -> VerifierResult:
    """Reward 1 when the workspace's answer.txt is the session's last recorded reply (the eval stage runs in the
    same runtime the harness acted in)."""
    written = (await runtime.exec("cat answer.txt", timeout_s=10)).output
    last = trajectory.messages[-1]["content"]
    return VerifierResult(reward=float(written == last), metrics={"answer_chars": len(written)})


async def callable_harness(base_url, trajectory, runtime, instance, sampling):
    SEEN_INSTANCES.append((instance.id, sampling.max_tokens))
    async with httpx.AsyncClient(timeout=60) as client:
        reply = await client.post(f"{base_url}/chat/completions", json={
            "messages": [{"role": "user", "content": instance.data["prompt"]}], "max_tokens": sampling.max_tokens,
            "temperature": sampling.temperature})
        reply.raise_for_status()
    await runtime.exec(f"printf %s {reply.json()['choices'][0]['message']['content']!r} > answer.txt",
                       timeout_s=10)


class ExternalTasks:
    @hookimpl
    def register_tasks(self, register):
        rows = lambda spec: [Instance(id=f"i{k}", data={"prompt": f"Count to {k}."}) for k in range(2)]  # noqa: E731
        register(Task(name="external_cmd", description="a command harness", load=rows,
                      instruction_builder="echo_prompt", tools=(), verifier="answer_matches",
                      default_data=DataSpec(split="test"), harness=["python3", "-c", SCRIPT]))
        register(Task(name="external_fn", description="a callable harness", load=rows,
                      instruction_builder="echo_prompt", tools=(), verifier="answer_matches",
                      default_data=DataSpec(split="test"), harness=callable_harness))

    @hookimpl
    def register_instruction_builders(self, register):
        register(lambda inst, task: [{"role": "user", "content": inst.data["prompt"]}], name="echo_prompt")

    @hookimpl
    def register_verifiers(self, register):
        register(answer_matches, name="answer_matches")


def eval_config(tmp_path, model_dir, task):
    from skyrl_core.config import load_config

    path = tmp_path / "harness.yaml"
    path.write_text(f"model: {model_dir}\nengine: {{type: hf, device: cpu, max_batch: 4}}\n"
                    f"tasks:\n  - name: {task}\n    runtime: {{type: sandbox, network: true}}\n"
                    "sampling: {temperature: 0.0, max_tokens: 8, n_samples: 1, seed: 0}\n")
    return load_config(str(path))


@pytest.mark.parametrize("task", ["external_cmd", "external_fn"])
def test_run_eval_runs_a_harness_task_through_the_gateway(plugins, tmp_path, tiny_hf_engine, tiny_chat_model_dir,
                                                          task):
    from skyrl_core.default_plugins.eval.run import run_eval

    plugins.register_plugin(ExternalTasks(), "external-tasks")
    SEEN_INSTANCES.clear()
    done = []
    metrics = asyncio.run(run_eval(eval_config(tmp_path, tiny_chat_model_dir, task), tmp_path / "out",
                                   engine=tiny_hf_engine, on_trajectory_done=done.append))
    assert metrics["finish_reasons"] == {"finished": 2}, metrics.get("error_messages")
    calls = 2 if task == "external_cmd" else 1
    for traj in done:
        # the trajectory is the session's transitions (one per model call, one datum), rewarded by the verifier
        assert len(traj.transitions) == calls and traj.metrics["gateway_calls"] == calls
        assert all(t.output_ids for t in traj.transitions) and not traj.masked
        assert traj.metrics["gateway_extended"] == calls - 1 and traj.metrics["gateway_drift"] == 0
        assert traj.reward == 1.0, (traj.messages, traj.metrics)
        assert traj.metrics["answer_chars"] == len(traj.messages[-1]["content"])
    if task == "external_fn":
        # the callable is handed its instance and the run's sampling (sampling.max_tokens: 8)
        assert sorted(SEEN_INSTANCES) == [("i0", 8), ("i1", 8)]
        assert all(len(t.transitions[0].output_ids) <= 8 for t in done)


def test_a_task_without_a_harness_still_needs_tools(plugins, tmp_path, tiny_hf_engine, tiny_chat_model_dir):
    from skyrl_core.errors import ConfigError
    from skyrl_core.rollout import RolloutSession

    class NoTools:
        @hookimpl
        def register_tasks(self, register):
            register(Task(name="bare", description="no tools, no harness", load=lambda spec: [],
                          instruction_builder="echo_prompt", tools=(), verifier="answer_matches"))

    plugins.register_plugin(ExternalTasks(), "external-tasks")
    plugins.register_plugin(NoTools(), "no-tools")
    with pytest.raises(ConfigError, match="task 'bare' has no tools"):
        RolloutSession(eval_config(tmp_path, tiny_chat_model_dir, "bare"), tiny_hf_engine)
