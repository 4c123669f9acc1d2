"""The red-team suite: every test is an attack an agent could make, and asserts its concrete outcome (a file
absent, reward 0 with the named reason, a process count bounded). Run as root and as a normal user by .ci/run.

Without a working bubblewrap the attacks skip, unless ``SKYRL_REQUIRE_SANDBOX=1`` (set by .ci/run), where they
fail: CI must never pass the suite by skipping it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
# the swe plugin builds its environments under this cache; set before skyrl_swe is imported
os.environ.setdefault("SKYRL_SWE_CACHE", str(HERE / ".cache"))


@pytest.fixture(autouse=True)
def sandbox_available():
    from skyrl_core.testing import require_sandbox

    require_sandbox()


@pytest.fixture
def outside(request) -> Path:
    """A host directory outside every sandbox mount (not under /tmp, which the sandbox replaces): where canaries
    and markers live."""
    import shutil
    import tempfile

    base = Path(os.environ.get("SKYRL_SECURITY_OUTSIDE", "/var/tmp"))
    path = Path(tempfile.mkdtemp(prefix="skyrl-outside-", dir=base))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
