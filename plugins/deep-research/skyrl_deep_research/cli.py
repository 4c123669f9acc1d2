"""``skyrl deep-research ...``: serve the local web, search it from the terminal."""

from __future__ import annotations

import typer

app = typer.Typer(help="Deep-research tools: the local web (a corpus on 127.0.0.1 in Serper's and Jina Reader's "
                       "wire formats) and its search.", no_args_is_help=True, rich_markup_mode=None)

CORPUS_HELP = "hotpotqa (the shipped rows' paragraphs), hotpotqa:<file> or a JSONL of {title, text} rows."


@app.command("serve-corpus")
def serve_corpus(
    corpus: str = typer.Option("hotpotqa", "--corpus", help=CORPUS_HELP),
    port: int = typer.Option(8765, "--port", help="Port on 127.0.0.1."),
    api_key: str = typer.Option(None, "--api-key", help="Require this X-API-KEY on /search (default: any)."),
) -> None:
    """Serve a corpus on 127.0.0.1: /wiki/<Title> pages, POST /search (Serper shape), /reader/<url> (Jina shape)."""
    from .corpus import load_corpus
    from .server import LocalWeb

    web = LocalWeb(load_corpus(corpus), port=port, api_key=api_key)
    typer.echo(f"{len(web.corpus)} pages at {web.base_url}  (search: POST {web.base_url}/search, "
               f"Serper JSON; reader: {web.base_url}/reader/<url>, Jina JSON); Ctrl-C stops")
    web.serve_forever()


@app.command("search")
def search(
    query: str = typer.Argument(..., help="The query."),
    k: int = typer.Option(5, "--k", help="Results."),
    corpus: str = typer.Option("hotpotqa", "--corpus", help=CORPUS_HELP),
) -> None:
    """BM25 search of the local corpus, as a table."""
    from rich.console import Console
    from rich.table import Table

    from .corpus import load_corpus

    table = Table(title=f"local search: {query}")
    for col in ("#", "score", "title", "text"):
        table.add_column(col)
    for i, hit in enumerate(load_corpus(corpus).search(query, k), 1):
        table.add_row(str(i), f"{hit.score:.2f}", hit.document.title, hit.document.text[:80])
    Console().print(table)
