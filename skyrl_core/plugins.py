"""The plugin manager: loads plugins and builds the registry from their hooks (kept in :mod:`skyrl_core.registry`;
what ``skyrl plugins`` reports per plugin is :class:`~skyrl_core.plugin_info.PluginInfo`).

Plugins are loaded from the ``skyrl`` entry-point group and from the in-tree default plugins. The environment
variable ``SKYRL_LOAD_PLUGINS`` is an allow-list of third-party plugins (comma-separated distribution or
entry-point names); an empty value loads none. ``SKYRL_TRACE_PLUGINS=1`` logs every hook call and what it
registered, through pluggy's own tracing (``pm.trace``, ``enable_tracing``, ``add_hookcall_monitoring``).

Hooks are called through pluggy, one plugin at a time: for each plugin implementing a register hook, in pluggy's
call order (``tryfirst`` impls first, the built-ins' ``trylast`` ones last, later-registered before earlier), a
subset hook caller runs that plugin's impl inside every *wrapper* hookimpl (``wrapper=True`` or the old-style
``hookwrapper=True``) of the hook. So a wrapper runs once per plugin it wraps and sees that plugin's
:class:`Registrar` (``register.plugin``, ``register.entries``: it may drop or replace entries after its ``yield``);
what the registrar holds when the call returns is validated and added to the registry, credited to that plugin.
A plugin whose impl raises is reported (``skyrl plugins``) and the others still register; a wrapper that raises is
reported on its own plugin and the call is made again without it. A plugin may not both wrap and implement one hook.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import logging
import os
import threading
from typing import Any, Callable

import attrs
import pluggy

from . import hookspecs
from .errors import RegistrationError
from .plugin_info import PluginInfo
from .registry import KINDS, PLAIN, TRYFIRST, TRYLAST, Registration, Registry, validate  # noqa: F401  (re-exported)

log = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "skyrl"

DEFAULT_PLUGINS = (
    "skyrl_core.default_plugins.generic_tools",
    "skyrl_core.default_plugins.runtimes",
    "skyrl_core.default_plugins.chat",
    "skyrl_core.default_plugins.engines",
    "skyrl_core.default_plugins.parsers",
    "skyrl_core.default_plugins.dispatchers",
    "skyrl_core.default_plugins.bench",
    "skyrl_core.default_plugins.gsm8k",
    "skyrl_core.default_plugins.trainer",
    "skyrl_core.default_plugins.async_training",
    "skyrl_core.default_plugins.eval",
    "skyrl_core.default_plugins.curation",
    "skyrl_core.default_plugins.viewer",
    "skyrl_core.default_plugins.catalog",
    "skyrl_core.default_plugins.example_configs",
    "skyrl_core.default_plugins.scaffold",
)


def _allowed_plugins() -> set[str] | None:
    value = os.environ.get("SKYRL_LOAD_PLUGINS")
    if value is None:
        return None
    return {part.strip() for part in value.split(",") if part.strip()}


@attrs.define
class Entry:
    """One ``register(obj, name)`` call, waiting in a :class:`Registrar` until the hook call returns."""

    obj: Any
    name: Any


class Registrar:
    """The ``register`` callback one plugin's hookimpl receives: ``register(obj, name=None)`` (``name`` defaults
    to ``obj.name``). It collects :class:`Entry` objects in ``entries`` for ``kind`` (a registry kind) on behalf
    of ``plugin`` (its name); the host validates them and adds them to the registry when the call returns, so a
    wrapper hookimpl may read, drop or replace them after its ``yield``."""

    def __init__(self, kind: str, plugin: str) -> None:
        self.kind = kind
        self.plugin = plugin
        self.entries: list[Entry] = []

    def __call__(self, obj: Any, name: str | None = None) -> None:
        self.entries.append(Entry(obj=obj, name=name if name is not None else getattr(obj, "name", None)))

    def __repr__(self) -> str:
        return f"<register {KINDS[self.kind][1]} for plugin '{self.plugin}'>"

    def summary(self) -> str:
        names = ", ".join(f"'{e.name}'" for e in self.entries) or "nothing"
        return f"plugin '{self.plugin}' registered {KINDS[self.kind][1]}: {names}"


def _is_wrapper(impl: Any) -> bool:
    return bool(impl.wrapper or impl.hookwrapper)


def _rank(impl: Any) -> int:
    return TRYFIRST if impl.tryfirst else TRYLAST if impl.trylast else PLAIN


def _culprit(exc: BaseException, impls: list[Any]) -> Any | None:
    """The hookimpl among ``impls`` in whose code ``exc`` was raised: the deepest of their frames in its traceback
    (a wrapper re-raising an inner impl's error leaves the inner one deeper). None when none is in it."""
    codes = {}
    for impl in impls:
        code = getattr(impl.function, "__code__", None)
        if code is not None:
            codes[code] = impl
    found, tb = None, exc.__traceback__
    while tb is not None:
        found = codes.get(tb.tb_frame.f_code, found)
        tb = tb.tb_next
    return found


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
        if os.environ.get("SKYRL_TRACE_PLUGINS") == "1":
            self.enable_trace(lambda line: log.warning("[trace] %s", line.rstrip()))
        if load_entry_points:
            self._load_entry_points()

    def enable_trace(self, write: Callable[[str], None]) -> Callable[[], None]:
        """Trace every hook call with pluggy's tracer, writing its lines to ``write``: the hook and its
        ``register`` (which names the plugin called), what that plugin registered, and the call's end. Returns
        a function that turns the tracing off."""
        self.pm.trace.root.setwriter(write)
        hooktrace = self.pm.trace.root.get("hook")

        def after(outcome: Any, hook_name: str, impls: Any, kwargs: dict) -> None:
            register = kwargs.get("register")
            if isinstance(register, Registrar):
                hooktrace(register.summary())

        undo_registered = self.pm.add_hookcall_monitoring(lambda *args: None, after)
        undo_tracing = self.pm.enable_tracing()

        def undo() -> None:
            undo_tracing()
            undo_registered()
            self.pm.trace.root.setwriter(None)

        return undo

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
            hash(plugin)
        except TypeError:  # pluggy keeps plugins in sets
            info.error = (f"the plugin object ({type(plugin).__name__}) is unhashable; register a module or an "
                          f"instance of a class that keeps object.__hash__")
            log.warning("plugin '%s' rejected: %s", name, info.error)
            return info
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
        for caller in self.pm.get_hookcallers(plugin) or ():
            mine = [impl for impl in caller.get_hookimpls() if impl.plugin is plugin]
            if len({_is_wrapper(impl) for impl in mine}) > 1:
                self.pm.unregister(plugin)
                info.error = (f"both wraps and implements {caller.name}: a wrapper runs around each plugin's impl "
                              f"in turn, so split the wrapper into a plugin of its own")
                log.warning("plugin '%s' rejected: %s", name, info.error)
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
        for info in self.infos.values():
            info.hooks = []
            info.capabilities = {kind: [] for kind in KINDS}
            info.hook_errors = []
        for kind, (hook_name, _label) in KINDS.items():
            impls = getattr(self.pm.hook, hook_name).get_hookimpls()  # listed in reverse call order
            for impl in impls:
                info = self.infos.setdefault(impl.plugin_name, PluginInfo(name=impl.plugin_name))
                if hook_name not in info.hooks:
                    info.hooks.append(hook_name)
                    info.hooks.sort()
            wrappers = [impl for impl in impls if _is_wrapper(impl)]
            for impl in reversed(impls):
                if not _is_wrapper(impl):
                    self._call_one(registry, kind, hook_name, impl, wrappers)
        for kind, names in registry.broken.items():  # a clash: neither plugin lists the name as registered
            for info in self.infos.values():
                info.capabilities[kind] = [n for n in info.capabilities[kind] if n not in names]
        return registry

    def _call_one(self, registry: Registry, kind: str, hook_name: str, impl: Any, wrappers: list[Any]) -> None:
        """Call ``impl`` (one plugin's) through pluggy inside ``wrappers``, then add what it registered. A wrapper
        that raises is reported on its plugin (once) and removed from ``wrappers``, for this call's second try and
        the hook's later calls."""
        plugin = impl.plugin_name
        while True:
            keep = {impl.plugin, *(w.plugin for w in wrappers)}
            caller = self.pm.subset_hook_caller(hook_name, [p for p in self.pm.get_plugins() if p not in keep])
            register = Registrar(kind, plugin)
            try:
                caller(register=register)
            except Exception as exc:  # a broken plugin must not take every command down
                culprit = _culprit(exc, [impl, *wrappers])
                if culprit is not None and culprit is not impl:
                    self._record_failure(registry, culprit.plugin_name, hook_name, exc)
                    wrappers.remove(culprit)
                    continue
                self._record_failure(registry, plugin, hook_name, exc)  # what it registered before raising stays
            break
        for entry in register.entries:
            try:
                validate(kind, entry.name, entry.obj, plugin)
                reg = registry.add(kind, entry.name, entry.obj, plugin, _rank(impl))
            except RegistrationError as exc:  # one bad entry: recorded, the plugin's others stand
                self._record_failure(registry, plugin, hook_name, exc)
                continue
            if reg is None:  # a higher-ranked plugin holds the name
                continue
            if reg.replaces is not None and reg.replaces in self.infos:
                replaced = self.infos[reg.replaces].capabilities[kind]
                self.infos[reg.replaces].capabilities[kind] = [n for n in replaced if n != reg.name]
            self.infos[plugin].capabilities[kind].append(reg.name)


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
