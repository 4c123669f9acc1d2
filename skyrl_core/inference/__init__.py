"""Inference engines. Engine modules import torch/transformers lazily; this package stays light."""

from .base import Engine, EngineStats, GenerationOutput, SamplingParams

__all__ = ["Engine", "EngineStats", "GenerationOutput", "SamplingParams"]
