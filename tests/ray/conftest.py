"""A local Ray cluster started by the tests themselves (2 CPUs, no dashboard, on 127.0.0.1), shut down after the
session, the hf engine on a 1-layer model, and an engine whose replies follow a per-question script (the real engine runs one token per call)."""

from __future__ import annotations

import os

import pytest



@pytest.fixture(scope="session")
def ray_cluster(tmp_path_factory):
    """``ray.init(num_cpus=2)`` on 127.0.0.1 for the whole session; yields the ``ray`` module. The swe plugin's
    repository environments go to a session cache, set before the cluster starts so that its actors see it."""
    ray = pytest.importorskip("ray")
    os.environ.setdefault("SKYRL_SWE_CACHE", str(tmp_path_factory.mktemp("swe-cache")))
    if not ray.is_initialized():
        ray.init(num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1",
                 object_store_memory=128 * 1024 * 1024, log_to_driver=False)
    try:
        yield ray
    finally:
        ray.shutdown()


@pytest.fixture(scope="session")
def tiny_engine(tiny_chat_model_dir):
    """The hf engine on the 1-layer model with SmolLM2's tokenizer and chat template (one thread while alive)."""
    import asyncio

    torch = pytest.importorskip("torch")
    from skyrl_core.default_plugins.engines.hf import HFEngine

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    engine = HFEngine(model=tiny_chat_model_dir, max_batch=4, device="cpu")
    try:
        yield engine
    finally:
        asyncio.run(engine.close())
        torch.set_num_threads(threads)
