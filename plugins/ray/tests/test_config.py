"""The config keys the Ray placement reads: every bad value is a ConfigError naming the key and what is valid, when
the run's placements are checked (RolloutSession.create does it before building the engine; no cluster needed)."""

from __future__ import annotations

import pytest

from skyrl_core.config import load_config
from skyrl_core.errors import ConfigError, SkyrlError, UnknownComponentError
from skyrl_core.placement import check_placements
from skyrl_core.plugins import get_registry
from skyrl_ray.config import cluster_config
from skyrl_ray.runtimes import actor_options, check_reachable, cluster_capacity


def checked(*overrides: str, path: str | None = None):
    """load_config, then the check every placement it names makes (as a run does before its engine starts)."""
    config = load_config(path, list(overrides))
    check_placements(config, get_registry())
    return config


@pytest.mark.parametrize("override, words", [
    ("tasks.0.runtime={placement: ray, resources: {cpus: 1}}", ["tasks.0.runtime.resources.cpus", "num_cpus"]),
    ("tasks.0.runtime={placement: ray, resources: {num_cpus: -1}}", ["tasks.0.runtime.resources.num_cpus", "0 or more"]),
    ("tasks.0.runtime={placement: ray, resources: {num_gpus: many}}", ["tasks.0.runtime.resources.num_gpus"]),
    ("tasks.0.runtime={placement: ray, resources: {memory_mb: 0}}", ["memory_mb", "positive"]),
    ("tasks.0.runtime={placement: ray, resources: {resources: {big_box: -2}}}", ["resources.resources", "amounts"]),
    ("tasks.0.runtime={placement: ray, max_actors: 0}", ["tasks.0.runtime.max_actors", "at least 1"]),
    ("tasks.0.runtime={placement: local, resources: {num_cpus: 1}}", ["tasks.0.runtime.resources", "such as ray"]),
    ("engine.resources={num_gpus: 1}", ["engine.resources", "engine.placement: ray"]),
    ("engine.replicas=0", ["engine.replicas", "at least 1"]),
    ("engine.endpoints=[localhost:8000]", ["engine.endpoints.0", "http(s) URL"]),
    ("engine.endpoints=[http://a:1/v1, http://a:1/v1]", ["engine.endpoints", "twice"]),
    ("plugins.ray.address=somewhere", ["plugins.ray.address", "HOST:6379"]),
    ("plugins.ray.address=ftp://head:1", ["plugins.ray.address", "ray://HOST:10001"]),
    ("plugins.ray.num_cpus=0", ["plugins.ray.num_cpus", "at least 1"]),
    ("plugins.ray.adress=auto", ["plugins.ray.adress", "address, num_cpus"]),
    ("ray.address=auto", ["config key 'ray' is now 'plugins.ray'"]),
])
def test_bad_scale_out_values_name_the_key(override, words):
    with pytest.raises(ConfigError) as err:
        checked(override)
    for word in words:
        assert word in str(err.value), str(err.value)


def test_an_unknown_placement_is_named_with_the_registered_ones():
    with pytest.raises(UnknownComponentError, match="no placement named 'cluster'.*registered: local, ray"):
        checked("tasks.0.runtime={type: sandbox, placement: cluster}")


def test_conflicting_engine_keys_are_refused():
    with pytest.raises(ConfigError, match="'engine.base_url' and 'engine.endpoints'"):
        load_config(None, ["engine.type=openai", "engine.base_url=http://a:1", "engine.endpoints=[http://b:2]"])
    with pytest.raises(ConfigError, match="engine.replicas' is 3 but engine.endpoints lists 2"):
        load_config(None, ["engine.replicas=3", "engine.endpoints=[http://a:1, http://b:2]"])
    with pytest.raises(ConfigError, match="'engine.placement: ray' and 'engine.endpoints' are both set"):
        checked("engine.type=openai", "engine.placement=ray", "engine.endpoints=[http://a:1/v1]")
    with pytest.raises(ConfigError, match="plugins.ray.num_cpus' sizes a local cluster"):
        checked("plugins.ray.address=auto", "plugins.ray.num_cpus=4")


def test_good_scale_out_values_load():
    cfg = checked("tasks.0.runtime={type: sandbox, placement: ray, resources: {num_cpus: 0.5, "
                  "memory_mb: 512, resources: {sandbox_host: 1}}, max_actors: 8}",
                  "engine.replicas=2", "engine.sticky=true", "plugins.ray.address=ray://head:10001",
                  "plugins.ray.runtime_env={env_vars: {A: b}}")
    rt = cfg.tasks[0].runtime
    assert (rt.placement, rt.max_actors, rt.resources["num_cpus"]) == ("ray", 8, 0.5)
    assert actor_options(rt.resources) == {"num_cpus": 0.5, "memory": 512 * 1024 * 1024,
                                           "resources": {"sandbox_host": 1}}
    assert cfg.engine.replicas == 2 and cfg.engine.sticky
    assert cluster_config(cfg).address == "ray://head:10001" and cluster_config(cfg).runtime_env == {"env_vars": {"A": "b"}}
    for address in ("auto", "10.0.0.1:6379", "ray://10.0.0.1:10001", None):
        checked("tasks.0.runtime={placement: ray}", f"plugins.ray.address={address if address else 'null'}")


def test_cluster_capacity_counts_what_fits_per_node():
    nodes = [{"Alive": True, "Resources": {"CPU": 8.0, "memory": 16e9, "sandbox_host": 1.0}},
             {"Alive": True, "Resources": {"CPU": 3.0, "memory": 4e9}},
             {"Alive": False, "Resources": {"CPU": 64.0}}]
    assert cluster_capacity(nodes, actor_options({})) == 11  # 8 + 3 one-CPU actors; the dead node counts nothing
    assert cluster_capacity(nodes, actor_options({"num_cpus": 2})) == 5  # 4 + 1
    assert cluster_capacity(nodes, actor_options({"num_cpus": 1, "memory_mb": 3 * 1024})) == 4 + 1  # by memory
    assert cluster_capacity(nodes, actor_options({"resources": {"sandbox_host": 1}})) == 1
    assert cluster_capacity(nodes, actor_options({"num_gpus": 1})) == 0


def test_an_unreachable_cluster_address_fails_fast_naming_the_key():
    import socket
    import time

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    t0 = time.perf_counter()
    with pytest.raises(SkyrlError, match=f"plugins.ray.address '127.0.0.1:{port}'.*ray start --head --port={port}"):
        check_reachable(f"127.0.0.1:{port}", timeout_s=2)
    assert time.perf_counter() - t0 < 5
    check_reachable("auto")  # left to Ray


def test_the_shipped_example_places_its_runtime_on_ray():
    from skyrl_core.default_plugins.example_configs.shipped import resolve_example

    cfg = checked(path=str(resolve_example("ray:gsm8k")))
    assert (cfg.tasks[0].runtime.placement, cfg.tasks[0].runtime.resources) == ("ray", {"num_cpus": 1})
    assert cluster_config(cfg).address is None


class _SlowStartingRay:
    """Ray's module as ``ensure_ray`` sees it, whose local node misses Ray's fixed 30 s registration window
    ``slow_starts`` times (the bare Exception ray/_private/node.py raises on a busy host), then starts."""

    def __init__(self, slow_starts: int):
        self.slow_starts, self.inits, self.shutdowns, self.up = slow_starts, 0, 0, False

    def is_initialized(self):
        return self.up

    def init(self, **kwargs):
        self.inits += 1
        if self.inits <= self.slow_starts:
            raise Exception("The current node timed out during startup. This could happen because some of the "
                            "raylet failed to startup or the GCS has become overloaded.")
        self.up = True

    def shutdown(self):
        self.shutdowns += 1

    def cluster_resources(self):
        return {"CPU": 2.0}


@pytest.mark.parametrize("slow_starts, started", [(0, True), (2, True), (3, False)])
def test_a_local_cluster_slow_to_register_is_started_again(monkeypatch, slow_starts, started):
    """A wheel-check run at load 17 failed its one trajectory on Ray's 30 s startup bound; nothing was wrong."""
    from skyrl_ray import runtimes

    fake = _SlowStartingRay(slow_starts)
    monkeypatch.setattr(runtimes, "_ray", lambda: fake)
    if started:
        assert runtimes.ensure_ray(None) is fake
        assert (fake.inits, fake.shutdowns) == (slow_starts + 1, slow_starts)
    else:
        with pytest.raises(SkyrlError, match="did not start in 3 tries of Ray's fixed 30 s each"):
            runtimes.ensure_ray(None)
        assert (fake.inits, fake.shutdowns) == (3, 3)
