"""A local Ray cluster started by the tests themselves (2 CPUs, no dashboard, on 127.0.0.1), shut down after the
session, the hf engine on a 1-layer model (and on SmolLM2-135M-Instruct for the slow test), and a fresh plugin
manager. Only this plugin is loaded from the installed plugins."""

from __future__ import annotations

import os

import pytest

os.environ["SKYRL_LOAD_PLUGINS"] = "skyrl-ray"  # skyrl-swe: registered by its test itself
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


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


@pytest.fixture
def plugins():
    """A fresh plugin manager (the built-ins and the allowed plugins); the process-wide one is reset afterwards."""
    from skyrl_core import plugins as plugins_mod

    plugins_mod.reset_plugins()
    try:
        yield plugins_mod.get_plugins()
    finally:
        plugins_mod.reset_plugins()


def _hf_engine(**kwargs):
    """An HFEngine with one intra-op thread while it lives (torch's default threads crawl on a shared host)."""
    pytest.importorskip("torch")
    from skyrl_core.default_plugins.engines.tiny_model import cpu_engine

    with cpu_engine(**kwargs) as engine:
        yield engine


@pytest.fixture(scope="session")
def tiny_chat_model_dir(tmp_path_factory) -> str:
    """A randomly initialised 1-layer Llama (hidden 16) with SmolLM2's tokenizer and chat template, saved once."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from skyrl_core.default_plugins.engines.tiny_model import save_tiny_chat_model

    return save_tiny_chat_model(tmp_path_factory.mktemp("tiny-chat-model"))


@pytest.fixture(scope="session")
def tiny_engine(tiny_chat_model_dir):
    """The hf engine on the 1-layer model."""
    yield from _hf_engine(model=tiny_chat_model_dir, max_batch=4)


@pytest.fixture(scope="module")
def hf_engine():
    """The real hf engine on SmolLM2-135M-Instruct (max_batch 8), one per test module."""
    yield from _hf_engine(max_batch=8)
