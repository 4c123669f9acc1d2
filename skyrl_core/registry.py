"""The registry of everything plugins register: by kind and name, with the plugin that registered it.

Name clashes follow one rule: a third-party plugin may replace an entry registered by a built-in plugin (the
replacement is recorded and logged); two third-party plugins, or two built-ins, registering the same name in
the same kind make that name *broken*: neither is registered, both plugins' listings carry the clash, and only
a command that asks for the name fails (RegistrationError naming both). A register hook that raises, or that
registers something invalid, is recorded on its plugin (``skyrl plugins`` shows it) and the registry is built
from everything else: what the hook registered before raising stays, and a command that asks for a name the
registry lacks is told which plugins failed (UnknownComponentError).
"""

from __future__ import annotations

import logging
from typing import Any

import attrs

from .errors import RegistrationError, UnknownComponentError

log = logging.getLogger("skyrl_core.plugins")


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
    "eval_writers": ("register_eval_writers", "eval writer"),
    "placements": ("register_placements", "placement"),
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


def _validate(kind: str, name: Any, obj: Any, plugin: str) -> None:
    if kind == "inference_engines" and getattr(obj, "scripted_policy", False):
        raise RegistrationError(f"plugin '{plugin}' registered '{name}', a scripted policy, as an inference engine; "
                                f"a scripted policy is a benchmark fixture no config may train with: run it with a "
                                f"scaffold-check command (skyrl_core.scripted)")
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
