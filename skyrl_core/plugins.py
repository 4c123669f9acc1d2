"""The plugin manager: loads plugins and builds the registry from their hooks (kept in :mod:`skyrl_core.registry`;
what ``skyrl plugins`` reports per plugin is :class:`~skyrl_core.plugin_info.PluginInfo`).

Plugins are loaded from the ``skyrl`` entry-point group and from the in-tree default plugins. The environment
variable ``SKYRL_LOAD_PLUGINS`` is an allow-list of third-party plugins (comma-separated distribution or
entry-point names); an empty value loads none. ``SKYRL_TRACE_PLUGINS=1`` logs every hook call and what it
registered.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import logging
import os
import threading
from typing import Any, Callable

import pluggy

from . import hookspecs
from .errors import RegistrationError
from .plugin_info import PluginInfo
from .registry import KINDS, Registration, Registry, _validate  # noqa: F401  (Registration: re-exported)

log = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "skyrl"

DEFAULT_PLUGINS = (
    "skyrl_core.default_plugins.generic_tools",
    "skyrl_core.default_plugins.runtimes",
    "skyrl_core.default_plugins.engines",
    "skyrl_core.default_plugins.parsers",
    "skyrl_core.default_plugins.dispatchers",
    "skyrl_core.default_plugins.bench",
    "skyrl_core.default_plugins.gsm8k",
    "skyrl_core.default_plugins.trainer",
    "skyrl_core.default_plugins.eval_command",
    "skyrl_core.default_plugins.curation",
    "skyrl_core.default_plugins.viewer",
    "skyrl_core.default_plugins.catalog",
    "skyrl_core.default_plugins.scaffold",
)


def _allowed_plugins() -> set[str] | None:
    value = os.environ.get("SKYRL_LOAD_PLUGINS")
    if value is None:
        return None
    return {part.strip() for part in value.split(",") if part.strip()}


class SkyrlPlugins:
    """One pluggy PluginManager plus the registry built from its hooks. Use :func:`get_plugins`."""

    def __init__(self, load_entry_points: bool = True) -> None:
        self.pm = pluggy.PluginManager(ENTRY_POINT_GROUP)
        self.pm.add_hookspecs(hookspecs)
        self.infos: dict[str, PluginInfo] = {}
        self._registry: Registry | None = None
        self._lock = threading.Lock()
        for modname in DEFAULT_PLUGINS:
            module = importlib.import_module(modname)
            short = "builtin:" + modname.rsplit(".", 1)[1]
            self.pm.register(module, name=short)
            self.infos[short] = PluginInfo(name=short, distribution="skyrl-core", version=_version("skyrl-core"),
                                             builtin=True)
        self.pm.check_pending()
        if load_entry_points:
            self._load_entry_points()

    # -- loading -------------------------------------------------------------------------------------------
    def _load_entry_points(self) -> None:
        allowed = _allowed_plugins()
        for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
            dist = getattr(ep, "dist", None)
            dist_name = dist.metadata["Name"] if dist is not None else None
            if allowed is not None and ep.name not in allowed and (dist_name not in allowed):
                continue
            self.load_plugin_entry(ep.name, ep.load, dist_name, dist.version if dist is not None else None)

    def load_plugin_entry(self, name: str, loader: Callable[[], Any], dist_name: str | None = None,
                          version: str | None = None) -> PluginInfo:
        """Import and register one third-party plugin, recording (not raising) any failure."""
        info = PluginInfo(name=name, distribution=dist_name, version=version)
        self.infos[name] = info
        if self.pm.has_plugin(name) or self.pm.get_plugin(name) is not None:
            info.error = f"entry point name '{name}' is already registered by another plugin"
            return info
        try:
            module = loader()
        except Exception as exc:  # a broken plugin must not take the CLI down
            info.error = f"failed to import: {type(exc).__name__}: {exc}"
            log.warning("plugin '%s' failed to import: %s", name, exc)
            return info
        self.register_plugin(module, name, info)
        return info

    def register_plugin(self, plugin: Any, name: str, info: PluginInfo | None = None) -> PluginInfo:
        """Register a plugin object (module or class instance); validation errors are recorded on its info."""
        info = info or self.infos.setdefault(name, PluginInfo(name=name))
        try:
            self.pm.register(plugin, name=name)
        except pluggy.PluginValidationError as exc:
            info.error = f"invalid hook implementation: {exc}"
            log.warning("plugin '%s' rejected: %s", name, exc)
            return info
        try:
            self.pm.check_pending()
        except pluggy.PluginValidationError as exc:
            self.pm.unregister(plugin)
            info.error = f"implements a hook that does not exist: {exc}"
            log.warning("plugin '%s' rejected: %s", name, exc)
            return info
        self._registry = None
        return info

    def _record_failure(self, registry: Registry, plugin: str, hook_name: str, exc: BaseException) -> None:
        if isinstance(exc, RegistrationError):
            message = str(exc)
        else:
            message = f"plugin '{plugin}' raised in {hook_name}: {type(exc).__name__}: {exc}"
        for name in getattr(exc, "plugins", (plugin,)):  # a clash is reported on both plugins
            self.infos.setdefault(name, PluginInfo(name=name)).hook_errors.append(message)
        registry.failures.append(message)
        log.warning("%s", message)

    def unregister_plugin(self, name: str) -> None:
        plugin = self.pm.get_plugin(name)
        if plugin is not None:
            self.pm.unregister(plugin)
        self.infos.pop(name, None)
        self._registry = None

    # -- registry ------------------------------------------------------------------------------------------
    @property
    def registry(self) -> Registry:
        with self._lock:
            if self._registry is None:
                self._registry = self._build_registry()
            return self._registry

    def _build_registry(self) -> Registry:
        registry = Registry()
        trace = os.environ.get("SKYRL_TRACE_PLUGINS") == "1"
        for info in self.infos.values():
            info.hooks = []
            info.capabilities = {kind: [] for kind in KINDS}
            info.hook_errors = []
        for kind, (hook_name, _label) in KINDS.items():
            caller = getattr(self.pm.hook, hook_name)
            # get_hookimpls() lists impls in reverse call order; built-ins are registered first
            for impl in caller.get_hookimpls():
                plugin_name = impl.plugin_name
                info = self.infos.setdefault(plugin_name, PluginInfo(name=plugin_name))
                if hook_name not in info.hooks:
                    info.hooks.append(hook_name)
                    info.hooks.sort()

                def register(obj: Any, name: str | None = None, *, _kind=kind, _plugin=plugin_name,
                             _builtin=info.builtin) -> None:
                    reg_name = name if name is not None else getattr(obj, "name", None)
                    try:
                        _validate(_kind, reg_name, obj, _plugin)
                        registry.add(_kind, reg_name, obj, _plugin, _builtin)
                    except RegistrationError as exc:  # one bad entry: recorded, the plugin's others stand
                        self._record_failure(registry, _plugin, hook_name, exc)
                        return
                    self.infos[_plugin].capabilities[_kind].append(reg_name)
                    if trace:
                        log.warning("[trace] %s.%s registered %s '%s'", _plugin, hook_name, _kind, reg_name)

                try:
                    impl.function(register=register)
                except Exception as exc:  # a broken plugin must not take every command down
                    self._record_failure(registry, plugin_name, hook_name, exc)
        for kind, names in registry.broken.items():  # a clash: neither plugin lists the name as registered
            for info in self.infos.values():
                info.capabilities[kind] = [n for n in info.capabilities[kind] if n not in names]
        return registry


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


_PLUGINS: SkyrlPlugins | None = None
_PLUGINS_LOCK = threading.Lock()


def get_plugins() -> SkyrlPlugins:
    """The process-wide plugin manager, loaded on first use."""
    global _PLUGINS
    with _PLUGINS_LOCK:
        if _PLUGINS is None:
            _PLUGINS = SkyrlPlugins()
        return _PLUGINS


def reset_plugins() -> None:
    """Forget the loaded plugins (tests, or after changing SKYRL_LOAD_PLUGINS)."""
    global _PLUGINS
    with _PLUGINS_LOCK:
        _PLUGINS = None


def get_registry() -> Registry:
    return get_plugins().registry
