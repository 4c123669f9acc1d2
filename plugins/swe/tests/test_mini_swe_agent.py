"""mini-swe-agent (the package, unmodified) as an external harness: its calls go through the recording gateway
(recorded ids equal the engine's), its commands run in skyrl's bubblewrap sandbox, never on the host, and a
hostile command reaches neither the host's files, nor the network, nor the gateway it is recorded by."""

from __future__ import annotations

import asyncio
import json

import pytest

pytest.importorskip("minisweagent")
pytest.importorskip("litellm")
pytest.importorskip("torch")
pytest.importorskip("fastapi")

from skyrl_core import Instance  # noqa: E402
from skyrl_core.inference.base import GenerationOutput  # noqa: E402
from skyrl_core.default_plugins.eval.scripted import ScriptedPolicy  # noqa: E402

SUBMIT = "THOUGHT: done.\n\n```mswea_bash_command\necho COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n```"


def action(command: str) -> str:
    return f"THOUGHT: run it.\n\n```mswea_bash_command\n{command}\n```"


class Replies(ScriptedPolicy):
    """Scripted replies in order on a real tokenizer (the last one repeats; a callable reply is called with the
    engine, whose ``port`` is the gateway's), each call's ids kept."""

    name = "replies"

    def __init__(self, tokenizer, replies: list) -> None:
        super().__init__()
        self.tokenizer, self.replies, self.max_context, self.port = tokenizer, list(replies), 8192, None
        self.calls: list[tuple[list[int], list[int]]] = []

    async def generate(self, input_ids, sampling):
        text = self.replies[min(len(self.calls), len(self.replies) - 1)]
        text = text(self) if callable(text) else text
        ids = self.tokenizer.encode(text, add_special_tokens=False) + [self.tokenizer.eos_token_id]
        self.calls.append((list(input_ids), ids))
        return GenerationOutput(output_ids=ids, output_logprobs=[-0.25] * len(ids), finish_reason="stop")


@pytest.fixture(scope="module")
def tokenizer():
    """SmolLM2-135M-Instruct's tokenizer and chat template (the bundled model's files; no weights loaded)."""
    pytest.importorskip("transformers")
    from skyrl_core.default_plugins.engines.models import load_tokenizer

    return load_tokenizer("smollm2-135m-instruct")


async def run_agent(tmp_path, tokenizer, replies, engine_class=None, **mini):
    """One mini-swe-agent run (the task's harness) through a recording gateway on a scripted engine, its
    commands in a bubblewrap sandbox over ``tmp_path/ws``: (trajectory, engine, gateway port)."""
    import functools

    from skyrl_core.default_plugins.chat.template import ChatFormat
    from skyrl_core.default_plugins.engines.gateway import Gateway
    from skyrl_core.default_plugins.engines.harness import run_harness
    from skyrl_core.default_plugins.runtimes.sandbox import LocalSandbox
    from skyrl_core.runtime import RuntimeSpec
    from skyrl_core.transitions import Trajectory
    from skyrl_swe.mini_harness import settings
    from skyrl_swe.tasks import mini_swe_agent_task

    (tmp_path / "ws").mkdir()
    engine = (engine_class or Replies)(tokenizer, replies)
    gateway = Gateway(engine, ChatFormat(tokenizer), require_open=True)
    await gateway.start()
    engine.port = int(gateway.url.rsplit(":", 1)[1])
    runtime = LocalSandbox(RuntimeSpec(type="sandbox", workspace=str(tmp_path / "ws"), cpu_time_s=20))
    await runtime.start()
    traj = Trajectory(instance_id="toy-1", sample_index=0, task="mini_swe_agent", group_id="g")
    instance = Instance(id="toy-1", data={"problem_statement": "Create hello.txt holding hi.",
                                          "mini_swe_agent": settings(mini)})
    harness = functools.partial(mini_swe_agent_task.harness, instance=instance, sampling=None)
    try:
        await run_harness(traj, gateway=gateway, harness=harness, runtime=runtime, timeout_s=120)
    finally:
        await runtime.close()
        await gateway.stop()
    return traj, engine, engine.port


async def test_mini_swe_agent_calls_are_recorded_with_the_engines_ids_and_its_commands_run_in_the_sandbox(
        tmp_path, tokenizer):
    """Two steps: a command that writes the workspace (in the sandbox: its hostname is bubblewrap's), then
    mini-swe-agent's submit. Both calls are recorded with exactly the ids the engine produced, the second extends
    the first (one datum, no drift), and the observation the agent got is the sandbox's."""
    traj, engine, _ = await run_agent(tmp_path, tokenizer, [action("echo hi > hello.txt && hostname"), SUBMIT])
    assert traj.finish_reason == "finished" and not traj.masked, traj.error
    assert traj.metrics["mini_exit_status"] == "Submitted" and traj.metrics["mini_steps"] == 2
    assert [t.output_ids for t in traj.transitions] == [out for _, out in engine.calls]
    assert [t.input_ids for t in traj.transitions] == [inp for inp, _ in engine.calls]
    assert traj.metrics["gateway_extended"] == 1 and traj.metrics["gateway_drift"] == 0
    assert (tmp_path / "ws" / "hello.txt").read_text() == "hi\n"
    observation = next(m["content"] for m in traj.messages if m["role"] == "user" and "<returncode>" in m["content"])
    assert "<returncode>0</returncode>" in observation and "sandbox" in observation  # bwrap's --hostname


async def test_a_reply_mini_swe_agent_drops_from_its_history_starts_a_new_datum_with_the_drift_reported(
        tmp_path, tokenizer):
    """mini-swe-agent drops a reply it cannot parse from its history (the format error follows the previous user
    message), so its next request rewrites the recorded conversation: the gateway starts a new datum there
    (``new_context``) and reports the drift at message 2, the dropped reply; the call after it extends again."""
    traj, engine, _ = await run_agent(tmp_path, tokenizer, ["I would list the files.", action("ls"), SUBMIT])
    assert traj.finish_reason == "finished" and traj.metrics["mini_exit_status"] == "Submitted", traj.error
    assert [t.output_ids for t in traj.transitions] == [out for _, out in engine.calls]
    assert [bool(t.new_context) for t in traj.transitions] == [False, True, False]
    assert traj.metrics["gateway_drift"] == 1 and traj.metrics["gateway_extended"] == 1
    (event,) = traj.metrics["gateway_drift_events"]
    assert event["call"] == 1 and event["first_message"] == 2 and event["reason"] == "history_changed"


async def test_a_call_slower_than_its_timeout_is_never_resent_while_it_is_still_generating(tmp_path, tokenizer):
    """A model call that outlives litellm's timeout (here ``call_timeout_s: 1`` against a 3 s first generation; on
    a loaded CPU, SmolLM2 outlived litellm's 600 s default) must not be resent at once: the OpenAI client's own
    retries would reach the session while the first request still generates and be refused (409
    session_busy), failing the run. Sent once, it is resent only by mini-swe-agent's retry after its pause, when
    the first has finished: the gateway records the resend in place of the lost call (a replay), once."""

    class Slow(Replies):
        async def generate(self, input_ids, sampling):
            if not self.calls:
                await asyncio.sleep(3)
            return await super().generate(input_ids, sampling)

    traj, engine, _ = await run_agent(tmp_path, tokenizer, [action("ls"), action("ls"), SUBMIT], Slow,
                                      call_timeout_s=1)
    assert traj.finish_reason == "finished", traj.error
    assert traj.metrics["gateway_busy_rejections"] == 0 and traj.metrics["gateway_replays"] == 1
    assert [t.output_ids for t in traj.transitions] == [out for _, out in engine.calls[1:]]


def bash_call(command: str) -> str:
    return '<tool_call>\n' + json.dumps({"name": "bash", "arguments": {"command": command}}) + '\n</tool_call>'


async def test_mini_swe_agents_tool_calling_config_works_through_the_gateways_parser(tmp_path, tokenizer):
    """mini-swe-agent's tool-calling config (``mini.yaml``, model class ``litellm``): the model's Hermes
    ``<tool_call>`` comes back to litellm in OpenAI form (the gateway's parser), mini-swe-agent runs the bash call
    in the sandbox and returns a ``tool`` message, and the next call extends the first."""
    replies = [bash_call("echo hi > hello.txt"), bash_call("echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT")]
    traj, engine, _ = await run_agent(tmp_path, tokenizer, replies, config="mini.yaml", model_class="litellm")
    assert traj.finish_reason == "finished" and traj.metrics["mini_exit_status"] == "Submitted", traj.error
    assert (tmp_path / "ws" / "hello.txt").read_text() == "hi\n"
    assert traj.metrics["gateway_tool_calls"] == 2 and traj.metrics["gateway_extended"] == 1
    assert [t.output_ids for t in traj.transitions] == [out for _, out in engine.calls]
    assert any(m["role"] == "tool" for m in traj.messages)


async def test_bad_harness_settings_are_named():
    from skyrl_swe.mini_harness import _config, settings

    with pytest.raises(ValueError, match=r"unknown key\(s\) \['steps'\]; valid: \['call_timeout_s', 'command_t"):
        settings({"steps": 3})
    with pytest.raises(ValueError, match="step_limit must be a positive number"):
        settings({"step_limit": 0})
    with pytest.raises(ValueError, match="'nope.yaml' is not a config mini-swe-agent ships; valid: .*mini_textbased"):
        _config("nope.yaml")


ATTACK = ("cat /etc/shadow; echo ---; ls {host}; echo ---; echo pwned > {host}/pwned.txt; echo ---; "
          "python3 -c \"import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:{port}/health', "
          "timeout=3).read())\"; echo ---; env")


async def test_mini_swe_agents_commands_reach_neither_host_files_nor_network_nor_the_gateway(tmp_path, tokenizer):
    """A hostile command from the model (mini-swe-agent runs it as given): it reads a secret next to the
    workspace, writes outside it, calls the very gateway recording it (to forge calls) and dumps its environment
    for the gateway's token. In the sandbox each fails: the host's directory is not there, the write is refused,
    there is no network, and no OPENAI_* / SKYRL_* variable reaches the command."""
    host = tmp_path / "host"
    host.mkdir()
    (host / "secret.txt").write_text("s3cr3t")
    attack = lambda engine: action(ATTACK.format(host=host, port=engine.port))  # noqa: E731
    traj, engine, port = await run_agent(tmp_path, tokenizer, [attack, SUBMIT])
    assert traj.finish_reason == "finished" and traj.metrics["mini_exit_status"] == "Submitted", traj.error
    observation = next(m["content"] for m in traj.messages if m["role"] == "user" and "<returncode>" in m["content"])
    parts = observation.split("---")
    assert len(parts) == 5, observation
    assert "s3cr3t" not in observation and "root:" not in parts[0]
    assert "No such file or directory" in parts[1]
    assert not (host / "pwned.txt").exists()
    assert "b'" not in parts[3] and ("Network is unreachable" in parts[3] or "Errno" in parts[3]), parts[3]
    assert "OPENAI_" not in parts[4] and "SKYRL_GATEWAY" not in parts[4] and f":{port}" not in parts[4]
    assert len(traj.transitions) == 2 == len(engine.calls)  # nothing forged reached the gateway
    assert traj.metrics["gateway_busy_rejections"] == 0
