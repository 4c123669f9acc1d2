"""Fixtures for skyrl-swe: the plugin loaded explicitly, a real small project from the package index (the
inflection 0.5.1 sdist with its 455-test pytest suite, downloaded once and cached under tests/.cache), sandboxes
holding a copy of it, and instances generated from it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
CACHE = HERE / ".cache"
os.environ["SKYRL_LOAD_PLUGINS"] = "skyrl-swe"
os.environ.setdefault("SKYRL_SWE_CACHE", str(CACHE))
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

PROJECT = "inflection==0.5.1"
collect_ignore = ["fixtures"]  # small projects whose own tests produced the captured runner output


@pytest.fixture(scope="session")
def project_src() -> Path:
    """The unpacked inflection 0.5.1 source distribution (shared, read-only by convention: copy before writing)."""
    from skyrl_swe.generator import GeneratorError, fetch_sdist

    try:
        path, _name, _version = fetch_sdist(PROJECT)
    except GeneratorError as exc:
        pytest.skip(f"cannot fetch {PROJECT} from the package index: {exc}")
    return path


@pytest.fixture
async def sandbox(project_src):
    """A started swe_sandbox holding a git copy of the project (HEAD = pristine)."""
    from skyrl_core.runtime import RuntimeSpec
    from skyrl_swe.runtime import SweSandbox

    rt = SweSandbox(RuntimeSpec(type="swe_sandbox", source=str(project_src), cpu_time_s=60))
    await rt.start()
    try:
        yield rt
    finally:
        await rt.close()


@pytest.fixture
def ctx(sandbox):
    from skyrl_core import ToolContext

    return ToolContext(runtime=sandbox)


@pytest.fixture(scope="session")
def generated(project_src) -> Path:
    """instances.jsonl of two instances generated from the project (made once, kept in the cache)."""
    import asyncio

    from skyrl_swe.generator import generate

    out = CACHE / "generated"
    path = out / "instances.jsonl"
    if not path.exists() or sum(1 for line in path.open() if line.strip()) < 2:
        if out.exists():
            import shutil

            shutil.rmtree(out)
        rows = asyncio.run(generate(PROJECT, out, n=2, seed=0, max_tries=16))
        assert len(rows) == 2, "the generator kept fewer than 2 mutations of inflection in 16 tries"
    return path



@pytest.fixture
def one_torch_thread():
    """torch's default intra-op threads spin on a shared, oversubscribed host (docs/engines.md): use one."""
    torch = pytest.importorskip("torch")
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)
