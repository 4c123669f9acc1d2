"""The ``skyrl`` command line. The core's own command is ``skyrl plugins``; ``eval``, ``train``, ``serve``,
``bench``, ``tools``, ``tasks`` and any plugin's commands arrive through the ``register_commands`` hook."""

from __future__ import annotations

import json
import logging
import sys
from typing import Any, Callable, Optional

import click
import rich.markup
import typer
from rich.console import Console
from rich.table import Table

from . import __version__, hookspecs
from .errors import SkyrlError
from .plugins import KINDS, get_plugins

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


# -- skyrl plugins -----------------------------------------------------------------------------------------
@app.command("plugins")
def plugins_command(
    all_: bool = typer.Option(False, "--all", help="Include the built-in default plugins."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON for machines."),
    hook: Optional[list[str]] = typer.Option(None, "--hook", metavar="HOOK[,HOOK...]",
                                             help="Only plugins implementing one of these hooks (repeat the "
                                                  "option or give a comma list), e.g. register_tools."),
) -> None:
    """List installed plugins: distribution, version, hooks and what each registered."""
    plugins = get_plugins()
    plugins.registry  # build the registry so capabilities are filled in
    installed = [i for i in plugins.infos.values() if all_ or not i.builtin]
    infos = installed
    if hook:
        wanted = {h.strip() for part in hook for h in part.split(",") if h.strip()}
        known = {name for name, obj in vars(hookspecs).items() if hasattr(obj, "skyrl_spec")}
        unknown = sorted(wanted - known)
        if unknown:
            raise SkyrlError(f"--hook {', '.join(unknown)}: no such hook; valid: {', '.join(sorted(known))}")
        infos = [i for i in installed if wanted & set(i.hooks)]
    from .examples import find_examples

    shipped: dict[str, list[str]] = {}  # entry-point name -> its example configs (`skyrl eval NAME`)
    for ex in find_examples():
        shipped.setdefault(ex.entry_point, []).append(ex.ref)
    if as_json:
        console.print_json(json.dumps([{**i.to_json(), **({"examples": shipped[i.name]} if i.name in shipped else {})}
                                       for i in infos]))
        return
    if not infos:
        if installed:  # a filter excluded every plugin: say so, not that none is installed
            console.print(f"None of the {len(installed)} {'' if all_ else 'third-party '}plugins installed "
                          f"implements {' or '.join(sorted(wanted))} (`skyrl plugins` lists them all).",
                          highlight=False)
        else:
            console.print("No third-party plugins installed. `skyrl plugins --all` shows the built-ins; "
                          "install one with `pip install -e plugins/<name>`.")
        return
    rows = []
    for info in infos:
        caps = "\n".join(f"{plural(KINDS[k][1])}: {', '.join(v)}" for k, v in info.capabilities.items() if v)
        if info.name in shipped:
            caps += f"\nexample configs: {', '.join(shipped[info.name])}"
        status = f"error: {'; '.join(info.problems)}" if info.problems else "ok"
        rows.append([info.name, info.distribution or "-", info.version or "-", caps or "-", status])
    show_table("skyrl plugins" + (" (with built-ins)" if all_ else ""),
               ["plugin", "distribution", "version", "registers", "status"], rows, whole=("plugin",),
               styles={"status": lambda v: "red" if v.startswith("error") else ""})


def plural(noun: str) -> str:
    """``"tool"`` -> ``"tools"``, ``"policy loss"`` -> ``"policy losses"``."""
    return noun + ("es" if noun.endswith(("s", "x", "sh", "ch")) else "s")


def show_table(title: str, columns: list[str], rows: list[list[str]], whole: tuple[str, ...] = (),
               styles: dict[str, Callable[[str], str]] | None = None) -> None:
    """Print rows for people or for pipes. On a terminal: a rich table whose ``whole`` columns (names) never
    wrap — ``skyrl tools | grep str_replace_editor`` must find the name in one piece — and whose other
    columns fold. Not on a terminal (a pipe, a file): one line per row, cells separated by tabs, newlines in a
    cell written as ``; ``, after a header line starting with ``#``; so ``grep``, ``cut -f`` and ``awk -F'\t'``
    work."""
    if not console.is_terminal:
        out = sys.stdout
        out.write("# " + "\t".join(columns) + "\n")
        for row in rows:
            out.write("\t".join(str(cell).replace("\n", "; ").replace("\t", " ") for cell in row) + "\n")
        out.flush()
        return
    table = Table(title=title, show_lines=True)
    for col in columns:
        if col in whole:
            table.add_column(col, no_wrap=True)
        else:
            table.add_column(col, overflow="fold")
    for row in rows:
        cells = []
        for col, cell in zip(columns, row):
            text = rich.markup.escape(str(cell))
            style = (styles or {}).get(col, lambda v: "")(str(cell))
            cells.append(f"[{style}]{text}[/{style}]" if style else text)
        table.add_row(*cells)
    console.print(table)


# -- entry point -------------------------------------------------------------------------------------------
def build_cli() -> click.Group:
    """The click group: core commands plus every command registered through ``register_commands``."""
    group = typer.main.get_command(app)
    for reg in get_plugins().registry.items("commands"):
        obj = reg.obj
        if isinstance(obj, typer.Typer):
            obj = typer.main.get_command(obj)
        # typer vendors its own click: its commands are instances of that Command class, not click.Command
        command_types = (click.Command, *[c for c in type(group).__mro__ if c.__name__ == "Command"])
        if not isinstance(obj, command_types):  # reported, and only that command is missing
            logging.getLogger(__name__).warning("plugin '%s' registered command '%s' that is neither a click "
                                                "command nor a typer app: left out", reg.plugin, reg.name)
            continue
        group.add_command(obj, reg.name)
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
