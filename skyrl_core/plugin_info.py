"""What ``skyrl plugins`` reports for one plugin: distribution, version, hooks, capabilities, problems."""

from __future__ import annotations

import attrs


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
