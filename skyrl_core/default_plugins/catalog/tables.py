"""How the catalog commands print: a rich table on a terminal, tab-separated lines in a pipe."""

from __future__ import annotations

import sys
from typing import Callable

import rich.markup
from rich.console import Console
from rich.table import Table

console = Console()


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
