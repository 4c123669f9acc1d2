"""Process memory helpers for long training runs on CPU.

glibc's malloc keeps freed chunks in per-thread arenas, and after a large mmapped block is freed it raises its
mmap threshold (up to 32 MiB on 64-bit), so later activation and KV-cache tensors of a few MiB are carved out of
the arenas instead of being mmapped. Training (one thread), generation (the engine's thread) and the event loop
each free hundreds of MiB per step into different arenas; without a trim the freed pages stay resident and the
process's RSS grows from step to step although live tensors do not (measured: docs/training.md, "Memory").
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import logging
import resource

log = logging.getLogger(__name__)


@functools.lru_cache(maxsize=1)
def _libc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        libc = ctypes.CDLL(name)
    except OSError:
        return None
    return libc if hasattr(libc, "malloc_trim") else None


def release_freed_memory() -> bool:
    """Return the free pages of every malloc arena to the OS (glibc ``malloc_trim(0)``; since glibc 2.8 it walks
    all arenas, not just the main heap). Live tensors are untouched. Returns False where there is no glibc
    (musl, macOS): there it does nothing."""
    libc = _libc()
    if libc is None:
        return False
    try:
        libc.malloc_trim(ctypes.c_size_t(0))
    except (AttributeError, OSError):  # pragma: no cover - exotic libc
        return False
    return True


def peak_rss_mb() -> float:
    """Peak resident set size of this process so far, in MiB (Linux reports ``ru_maxrss`` in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def current_rss_mb() -> float:
    """Resident set size of this process now, in MiB (Linux ``/proc/self/status``; the peak where absent)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return peak_rss_mb()
