"""``skyrl eval`` of the quickstart config with SmolLM2-135M-Instruct sampling (temperature 1, seeded): the same
token ids, rewards and finish reasons with ``placement: ray`` as with local placement."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from skyrl_core.config import load_config

REPO = Path(__file__).resolve().parents[3]
pytestmark = [pytest.mark.timeout(900), pytest.mark.usefixtures("ray_cluster")]


def read(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "trajectories.jsonl").read_text().splitlines() if line.strip()]


@pytest.mark.slow
async def test_quickstart_eval_with_the_model_on_ray_equals_local(hf_engine, tmp_path):
    from skyrl_core.default_plugins.eval.run import run_eval

    # one request at a time: the engine's batches then hold one row, so sampling depends on the seed alone
    common = ["eval_data.limit=4", "sampling.n_samples=1", "sampling.seed=0", "dispatcher.max_parallel_agents=1"]
    await run_eval(load_config(REPO / "examples" / "quickstart.yaml", common), tmp_path / "local", engine=hf_engine)
    await run_eval(load_config(REPO / "examples" / "quickstart.yaml",
                               [*common, "tasks.0.runtime={type: sandbox, placement: ray}"]),
                   tmp_path / "ray", engine=hf_engine)
    local, remote = read(tmp_path / "local"), read(tmp_path / "ray")
    assert len(local) == len(remote) == 4
    assert [t["reward"] for t in remote] == [t["reward"] for t in local]
    assert [t["finish_reason"] for t in remote] == [t["finish_reason"] for t in local]
    assert [[x["output_ids"] for x in t["transitions"]] for t in remote] == \
        [[x["output_ids"] for x in t["transitions"]] for t in local]
    # the model called the python tool somewhere, so the comparison went through the actor's sandbox
    assert sum(t["tool_calls"].get("python", 0) for t in remote) >= 1, [t["messages"][-1] for t in remote]
    assert all(t["error"] is None for t in remote), [t["error"] for t in remote]
