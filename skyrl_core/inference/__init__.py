"""The inference-engine interface (:mod:`.base`). The built-in engines (``hf``, ``openai``, ``vllm``) and
``skyrl serve`` live in :mod:`skyrl_core.default_plugins.engines`; they import torch/transformers lazily."""

from .base import (CallClock, Engine, EngineError, EngineStalled, EngineStats, GenerationOutput, SamplingParams,
                   bounded_call)

__all__ = ["CallClock", "Engine", "EngineError", "EngineStalled", "EngineStats", "GenerationOutput", "SamplingParams",
           "bounded_call"]
