"""Three small verifiers (v1) environments this plugin ships, written with verifiers' own API (``vf.Taskset``,
``vf.Task`` with ``@vf.reward`` / ``@vf.metric`` / ``@vf.stop``, ``vf.Toolset`` with ``@vf.tool``,
``vf.SingleAgentEnv.run``), so `skyrl eval` / `skyrl train` and the tests run verifiers environments from a fresh
clone and in CI (the verifiers 0.4.0 wheel ships none that run offline: its built-in tasksets wrap Harbor, NeMo
Gym, OpenEnv and TextArena; the repository's ``environments/`` are on no package index).

| taskset id | kind | module |
| --- | --- | --- |
| ``skyrl-arithmetic`` | single-turn: one sum, its answer in ``<answer>`` tags | :mod:`.arithmetic` |
| ``skyrl-codebook`` | tool-using: a per-rollout MCP tool server (``codebook_lookup``) holds the codes | :mod:`.codebook` |
| ``skyrl-guess`` | multi-turn: the env answers each guess with higher / lower | :mod:`.guess` |

verifiers finds a taskset by id as a top-level module (``skyrl-arithmetic`` -> ``skyrl_arithmetic``);
:func:`publish` makes each of these modules importable under that name.
"""

from __future__ import annotations

import importlib
import sys

SHIPPED = {"skyrl-arithmetic": "arithmetic", "skyrl-codebook": "codebook", "skyrl-guess": "guess"}


def publish() -> None:
    """Make each shipped taskset importable as verifiers' loader looks it up (idempotent)."""
    for taskset_id, module in SHIPPED.items():
        alias = taskset_id.replace("-", "_")
        if alias not in sys.modules:
            sys.modules[alias] = importlib.import_module(f"{__name__}.{module}")
