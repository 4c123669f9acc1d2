"""skyrl-osworld: computer-use agents — desktop actions as one ``osworld_action`` tool, an offline browser runtime
(system Chromium + Playwright) with MiniWoB++ tasks, an Xvfb desktop runtime and the OSWorld adapter.
Hook implementations only."""

from skyrl_core import hookimpl


@hookimpl
def register_tools(register):
    from .tools import osworld_action_tool

    register(osworld_action_tool)


@hookimpl
def register_runtimes(register):
    from .browser import BrowserRuntime
    from .osworld import OSWorldRuntime
    from .xvfb import XvfbRuntime

    register(BrowserRuntime)
    register(XvfbRuntime)
    register(OSWorldRuntime)


@hookimpl
def register_instruction_builders(register):
    from .tasks import build_miniwob_instructions, build_osworld_instructions

    register(build_miniwob_instructions, name="miniwob")
    register(build_osworld_instructions, name="osworld")


@hookimpl
def register_verifiers(register):
    from .verifiers import miniwob_reward, osworld_evaluate

    register(miniwob_reward, name="miniwob_reward")
    register(osworld_evaluate, name="osworld_evaluate")


@hookimpl
def register_tasks(register):
    from .tasks import miniwob_task, osworld_task

    register(miniwob_task)
    register(osworld_task)


@hookimpl
def register_commands(register):
    from .cli import osworld_app

    register(osworld_app, name="osworld")
