"""The ``skyrl`` command line: the root group (``--version``, ``--debug``), every command registered through the
``register_commands`` hook (the built-ins' ``eval``, ``train``, ``serve``, ``bench``, ``plugins``, ``tools``,
``tasks``, and any plugin's), and the error handling that prints a :class:`~skyrl_core.errors.SkyrlError` without
a traceback."""

from __future__ import annotations

import logging
import sys
from typing import Any, Optional

import click
import typer
from rich.console import Console

from . import __version__
from .errors import SkyrlError
from .plugins import get_plugins

console = Console()
err_console = Console(stderr=True)

app = typer.Typer(
    name="skyrl",
    help="Train and evaluate multi-turn, tool-using LLM agents with reinforcement learning.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    rich_markup_mode=None,
)


def _version_callback(value: bool) -> None:
    if value:
        console.print(f"skyrl {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Optional[bool] = typer.Option(None, "--version", callback=_version_callback, is_eager=True,
                                           help="Print the version and exit."),
    debug: bool = typer.Option(False, "--debug", help="Show full tracebacks and debug logs."),
) -> None:
    logging.basicConfig(level=logging.DEBUG if debug else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    from .notes import show_notes

    show_notes()  # a one-time model conversion, eval rows left out, a checkpoint: plain lines, not WARNINGs


# -- entry point -------------------------------------------------------------------------------------------
def build_cli() -> click.Group:
    """The click group: the root options plus every command registered through ``register_commands`` (each a click
    command or a typer app: the ``commands`` contract refused anything else at registration, naming the plugin)."""
    group = typer.main.get_command(app)
    for reg in get_plugins().registry.items("commands"):
        obj = reg.obj
        group.add_command(typer.main.get_command(obj) if isinstance(obj, typer.Typer) else obj, reg.name)
    return group


def main(argv: list[str] | None = None) -> Any:
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    try:
        return build_cli().main(args=argv, prog_name="skyrl", standalone_mode=True)
    except SkyrlError as exc:
        if debug:
            raise
        err_console.print(f"[bold red]error:[/bold red] {exc}", highlight=False)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        err_console.print("interrupted")
        sys.exit(130)


if __name__ == "__main__":  # pragma: no cover
    main()
