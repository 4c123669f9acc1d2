"""Which SkyRL-train API generation is installed, and the few names that moved between them.

Two generations are supported:

- ``skyrl`` 0.4.0 (the current layout): ``skyrl.train.generators.base``, ``skyrl.train.utils.trainer_utils``,
  ``skyrl.train.trainer.RayPPOTrainer``, ``skyrl.train.entrypoints.main_base.BasePPOExp``, a dataclass config
  (``skyrl.train.config.SkyRLTrainConfig``). Preferred when both are installed.
- ``skyrl-train`` 0.3.1 (module ``skyrl_train``): the same generator types, a Hydra/omegaconf config
  (``skyrl_train/config/ppo_base_config.yaml``). The generator works with it; the launcher does not (see README).

Both declare Python >= 3.12 but run their data path on 3.11, and they pin different rays (2.57.0 and 2.51.1): with
ray 2.57 installed, :func:`load` re-exports one moved name for 0.3.1 (``_patch_ray_for_0_3``). ``skyrl`` 0.4.0
uses ``typing.TypedDict`` in TypedDicts that pydantic validates, which pydantic rejects below 3.12; :func:`load`
therefore makes ``typing.TypedDict`` the (compatible) ``typing_extensions.TypedDict`` before the first import on
Python < 3.12.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from types import ModuleType
from typing import Any

import attrs

from skyrl_core.errors import SkyrlError

GENERATIONS = ("skyrl.train", "skyrl_train")


@attrs.define(frozen=True)
class SkyrlTrainAPI:
    """The modules of one installed generation. ``generation`` is ``skyrl.train`` (0.4.0) or ``skyrl_train``
    (0.3.1); ``version`` the distribution's version string."""

    generation: str
    version: str
    base: ModuleType            # generators.base: GeneratorInterface, GeneratorInput/Output, TrajectoryID
    trainer_utils: ModuleType   # utils.trainer_utils: validate_generator_output
    trainer: ModuleType         # trainer: RayPPOTrainer

    @property
    def GeneratorInterface(self) -> type:
        return self.base.GeneratorInterface

    @property
    def TrajectoryID(self) -> type:
        return self.base.TrajectoryID

    def validate_generator_output(self, num_prompts: int, output: dict, step_wise: bool = False) -> None:
        """SkyRL-train's own check. 0.3.1's has no step-wise mode: there only the per-row checks run."""
        fn = self.trainer_utils.validate_generator_output
        if self.generation == "skyrl.train":
            fn(num_prompts, output, step_wise=step_wise)
        else:
            fn(len(output["response_ids"]) if step_wise else num_prompts, output)


def _patch_typeddict() -> None:
    if sys.version_info >= (3, 12):
        return
    import typing

    import typing_extensions

    typing.TypedDict = typing_extensions.TypedDict  # type: ignore[misc]


def _patch_ray_for_0_3() -> None:
    """skyrl-train 0.3.1 was built against ray 2.51, whose ``ray.util.placement_group`` still re-exported
    ``PlacementGroupSchedulingStrategy``; ray 2.57 (skyrl 0.4.0's pin) keeps it only in
    ``ray.util.scheduling_strategies``. Re-export it so both generations import in one environment."""
    # the module itself: ``ray.util.placement_group`` as an attribute is the function of that name
    pg = importlib.import_module("ray.util.placement_group")
    if not hasattr(pg, "PlacementGroupSchedulingStrategy"):
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        pg.PlacementGroupSchedulingStrategy = PlacementGroupSchedulingStrategy


def _version(dist: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return "unknown"


_CACHE: dict[str, SkyrlTrainAPI] = {}


def load(generation: str | None = None) -> SkyrlTrainAPI:
    """Import SkyRL-train: ``generation`` ``skyrl.train`` or ``skyrl_train``, or None for the first installed
    (``skyrl.train`` first). Raises SkyrlError naming the install command when neither is importable, or the
    import error of the one asked for."""
    if generation is not None and generation not in GENERATIONS:
        raise SkyrlError(f"unknown SkyRL-train API generation {generation!r}; valid: {', '.join(GENERATIONS)}")
    wanted = [generation] if generation else list(GENERATIONS)
    errors = []
    for gen in wanted:
        if gen in _CACHE:
            return _CACHE[gen]
        top = gen.split(".")[0]
        if importlib.util.find_spec(top) is None or (gen == "skyrl.train"
                                                      and importlib.util.find_spec("skyrl.train") is None):
            errors.append(f"{gen}: not installed")
            continue
        _patch_typeddict()
        if gen == "skyrl_train":
            _patch_ray_for_0_3()
        try:
            api = SkyrlTrainAPI(generation=gen, version=_version("skyrl" if gen == "skyrl.train" else "skyrl-train"),
                                base=importlib.import_module(f"{gen}.generators.base"),
                                trainer_utils=importlib.import_module(f"{gen}.utils.trainer_utils"),
                                trainer=importlib.import_module(f"{gen}.trainer"))
        except Exception as exc:  # noqa: BLE001 - reported with the generation it belongs to
            errors.append(f"{gen}: {type(exc).__name__}: {exc}")
            continue
        _CACHE[gen] = api
        return api
    raise SkyrlError("SkyRL-train is not importable (" + "; ".join(errors) + "). Install it as "
                     "plugins/skyrl-train/README.md shows: pip install --no-deps --ignore-requires-python "
                     "skyrl==0.4.0 plus its light dependencies")


def generator_interface() -> type:
    """``GeneratorInterface`` of the installed generation, or ``object`` when none is installed (so the
    generator class can be defined and its import error reported when it is built)."""
    try:
        return load().GeneratorInterface
    except SkyrlError:
        return object


def module(name: str, api: SkyrlTrainAPI | None = None) -> Any:
    """Import ``<generation>.<name>`` (e.g. ``config``, ``entrypoints.main_base``) of the loaded generation."""
    api = api or load()
    return importlib.import_module(f"{api.generation}.{name}")
