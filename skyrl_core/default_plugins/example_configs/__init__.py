"""Built-in example configs: the config source (``register_config_sources``) that takes ``PLUGIN:EXAMPLE`` for
the example config an installed plugin ships (``skyrl eval deep-research:hotpotqa``), found by :mod:`.shipped`,
which ``skyrl plugins`` and ``skyrl tasks`` also list."""

from __future__ import annotations

from pathlib import Path

from skyrl_core.hookspecs import hookimpl


def shipped_example(name: str) -> Path | None:
    """The path of the shipped example ``name`` (``plugin:example``); None when ``name`` has another shape (so it
    is some other source's). Raises ConfigError naming the installed examples when no plugin ships it."""
    from .shipped import is_example_name, resolve_example

    return resolve_example(name) if is_example_name(name) else None


@hookimpl(trylast=True)
def register_config_sources(register):
    register(shipped_example, name="shipped_examples")
