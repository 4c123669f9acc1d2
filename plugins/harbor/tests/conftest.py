"""Load only this plugin from the installed third-party plugins, so other installed plugins never change what
these tests see."""

import os

os.environ["SKYRL_LOAD_PLUGINS"] = "skyrl-harbor"

collect_ignore = ["fixtures"]  # real Harbor task directories: their own tests/ run inside a task's environment
