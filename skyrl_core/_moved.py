"""Old import paths of modules and names that moved in 0.2 (``CHANGELOG.md``), kept working for one release.

Importing an old module path (``skyrl_core.gsm8k``) or an old name from a module that stayed
(``skyrl_core.runtime.LocalSandbox``) gives the object from its new home and a :class:`DeprecationWarning` that
names the new path. The old files are gone rather than left as shims, so that git follows each file to its new
path; a finder on ``sys.meta_path`` (installed by ``skyrl_core/__init__.py``) serves the old module names.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import types
import warnings
from typing import Any, Callable, Iterable

_DP = "skyrl_core.default_plugins"

# old module -> the new modules its names now live in (searched in order)
MOVED_MODULES: dict[str, tuple[str, ...]] = {
    "skyrl_core.gsm8k": (f"{_DP}.gsm8k.dataset", f"{_DP}.gsm8k.instructions", f"{_DP}.gsm8k.verifiers"),
    "skyrl_core.parsers": (f"{_DP}.parsers.scanner", f"{_DP}.parsers.repair", f"{_DP}.parsers.hermes",
                           f"{_DP}.parsers.json_calls", f"{_DP}.parsers.openai_calls", f"{_DP}.parsers.codeblock",
                           f"{_DP}.parsers"),
    "skyrl_core.parsers_xml": (f"{_DP}.parsers.xml_parameters",),
    "skyrl_core.parsers_deepseek": (f"{_DP}.parsers.deepseek",),
    "skyrl_core.inference.hf": (f"{_DP}.engines.hf",),
    "skyrl_core.inference.openai": (f"{_DP}.engines.openai",),
    "skyrl_core.inference.vllm": (f"{_DP}.engines.vllm",),
    "skyrl_core.inference.serve": (f"{_DP}.engines.serve",),
}


def _warn(old: str, new: str) -> None:
    warnings.warn(f"{old} moved to {new}; import it from there (the old path goes away in the next release)",
                  DeprecationWarning, stacklevel=3)


def _lookup(modules: Iterable[str], name: str) -> tuple[str, Any]:
    """The first of ``modules`` that defines ``name`` (rather than importing it), else the first that has it."""
    found = []
    for modname in modules:
        module = importlib.import_module(modname)
        if hasattr(module, name):
            obj = getattr(module, name)
            if getattr(obj, "__module__", None) == modname:
                return modname, obj
            found.append((modname, obj))
    if found:
        return found[0]
    raise AttributeError(name)


def moved_attribute(module_name: str, new_module: str | tuple[str, ...], names: Iterable[str]
                    ) -> Callable[[str], Any]:
    """A module-level ``__getattr__`` serving ``names`` that moved from ``module_name`` to ``new_module`` (one
    module or several, searched in order), with a DeprecationWarning naming the new path. Any other name raises
    AttributeError as usual."""
    targets = (new_module,) if isinstance(new_module, str) else new_module
    moved = frozenset(names)

    def __getattr__(name: str) -> Any:
        if name.startswith("__") or name not in moved:
            raise AttributeError(f"module {module_name!r} has no attribute {name!r}")
        where, obj = _lookup(targets, name)
        _warn(f"{module_name}.{name}", f"{where}.{name}")
        return obj

    return __getattr__


class _MovedModuleLoader(importlib.abc.Loader):
    def __init__(self, targets: tuple[str, ...]) -> None:
        self.targets = targets

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType | None:
        return None

    def exec_module(self, module: types.ModuleType) -> None:
        old, targets = module.__name__, self.targets
        if len(targets) == 1:  # a plain move: the old name is the new module itself
            _warn(old, targets[0])
            sys.modules[old] = importlib.import_module(targets[0])
            return

        def __getattr__(name: str) -> Any:  # a split: each name is found in its new module, and the warning says which
            if name.startswith("__"):
                raise AttributeError(name)
            try:
                where, obj = _lookup(targets, name)
            except AttributeError:
                raise AttributeError(f"module {old!r} has no attribute {name!r} (its names moved to "
                                     f"{', '.join(targets)})") from None
            _warn(f"{old}.{name}", f"{where}.{name}")
            setattr(module, name, obj)  # warned once; later lookups are plain attributes
            return obj

        module.__getattr__ = __getattr__  # type: ignore[attr-defined]


class MovedModuleFinder(importlib.abc.MetaPathFinder):
    """Finds the old module paths of :data:`MOVED_MODULES`."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        targets = MOVED_MODULES.get(fullname)
        if targets is None:
            return None
        return importlib.machinery.ModuleSpec(fullname, _MovedModuleLoader(targets))


def install() -> None:
    """Put the finder on ``sys.meta_path`` once (idempotent)."""
    if not any(isinstance(f, MovedModuleFinder) for f in sys.meta_path):
        sys.meta_path.append(MovedModuleFinder())
