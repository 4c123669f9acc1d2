"""The inference-engine interface (:mod:`.base`). The built-in engines (``hf``, ``openai``, ``vllm``) and
``skyrl serve`` live in :mod:`skyrl_core.default_plugins.engines`; they import torch/transformers lazily."""

from .base import Engine, EngineError, EngineStats, GenerationOutput, SamplingParams

__all__ = ["Engine", "EngineError", "EngineStats", "GenerationOutput", "SamplingParams"]
