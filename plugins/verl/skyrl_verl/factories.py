"""The factories skyrl's registry holds for this plugin, kept torch-free: registering them (at every ``skyrl``
start) imports nothing heavy; torch and VeRL load when a run builds the backend."""

from __future__ import annotations


def verl_backend(config, engine=None):
    """Backend factory ``verl``: :class:`skyrl_verl.backend.VerlBackend` (imports torch and VeRL)."""
    from .backend import VerlBackend

    return VerlBackend(config, engine)
