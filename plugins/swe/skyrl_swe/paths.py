"""Where the swe plugin keeps what it downloads and builds: environments, repository snapshots and mirrors,
sdists, docker image archives. A leaf module (standard library and platformdirs only) so every other module of
the plugin can ask without importing the runtimes."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """Where environments, repository snapshots and downloads are kept: ``$SKYRL_SWE_CACHE`` or the user cache."""
    env = os.environ.get("SKYRL_SWE_CACHE")
    if env:
        return Path(env)
    import platformdirs

    return Path(platformdirs.user_cache_dir("skyrl-swe"))
