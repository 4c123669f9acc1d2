"""``skyrl tinker``: build and run the local Tinker-compatible server (see :mod:`skyrl_tinker.local_server`)."""

from __future__ import annotations

from pathlib import Path

import typer

tinker_app = typer.Typer(rich_markup_mode=None, add_completion=False, no_args_is_help=True,
                         help="Tinker: the local Tinker-compatible server for the tinker engine and backend.")


@tinker_app.command("setup-server")
def setup_server(
    venv: Path = typer.Option(None, "--venv", help="Where to build the server venv (default: "
                              "$SKYRL_TINKER_SERVER_VENV or <skyrl cache>/tinker-server-venv)."),
) -> None:
    """Build the local server's own venv (skyrl 0.4.0's Tinker API, JAX on the CPU, tinker SDK 0.25.0)."""
    from .local_server import setup_venv

    print(f"server venv ready: {setup_venv(venv)}")


@tinker_app.command("serve-local")
def serve_local(
    model: str = typer.Option("smollm2-135m-instruct", "--model", help="Bundled model name or local HF dir."),
    port: int = typer.Option(8000, "--port", help="TCP port on 127.0.0.1 (0 picks a free one)."),
    workdir: Path = typer.Option(Path("tinker-server"), "--workdir",
                                 help="Database, checkpoints and server.log go here."),
    venv: Path = typer.Option(None, "--venv", help="The server venv (default: $SKYRL_TINKER_SERVER_VENV or "
                              "<skyrl cache>/tinker-server-venv)."),
    setup: bool = typer.Option(False, "--setup", help="Build the server venv first if it is missing."),
    base_model: str = typer.Option(None, "--base-model", help="Name clients use (default: the model's Hugging "
                                   "Face name for a bundled model, else the directory)."),
    max_lora_adapters: int = typer.Option(4, "--max-lora-adapters", help="Adapters the server holds (>= 2)."),
    max_lora_rank: int = typer.Option(32, "--max-lora-rank", help="Largest LoRA rank a client may ask for."),
    micro_batch: int = typer.Option(2, "--train-micro-batch-size", help="Sequences per forward/backward pass."),
    loss_chunk: int = typer.Option(256, "--loss-chunk-size", help="Tokens whose logits are computed at once."),
    max_sequences: int = typer.Option(8, "--sample-max-num-sequences", help="Sequences sampled at once."),
    max_rss_mb: int = typer.Option(0, "--max-rss-mb", help="Stop the server past this resident memory (MiB)."),
) -> None:
    """Run the open Tinker server on 127.0.0.1 in the foreground (Ctrl-C stops it); prints the environment
    a client needs (TINKER_BASE_URL, TINKER_API_KEY)."""
    from .local_server import LocalTinkerServer, default_venv, main_serve, setup_venv

    venv = venv or default_venv()
    if setup and not (venv / "bin" / "python").is_file():
        setup_venv(venv)
    server = LocalTinkerServer(model, workdir.resolve(), venv=venv, port=port, base_model=base_model,
                               max_lora_adapters=max_lora_adapters, max_lora_rank=max_lora_rank,
                               train_micro_batch_size=micro_batch, sample_max_num_sequences=max_sequences,
                               loss_chunk_size=loss_chunk,
                               max_rss_mb=max_rss_mb)
    main_serve(server)
