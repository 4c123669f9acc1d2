"""Built-in catalog: the commands that show and try what the plugins registered, ``skyrl plugins``, ``skyrl
tools`` (and ``skyrl tools run``) and ``skyrl tasks`` (:mod:`.commands`, printed through :mod:`.tables`)."""

from __future__ import annotations

from skyrl_core.hookspecs import hookimpl


@hookimpl(trylast=True)
def register_commands(register):
    import typer

    from .commands import plugins_command, tasks_command, tools_app

    plugins_app = typer.Typer(rich_markup_mode=None, add_completion=False)
    plugins_app.command("plugins")(plugins_command)
    register(plugins_app, name="plugins")
    register(tools_app, name="tools")
    tasks_app = typer.Typer(rich_markup_mode=None, add_completion=False)
    tasks_app.command("tasks")(tasks_command)
    register(tasks_app, name="tasks")
