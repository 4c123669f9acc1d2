"""Docker runtimes under the dispatchers: container start is init-stage work (overlapped with other trajectories),
``max_runtimes`` caps the containers alive (counted by the engine), a cancelled dispatch removes every container
exactly once, and a container killed under its trajectory ends that trajectory only (``error_runtime``)."""

from __future__ import annotations

import asyncio
import json

import attrs
import pytest

from skyrl_core.config import AgentConfig, DispatcherConfig
from skyrl_core.default_plugins.dispatchers import BUILTIN_DISPATCHERS
from skyrl_core.dispatchers import Stages
from skyrl_core.runtime import RuntimeSpec
from skyrl_core.transitions import CANCELLED, ERROR_RUNTIME, FINISHED, Trajectory
from skyrl_swe.docker_runtime import REMOVALS, DockerRuntime, leaked_containers

pytestmark = pytest.mark.timeout(600)


def trajectories(n: int) -> list[Trajectory]:
    return [Trajectory(instance_id=f"i{k}", sample_index=0, task="t", group_id=f"i{k}") for k in range(n)]


class DockerWork:
    """Real stages over busybox containers: init starts one, run executes a command in it, release closes it."""

    def __init__(self, image: str, run_s: float = 0.5) -> None:
        self.image, self.run_s = image, run_s
        self.runtimes: dict[str, DockerRuntime] = {}

    def stages(self) -> Stages:
        async def init(traj):
            rt = DockerRuntime(RuntimeSpec(type="docker", options={"image": self.image}))
            self.runtimes[traj.id] = rt
            await rt.start()
            await rt.prepare({"instance_id": traj.instance_id})

        async def run(traj):
            res = await self.runtimes[traj.id].exec(["sh", "-c", f"sleep {self.run_s}; echo ran"], timeout_s=60)
            assert res.output.strip() == "ran"
            traj.finish_reason = FINISHED

        async def evaluate(traj):
            traj.reward = 1.0

        async def release(traj):
            await self.runtimes[traj.id].close()

        return Stages(init=init, run=run, eval=evaluate, release=release)


async def _count_alive(client, stop: asyncio.Event, peaks: list[int]) -> None:
    while not stop.is_set():
        n = len(await asyncio.to_thread(leaked_containers, client))  # this process's, counted by the engine
        peaks.append(n)
        await asyncio.sleep(0.1)


@pytest.mark.parametrize("kind", ["async_pipeline", "async_batch"])
async def test_max_runtimes_caps_the_containers_alive(busybox_image, docker_engine, kind):
    cfg = DispatcherConfig(type=kind, max_parallel_agents=4, max_runtimes=2)
    work = DockerWork(busybox_image)
    trajs = trajectories(6)
    stop, seen = asyncio.Event(), []
    counter = asyncio.ensure_future(_count_alive(docker_engine, stop, seen))
    metrics = await BUILTIN_DISPATCHERS[kind](cfg, None).dispatch(trajs, work.stages())
    stop.set()
    await counter
    assert [t.reward for t in trajs] == [1.0] * 6 and all(t.error is None for t in trajs)
    assert metrics["peak_runtimes"] <= 2 and max(seen) <= 2 and max(seen) >= 1
    assert all(rt.removals == 1 for rt in work.runtimes.values())
    # container start is init-stage work: seconds there, while the run stage holds only the command
    assert metrics["init_s_mean"] > 0.2 and 0.4 < metrics["run_s_mean"] < 3, metrics


async def test_a_cancelled_dispatch_removes_every_container_once(busybox_image, docker_engine):
    cfg = DispatcherConfig(type="async_pipeline", max_parallel_agents=4)
    work = DockerWork(busybox_image, run_s=30)
    trajs = trajectories(4)
    task = asyncio.ensure_future(BUILTIN_DISPATCHERS["async_pipeline"](cfg, None).dispatch(trajs, work.stages()))
    for _ in range(200):  # until some are running their (long) command
        await asyncio.sleep(0.1)
        if len(leaked_containers(docker_engine)) >= 2:
            break
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert work.runtimes and all(REMOVALS.get(rt.container_name, 0) == rt.removals <= 1
                                 for rt in work.runtimes.values())
    assert all(rt.removals == 1 for rt in work.runtimes.values() if rt.container is not None)
    assert any(t.finish_reason == CANCELLED for t in trajs)


# -- a container that dies ---------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def engine():
    from skyrl_core.default_plugins.engines.hf import HFEngine

    eng = HFEngine(model="smollm2-135m-instruct", max_batch=2, device="cpu")
    yield eng
    asyncio.run(eng.close())


class Scripted:
    """The real engine runs one token per call, then its reply is replaced by the next scripted tool call (so the
    test controls what the agent does; the tokens are the real tokenizer's)."""

    def __init__(self, inner, replies: list[str]) -> None:
        self.inner, self.replies, self.calls = inner, replies, 0
        self.tokenizer, self.max_context, self.name = inner.tokenizer, inner.max_context, "scripted"

    async def generate(self, input_ids, sampling):
        from skyrl_core.inference.base import GenerationOutput

        await self.inner.generate(input_ids, attrs.evolve(sampling, max_tokens=1))
        reply = self.replies[min(self.calls, len(self.replies) - 1)]
        self.calls += 1
        ids = self.tokenizer(reply, add_special_tokens=False)["input_ids"] + [
            self.tokenizer.convert_tokens_to_ids("<|im_end|>")]
        return GenerationOutput(output_ids=ids, output_logprobs=[0.0] * len(ids), finish_reason="stop", text=reply)


def call(name: str, **args) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': args})}\n</tool_call>"


async def test_a_killed_container_fails_only_its_trajectory(engine, base_image, docker_engine):
    from skyrl_core import ToolContext
    from skyrl_core.agent import run_agent
    from skyrl_core.default_plugins.chat.template import ChatFormat
    from skyrl_core.inference.base import SamplingParams
    from skyrl_core.default_plugins.parsers import HermesParser
    from skyrl_swe.tools import bash_tool, submit_tool

    chat = ChatFormat(engine.tokenizer)
    tools = {t.name: t for t in (bash_tool, submit_tool)}
    replies = [call("bash", command="echo edited > /root/note.txt && echo ok"), call("submit")]
    runtimes, trajs = [], []
    try:
        for k in range(2):
            rt = DockerRuntime(RuntimeSpec(type="docker", options={"image": base_image, "workdir": "/root"}),
                               instance={"instance_id": f"k{k}"})
            await rt.start()
            runtimes.append(rt)
            trajs.append(Trajectory(instance_id=f"k{k}", sample_index=0, task="t", group_id=f"k{k}",
                                    messages=[{"role": "user", "content": "Write a note, then submit."}]))
        docker_engine.api.kill(runtimes[0].container_name)  # the first one dies before its agent acts
        await asyncio.gather(*(
            run_agent(t, engine=Scripted(engine, replies), tools=tools, parser=HermesParser(), chat=chat,
                      agent_config=AgentConfig(max_turns=4), sampling=SamplingParams(max_tokens=8),
                      ctx=ToolContext(runtime=rt)) for t, rt in zip(trajs, runtimes)))
    finally:
        for rt in runtimes:
            await rt.close()
    dead, alive = trajs
    assert dead.finish_reason == ERROR_RUNTIME and dead.masked and "not running" in dead.error
    assert alive.finish_reason == FINISHED and "+edited" in (alive.answer or ""), alive.messages[-3:]
    assert [rt.removals for rt in runtimes] == [1, 1]
