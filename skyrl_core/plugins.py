"""The plugin manager and the registry of everything plugins register.

Plugins are loaded from the ``skyrl`` entry-point group and from the in-tree default plugins. The environment
variable ``SKYRL_LOAD_PLUGINS`` is an allow-list of third-party plugins (comma-separated distribution or
entry-point names); an empty value loads none. ``SKYRL_TRACE_PLUGINS=1`` logs every hook call and what it
registered.

Name clashes follow one rule: a third-party plugin may replace an entry registered by a built-in plugin (the
replacement is recorded and logged); two third-party plugins, or two built-ins, registering the same name in
the same kind make that name *broken*: neither is registered, both plugins' listings carry the clash, and only
a command that asks for the name fails (RegistrationError naming both). A register hook that raises, or that
registers something invalid, is recorded on its plugin (``skyrl plugins`` shows it) and the registry is built
from everything else: what the hook registered before raising stays, and a command that asks for a name the
registry lacks is told which plugins failed (UnknownComponentError).
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
from .errors import RegistrationError, UnknownComponentError

log = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "skyrl"

DEFAULT_PLUGINS = (
    "skyrl_core.default_plugins.generic_tools",
    "skyrl_core.default_plugins.runtimes",
    "skyrl_core.default_plugins.engines",
    "skyrl_core.default_plugins.parsers",
    "skyrl_core.default_plugins.dispatchers",
    "skyrl_core.default_plugins.gsm8k",
    "skyrl_core.default_plugins.backends",
    "skyrl_core.default_plugins.rollouts",
    "skyrl_core.default_plugins.curation",
    "skyrl_core.default_plugins.scaffold",
)

# kind -> (hook name, label used in listings and error messages)
KINDS: dict[str, tuple[str, str]] = {
    "tools": ("register_tools", "tool"),
    "instruction_builders": ("register_instruction_builders", "instruction builder"),
    "verifiers": ("register_verifiers", "verifier"),
    "tasks": ("register_tasks", "task"),
    "dispatchers": ("register_dispatchers", "dispatcher"),
    "inference_engines": ("register_inference_engines", "inference engine"),
    "runtimes": ("register_runtimes", "runtime"),
    "backends": ("register_backends", "backend"),
    "parsers": ("register_parsers", "tool-call parser"),
    "commands": ("register_commands", "command"),
    "advantage_estimators": ("register_advantage_estimators", "advantage estimator"),
    "policy_losses": ("register_policy_losses", "policy loss"),
    "loggers": ("register_loggers", "logger"),
}


@attrs.define
class Registration:
    """One registered object: which kind, under which name, by which plugin."""

    kind: str
    name: str
    obj: Any
    plugin: str
    builtin: bool
    replaces: str | None = None


@attrs.define
class PluginInfo:
    """What ``skyrl plugins`` reports for one plugin."""

    name: str
    distribution: str | None = None
    version: str | None = None
    builtin: bool = False
    hooks: list[str] = attrs.Factory(list)
    capabilities: dict[str, list[str]] = attrs.Factory(dict)
    error: str | None = None
    hook_errors: list[str] = attrs.Factory(list)

    @property
    def problems(self) -> list[str]:
        """The import/validation error and every register-hook failure or clash, in order."""
        return ([self.error] if self.error else []) + self.hook_errors

    def to_json(self) -> dict:
        data = {
            "name": self.name,
            "distribution": self.distribution,
            "version": self.version,
            "builtin": self.builtin,
            "hooks": self.hooks,
            "capabilities": {k: v for k, v in self.capabilities.items() if v},
        }
        if self.problems:
            data["error"] = "; ".join(self.problems)
        return data


class Registry:
    """Everything registered through the hooks, by kind and name, with the plugin that registered it."""

    def __init__(self) -> None:
        self.entries: dict[str, dict[str, Registration]] = {kind: {} for kind in KINDS}
        self.broken: dict[str, dict[str, str]] = {kind: {} for kind in KINDS}  # kind -> name -> why
        self.failures: list[str] = []  # "plugin 'p' raised in register_x: ..." for every failed hook call

    def add(self, kind: str, name: str, obj: Any, plugin: str, builtin: bool) -> Registration:
        """Record one registration. Raises RegistrationError for a missing name, or for a clash (two
        third-party plugins, or two built-ins, with one name): the name is then broken (see ``get``)."""
        if not isinstance(name, str) or not name:
            raise RegistrationError(f"plugin '{plugin}' registered a {KINDS[kind][1]} without a name: {obj!r}")
        if name in self.broken[kind]:
            raise RegistrationError(f"{self.broken[kind][name]}; plugin '{plugin}' registers it too")
        existing = self.entries[kind].get(name)
        replaces = None
        if existing is not None:
            if existing.builtin and not builtin:
                replaces = existing.plugin
                log.info("%s '%s' from plugin '%s' replaces the built-in one from '%s'",
                         KINDS[kind][1], name, plugin, existing.plugin)
            else:
                message = (f"{KINDS[kind][1]} '{name}' is registered by two plugins: '{existing.plugin}' and "
                           f"'{plugin}'. Uninstall one, or restrict loading with SKYRL_LOAD_PLUGINS.")
                del self.entries[kind][name]
                self.broken[kind][name] = message
                clash = RegistrationError(message)
                clash.plugins = (existing.plugin, plugin)  # type: ignore[attr-defined]
                raise clash
        reg = Registration(kind=kind, name=name, obj=obj, plugin=plugin, builtin=builtin, replaces=replaces)
        self.entries[kind][name] = reg
        return reg

    def get(self, kind: str, name: str) -> Any:
        """Return the object registered as ``name``. Raises RegistrationError when two plugins clash on the
        name (naming both), UnknownComponentError listing the valid names (and any plugin whose register hook
        failed, which may be why) otherwise."""
        if name in self.broken[kind]:
            raise RegistrationError(self.broken[kind][name])
        try:
            return self.entries[kind][name].obj
        except KeyError:
            known = ", ".join(sorted(self.entries[kind])) or "none"
            failed = f" Plugins that failed to register: {'; '.join(self.failures)}." if self.failures else ""
            raise UnknownComponentError(
                f"no {KINDS[kind][1]} named '{name}' is registered; registered: {known}. "
                f"A plugin may provide it: see `skyrl plugins --all`.{failed}"
            ) from None

    def names(self, kind: str) -> list[str]:
        return sorted(self.entries[kind])

    def items(self, kind: str) -> list[Registration]:
        return [self.entries[kind][n] for n in sorted(self.entries[kind])]


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


def _validate(kind: str, name: Any, obj: Any, plugin: str) -> None:
    if kind == "tools":
        from .tools import Tool

        if not isinstance(obj, Tool):
            raise RegistrationError(f"plugin '{plugin}' registered {obj!r} as a tool; tools must be skyrl_core.Tool instances")
        if name != obj.name:
            raise RegistrationError(f"plugin '{plugin}' registered tool '{obj.name}' under another name '{name}'")
    if kind == "tasks":
        from .tasks import Task

        if not isinstance(obj, Task):
            raise RegistrationError(f"plugin '{plugin}' registered {obj!r} as a task; tasks must be skyrl_core.Task instances")


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
