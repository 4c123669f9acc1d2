"""skyrl-memagent: MemAgent (Yu et al. 2025, arXiv 2507.02259) — read documents far longer than the context chunk
by chunk, with a ``next(memory)`` tool that rewrites the agent's own context; RULER-HotpotQA tasks built from
HotpotQA; exact-match, F1 and LLM-judge verifiers. Hook implementations only."""

from skyrl_core import hookimpl


@hookimpl
def register_tools(register):
    from .tools import next_tool

    register(next_tool)


@hookimpl
def register_instruction_builders(register):
    from .tasks import build_memagent_instructions

    register(build_memagent_instructions, name="memagent")


@hookimpl
def register_verifiers(register):
    from .verifiers import hotpotqa_em, hotpotqa_f1, hotpotqa_f1_progress, hotpotqa_judge

    register(hotpotqa_em, name="hotpotqa_em")
    register(hotpotqa_f1, name="hotpotqa_f1")
    register(hotpotqa_f1_progress, name="hotpotqa_f1_progress")
    register(hotpotqa_judge, name="hotpotqa_judge")


@hookimpl
def register_tasks(register):
    from .tasks import memagent_hotpotqa_task

    register(memagent_hotpotqa_task)


@hookimpl
def register_commands(register):
    import typer

    from skyrl_core.default_plugins.eval.scaffold_check import scaffold_check_command

    from .oracle import oracle_engine

    app = typer.Typer(help="MemAgent: the scripted oracle's scaffold check.", no_args_is_help=True,
                      rich_markup_mode=None)

    @app.callback()
    def memagent() -> None:  # a group, so `skyrl memagent scaffold-check` keeps its subcommand name
        """MemAgent commands."""

    scaffold_check_command(app, oracle_engine, "memagent_oracle")
    register(app, name="memagent")
