"""skyrl_core.default_plugins.trainer.memory: the glibc trim that keeps a long CPU run's RSS flat (docs/training.md,
"Memory")."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from skyrl_core.default_plugins.trainer.memory import _libc, current_rss_mb, release_freed_memory

# Run in a fresh interpreter so the heap holds only what the script allocates: 3000 blocks of 64 KiB (below
# glibc's mmap threshold, so they come from the heap), each followed by a 1 KiB block (above pymalloc's limit, so also from the glibc heap) that stays alive, so the
# freed blocks cannot be returned by shrinking the top of the heap -- the pattern training and generation leave.
SCRIPT = """
import json
from skyrl_core.default_plugins.trainer.memory import current_rss_mb, release_freed_memory
base = current_rss_mb()
big, pins = [], []
for _ in range(3000):
    big.append(bytearray(64 * 1024))
    pins.append(bytearray(1024))
held = current_rss_mb()
del big
freed = current_rss_mb()
ok = release_freed_memory()
trimmed = current_rss_mb()
print(json.dumps({"base": base, "held": held, "freed": freed, "trimmed": trimmed, "ok": ok}))
"""


@pytest.mark.skipif(_libc() is None, reason="no glibc malloc_trim on this platform")
def test_trim_returns_freed_heap_pages_that_free_alone_keeps():
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120, check=True)
    r = json.loads(out.stdout.strip().splitlines()[-1])
    assert r["ok"] is True
    assert r["held"] - r["base"] > 150  # ~188 MiB allocated and touched
    assert r["freed"] - r["base"] > 150  # freeing alone keeps the pages: the fragmented heap cannot shrink
    assert r["freed"] - r["trimmed"] > 150  # the trim hands them back
    assert r["trimmed"] - r["base"] < 30


def test_current_rss_is_this_process():
    rss = current_rss_mb()
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    import resource
    assert rss == pytest.approx(pages * resource.getpagesize() / 2**20, rel=0.1)
    assert isinstance(release_freed_memory(), bool)
