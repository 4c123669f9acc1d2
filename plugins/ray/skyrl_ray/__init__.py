"""skyrl-ray: runtimes, tools, verifiers and engine replicas placed in Ray actors (``placement: ray``).

The hookimpls only; the placement is :mod:`skyrl_ray.placement`, the runtime actors :mod:`skyrl_ray.runtimes`,
the engine actors :mod:`skyrl_ray.engines`, the config keys :mod:`skyrl_ray.config`.
"""

from skyrl_core import hookimpl

from .placement import RayPlacement


@hookimpl
def register_placements(register):
    register(RayPlacement())
