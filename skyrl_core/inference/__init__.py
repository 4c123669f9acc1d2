"""Inference engines. Engine modules import torch/transformers lazily; this package stays light."""

from .base import Engine, EngineError, EngineStats, GenerationOutput, SamplingParams

__all__ = ["Engine", "EngineError", "EngineStats", "GenerationOutput", "SamplingParams"]
