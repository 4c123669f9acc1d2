#!/usr/bin/env bash
# Build the local Tinker-compatible server's own venv: the open `skyrl` 0.4.0 distribution's Tinker API server
# (JAX backend, CPU) with its dependencies pinned. Usage: setup-venv.sh VENV_DIR (default .venv-tinker-server).
# The server installs a top-level `skyrl` import package and a pinned tinker SDK, so it never shares a venv
# with skyrl-core. skyrl 0.4.0 declares Python >= 3.12; on 3.11 it runs with the shims in launch.py.
set -euo pipefail
venv=${1:-.venv-tinker-server}
export PIP_DISABLE_PIP_VERSION_CHECK=1
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
py="$venv/bin/python"
"$py" -m pip install -q --upgrade pip setuptools wheel
constraints=$(mktemp)
trap 'rm -f "$constraints"' EXIT
# the CPU torch first and pinned for every later install (peft needs torch; an unpinned one pulls CUDA builds)
printf '%s\n' torch==2.13.0 jax==0.10.2 jaxlib==0.10.2 flax==0.12.8 peft==0.18.1 tinker==0.25.0 \
  'transformers==5.8.0' > "$constraints"
"$py" -m pip install -q torch==2.13.0
"$py" -m pip install -q -c "$constraints" torch transformers peft tinker jax jaxlib flax optax \
  safetensors tokenizers typing_extensions fastapi uvicorn sqlmodel 'sqlalchemy[asyncio]' aiosqlite psutil aiohttp \
  rich typer cloudpathlib zstandard xxhash pillow
# the server itself, without its declared dependencies (datasets, hf_transfer, ... are not needed to serve)
"$py" -m pip install -q --no-deps --ignore-requires-python skyrl==0.4.0
"$py" -c "import skyrl.tinker, jax, flax, tinker; print('tinker server venv ready:', jax.__version__, tinker.__version__)"
