"""The docker path's image plan without an engine: which FROM maps to the local base (and how the substitution is
named), which bases are refused with the line, and how a failed build's log is classed."""

from pathlib import Path

import pytest

from skyrl_harbor.images import BASE_IMAGE, ImageBuildError, classify, local_base_for, rewrite_dockerfile
from skyrl_harbor.taskdir import load_task

FIXTURE = Path(__file__).parent / "fixtures" / "docker-tasks" / "sort-numbers"


def test_registry_bases_map_to_the_local_base():
    for image in ("ubuntu:24.04", "python:3.13-slim-bookworm", "debian", "docker.io/library/debian:12",
                  "public.ecr.aws/docker/library/python:3.10.12-slim-bullseye",
                  "ghcr.io/laude-institute/t-bench/ubuntu-24-04:20250624",
                  "ghcr.io/laude-institute/t-bench/python-3-13",
                  "buildpack-deps:jammy"):
        assert local_base_for(image) == BASE_IMAGE, image
    for image in ("node:20", "rust:1.80", "nvidia/cuda:12.4.0-runtime-ubuntu22.04", "ghcr.io/acme/ubuntu:22.04"):
        assert local_base_for(image) is None, image


def test_rewrite_replaces_each_from_and_names_the_substitution(tmp_path):
    text, subs = rewrite_dockerfile(load_task(FIXTURE))
    assert text.splitlines()[1] == f"FROM {BASE_IMAGE}" and "RUN useradd" in text
    assert subs == [f"ubuntu:24.04 -> {BASE_IMAGE} (Debian 12 bookworm minbase + python3 3.11, pip, venv, curl, uv "
                    f"(built here; not the upstream image))"]
    task = tmp_path / "t"
    import shutil

    shutil.copytree(FIXTURE, task)
    (task / "environment" / "Dockerfile").write_text("FROM python:3.12 AS build\nRUN true\nFROM build\nWORKDIR /app\n")
    text, subs = rewrite_dockerfile(load_task(task))
    assert text.splitlines()[:3] == [f"FROM {BASE_IMAGE} AS build", "RUN true", "FROM build"] and len(subs) == 1
    (task / "environment" / "Dockerfile").write_text("FROM ubuntu:22.04\nRUN true\nFROM node:20-slim\n")
    with pytest.raises(ImageBuildError, match=r"Dockerfile:3: FROM 'node:20-slim' — no local base") as err:
        rewrite_dockerfile(load_task(task))
    assert err.value.reason == "base-unmapped"
    (task / "environment" / "Dockerfile").unlink()
    with pytest.raises(ImageBuildError, match="Dockerfile: missing") as err:
        rewrite_dockerfile(load_task(task))
    assert err.value.reason == "no-dockerfile"


def test_a_failed_build_is_classed_from_its_log():
    assert classify("E: Unable to locate package python3.12-venv") == "apt-package-missing"
    assert classify("ERROR: No matching distribution found for torch==9.9") == "pip-failed"
    assert classify("curl: (6) Could not resolve host: astral.sh") == "download-elsewhere"
    assert classify("fatal: unable to access 'https://github.com/x/y/': Failed to connect") == "download-elsewhere"
    assert classify("make: *** [all] Error 2") == "build-step-failed"
    # pip's own words when the index it was told to use does not answer: the host, not the package
    assert classify("WARNING: Retrying (...) after connection broken by 'NewConnectionError(...: Failed to establish "
                    "a new connection: [Errno -2] Name or service not known')': /whl/cpu/torch/\n"
                    "ERROR: No matching distribution found for torch==2.1.2") == "download-elsewhere"


def test_a_phase_network_mode_overrides_the_environments(tmp_path):
    # harbor 0.25.0: [environment] network_mode is both phases' baseline; [agent]/[verifier] network_mode override it
    import shutil

    from skyrl_core.runtime import RuntimeSpec

    from skyrl_harbor.runtime import task_spec

    task = tmp_path / "t"
    shutil.copytree(FIXTURE, task)
    toml = task / "task.toml"
    toml.write_text(toml.read_text() + 'network_mode = "no-network"\n')  # under [environment]
    on = RuntimeSpec(type="harbor_docker", network=True)
    parsed = load_task(task)
    assert [task_spec(on, parsed, phase).network for phase in ("agent", "verifier")] == [False, False]
    toml.write_text(toml.read_text().replace("[verifier]\n", '[verifier]\nnetwork_mode = "public"\n'))
    parsed = load_task(task)
    assert [task_spec(on, parsed, phase).network for phase in ("agent", "verifier")] == [False, True]
    assert not task_spec(RuntimeSpec(type="harbor_docker"), parsed, "verifier").network  # the config's off wins


def test_verify_docker_without_an_engine_says_so_in_one_line(tmp_path):
    import os
    import subprocess
    import sys

    pytest.importorskip("skyrl_swe", reason="the docker path runs on skyrl-swe's docker runtime")
    env = {**os.environ, "DOCKER_HOST": f"unix://{tmp_path}/no-engine.sock"}
    proc = subprocess.run([sys.executable, "-m", "skyrl_core.cli", "harbor", "verify", str(FIXTURE), "--docker"],
                          capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "skyrl harbor verify --docker: no Docker engine answers" in proc.stderr and "Traceback" not in proc.stderr


async def test_the_docker_runtime_refuses_a_patch_naming_what_needs_one():
    """The swe docker runtime's ``diff`` (against its repository baseline) is inherited but means nothing for a
    Harbor image: asking for it is a named configuration error, not a silent empty patch."""
    pytest.importorskip("skyrl_swe")
    from skyrl_core.errors import ConfigError
    from skyrl_core.runtime import RuntimeSpec
    from skyrl_harbor.runtime_docker import docker_runtime_class

    runtime = docker_runtime_class()(RuntimeSpec(type="harbor_docker"))
    with pytest.raises(ConfigError, match="'harbor_docker' has no repository baseline.*'submit' tool and "
                                          "'swe_tests' verifier need runtime 'docker'"):
        await runtime.diff()
