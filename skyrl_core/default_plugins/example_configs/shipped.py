"""Example run configs that ship inside plugin distributions, taken by name: ``PLUGIN:EXAMPLE``.

A plugin keeps its ready configs as package data in ``<its package>/examples/*.yaml``; once the plugin is
installed (from a wheel or a checkout), ``skyrl eval deep-research:hotpotqa`` or ``skyrl train memagent:smollm2``
runs one by name. ``PLUGIN`` is the plugin's distribution name without its ``skyrl-`` prefix
(``skyrl-deep-research`` -> ``deep-research``) or its entry-point name (``deep_research``); ``-`` and ``_`` are
the same. ``EXAMPLE`` is the file's stem. ``skyrl plugins`` and ``skyrl tasks`` list them. Found from the
``skyrl`` entry points without importing any plugin (the package's directory comes from its import spec).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import re
from pathlib import Path

import attrs
import yaml

from skyrl_core.errors import ConfigError

ENTRY_POINT_GROUP = "skyrl"
EXAMPLES_DIR = "examples"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*:[A-Za-z0-9][A-Za-z0-9_.-]*")


@attrs.frozen
class Example:
    """One shipped config: ``ref`` (``plugin:name``), the entry-point name and distribution that ship it, its
    ``path`` on disk, the first line of its leading comment (``description``) and the task names it runs."""

    ref: str
    entry_point: str
    distribution: str
    path: Path
    description: str
    tasks: tuple[str, ...]


def _key(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def plugin_prefix(distribution: str) -> str:
    """``skyrl-deep-research`` -> ``deep-research``: the ``PLUGIN`` part of an example's name."""
    name = _key(distribution)
    return name[len("skyrl-"):] if name.startswith("skyrl-") and len(name) > len("skyrl-") else name


def _describe(path: Path) -> tuple[str, tuple[str, ...]]:
    text = path.read_text(encoding="utf-8")
    first = next((line.lstrip("# ").strip() for line in text.splitlines() if line.startswith("#")), "")
    try:
        data = yaml.safe_load(text) or {}
    except yaml.YAMLError:
        return first, ()
    tasks = data.get("tasks") if isinstance(data, dict) else None
    names = tuple(t["name"] for t in tasks or [] if isinstance(t, dict) and isinstance(t.get("name"), str))
    return first, names


def find_examples() -> list[Example]:
    """Every example config shipped by an installed plugin, sorted by ``ref``."""
    found: dict[str, Example] = {}
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        dist = getattr(ep, "dist", None)
        dist_name = dist.metadata["Name"] if dist is not None else ep.name
        top = ep.value.split(":", 1)[0].split(".", 1)[0]
        try:
            spec = importlib.util.find_spec(top)
        except (ImportError, ValueError):
            continue
        for location in (spec.submodule_search_locations or []) if spec is not None else []:
            for path in sorted(Path(location, EXAMPLES_DIR).glob("*.yaml")):
                ref = f"{plugin_prefix(dist_name)}:{path.stem}"
                if ref not in found:
                    description, tasks = _describe(path)
                    found[ref] = Example(ref=ref, entry_point=ep.name, distribution=dist_name, path=path,
                                         description=description, tasks=tasks)
    return [found[k] for k in sorted(found)]


def is_example_name(value: str) -> bool:
    """True when ``value`` has the ``plugin:example`` shape (and so is not read as a file path)."""
    return bool(_NAME.fullmatch(value))


def resolve_example(ref: str) -> Path:
    """The path of the example config ``ref`` (``plugin:example``). Raises ConfigError naming the installed
    examples (or saying that none is) when no plugin ships it."""
    plugin, _, name = ref.partition(":")
    examples = find_examples()
    for ex in examples:
        if ex.path.stem == name and _key(plugin) in (plugin_prefix(ex.distribution), _key(ex.entry_point),
                                                     _key(ex.distribution)):
            return ex.path
    if not examples:
        raise ConfigError(f"config '{ref}' is neither a file nor an example shipped by an installed plugin "
                          f"(no installed plugin ships examples; e.g. pip install -e plugins/deep-research)")
    same_plugin = [ex.ref for ex in examples if ex.ref.split(":")[0] == plugin_prefix(plugin)]
    listed = ", ".join(same_plugin or [ex.ref for ex in examples])
    raise ConfigError(f"config '{ref}' is neither a file nor an example shipped by an installed plugin; "
                      f"{'that plugin ships' if same_plugin else 'installed examples'}: {listed} "
                      f"(`skyrl plugins` lists them)")
