"""The registry of everything plugins register: by kind and name, with the plugin that registered it.

Name clashes follow hook order. Each registration carries the *rank* of the hookimpl that made it (pluggy's
``tryfirst`` 2, plain 1, ``trylast`` 0); the built-in plugins' hookimpls are ``trylast``, so they are defaults. A
registration of a higher rank replaces one of a lower rank under the same name in the same kind (the replacement
is recorded as ``replaces`` and logged), whichever came first; two registrations of the same rank (two third-party
plugins, or two built-ins) make that name *broken*: neither is registered, both plugins' listings carry the clash,
and only a command that asks for the name fails (RegistrationError naming both). A register hook that raises, or
that registers something breaking its kind's contract (:mod:`skyrl_core.contracts`), is recorded on its plugin
(``skyrl plugins`` shows it) and the registry is built from everything else: what the hook registered before
raising stays, and a command that asks for a name the registry lacks is told which plugins failed
(UnknownComponentError).
"""

from __future__ import annotations

import logging
from typing import Any

import attrs

from .contracts import CONTRACTS, check, member
from .errors import RegistrationError, UnknownComponentError

log = logging.getLogger("skyrl_core.plugins")


# kind -> (hook name, label used in listings and error messages); the table itself is contracts.CONTRACTS
KINDS: dict[str, tuple[str, str]] = {kind: (c.hook, c.label) for kind, c in CONTRACTS.items()}

# the rank of a hookimpl, from pluggy's order marks: a higher rank replaces a lower one's entry of the same name
TRYLAST, PLAIN, TRYFIRST = 0, 1, 2


@attrs.define
class Registration:
    """One registered object: which kind, under which name, by which plugin, at which rank (``TRYLAST`` 0,
    ``PLAIN`` 1, ``TRYFIRST`` 2: the order mark of the hookimpl that registered it); ``replaces`` names the plugin
    whose lower-ranked entry of the same name it replaced."""

    kind: str
    name: str
    obj: Any
    plugin: str
    rank: int = PLAIN
    replaces: str | None = None


class Registry:
    """Everything registered through the hooks, by kind and name, with the plugin that registered it."""

    def __init__(self) -> None:
        self.entries: dict[str, dict[str, Registration]] = {kind: {} for kind in KINDS}
        self.broken: dict[str, dict[str, str]] = {kind: {} for kind in KINDS}  # kind -> name -> why
        self.failures: list[str] = []  # "plugin 'p' raised in register_x: ..." for every failed hook call

    def add(self, kind: str, name: str, obj: Any, plugin: str, rank: int = PLAIN) -> Registration | None:
        """Record one registration made by a hookimpl of ``rank``. Returns it, or None when an entry of a higher
        rank already holds the name (this one yields to it). Raises RegistrationError for a missing name, or for
        a clash (two entries of one rank with one name): the name is then broken (see ``get``)."""
        if not isinstance(name, str) or not name:
            raise RegistrationError(f"plugin '{plugin}' registered a {KINDS[kind][1]} without a name: {obj!r}")
        if name in self.broken[kind]:
            raise RegistrationError(f"{self.broken[kind][name]}; plugin '{plugin}' registers it too")
        existing = self.entries[kind].get(name)
        replaces = None
        if existing is not None:
            if existing.rank > rank:  # called earlier in hook order: the lower-ranked entry yields
                existing.replaces = existing.replaces or plugin
                log.info("%s '%s' from plugin '%s' replaces the one from '%s'", KINDS[kind][1], name,
                         existing.plugin, plugin)
                return None
            if existing.rank < rank:
                replaces = existing.plugin
                log.info("%s '%s' from plugin '%s' replaces the one from '%s'", KINDS[kind][1], name, plugin,
                         existing.plugin)
            else:
                message = (f"{KINDS[kind][1]} '{name}' is registered by two plugins: '{existing.plugin}' and "
                           f"'{plugin}'. Uninstall one, restrict loading with SKYRL_LOAD_PLUGINS, or mark the "
                           f"hookimpl meant to win tryfirst=True.")
                del self.entries[kind][name]
                self.broken[kind][name] = message
                clash = RegistrationError(message)
                clash.plugins = (existing.plugin, plugin)  # type: ignore[attr-defined]
                raise clash
        reg = Registration(kind=kind, name=name, obj=obj, plugin=plugin, rank=rank, replaces=replaces)
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


def validate(kind: str, name: Any, obj: Any, plugin: str) -> None:
    """Raise RegistrationError when ``obj`` may not be registered as the ``kind`` ``name`` by ``plugin``: it breaks
    the kind's contract (:func:`skyrl_core.contracts.check`), a tool is registered under a name not its own, or a
    scripted policy (a benchmark fixture) is registered as an inference engine."""
    if kind == "inference_engines" and member(obj, kind, "scripted_policy"):
        raise RegistrationError(f"plugin '{plugin}' registered '{name}', a scripted policy, as an inference engine; "
                                f"a scripted policy is a benchmark fixture no config may train with: run it with a "
                                f"scaffold-check command (skyrl_core.default_plugins.eval.scripted)")
    check(kind, name, obj, plugin)
    if kind == "tools" and name != obj.name:
        raise RegistrationError(f"plugin '{plugin}' registered tool '{obj.name}' under another name '{name}'")
