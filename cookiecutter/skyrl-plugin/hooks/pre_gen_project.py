"""Refuse plugin names that would make an unusable or clashing distribution (runs before any file is written)."""

import re
import sys

NAME = "{{ cookiecutter.plugin_name }}"
DIST = "{{ cookiecutter.dist_name }}"
# distributions already on the package index or in skyrl itself: a plugin must not shadow them
TAKEN = {"skyrl-core", "skyrl-train", "skyrl-gym", "skyrl-tx", "skyrl-agent", "skyrl-swe", "skyrl-verl",
         "skyrl-tinker", "skyrl-memagent", "skyrl-osworld", "skyrl-deep-research", "skyrl-skyrl-train"}
PATTERN = r"[a-z][a-z0-9]*(-[a-z0-9]+)*"

if not re.fullmatch(PATTERN, NAME):
    sys.stderr.write(f"plugin_name {NAME!r} is not valid: use lower-case letters, digits and single hyphens, "
                     f"starting with a letter (e.g. 'letter-count')\n")
    sys.exit(1)
# the other names are derived from the plugin name (`skyrl new plugin` passes them so); edited ones are refused
UNDER = NAME.replace("-", "_")
derived = {"dist_name": f"skyrl-{NAME}", "module_name": f"skyrl_{UNDER}", "entry_point": UNDER}
given = {"dist_name": DIST, "module_name": "{{ cookiecutter.module_name }}", "entry_point": "{{ cookiecutter.entry_point }}"}
for key, value in given.items():
    if value != derived[key]:
        sys.stderr.write(f"{key} {value!r} is derived from plugin_name {NAME!r} and must be {derived[key]!r}\n")
        sys.exit(1)
if DIST in TAKEN:
    sys.stderr.write(f"plugin_name {NAME!r} gives the distribution {DIST!r}, which is taken; pick another name\n")
    sys.exit(1)
