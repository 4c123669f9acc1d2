"""The inference-engine interface (:mod:`.base`). The built-in engines (``hf``, ``openai``, ``vllm``) and
``skyrl serve`` live in :mod:`skyrl_core.default_plugins.engines`; they import torch/transformers lazily, and bound and count their calls with its ``calls.py``."""

from .base import Engine, EngineError, EngineStalled, EngineStats, GenerationOutput, SamplingParams

__all__ = ["Engine", "EngineError", "EngineStalled", "EngineStats", "GenerationOutput", "SamplingParams"]
