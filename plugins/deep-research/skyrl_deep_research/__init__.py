"""skyrl-deep-research: search, open_page and two-stage page summaries over a local web or Serper/Jina, with a
sqlite cache, a leakage guard, HotpotQA tasks and EM/F1/LLM-judge verifiers. Hook implementations only."""

from skyrl_core import hookimpl


@hookimpl
def register_tools(register):
    from .tools import open_page_tool, search_tool

    register(search_tool)
    register(open_page_tool)


@hookimpl
def register_runtimes(register):
    from .runtime import WebRuntime

    register(WebRuntime)


@hookimpl
def register_instruction_builders(register):
    from .tasks import build_instructions, build_instructions_fewshot

    register(build_instructions, name="deep_research")
    register(build_instructions_fewshot, name="deep_research_fewshot")


@hookimpl
def register_verifiers(register):
    from .verifiers import llm_judge, qa_exact_match, qa_f1

    register(qa_exact_match, name="qa_exact_match")
    register(qa_f1, name="qa_f1")
    register(llm_judge, name="llm_judge")


@hookimpl
def register_tasks(register):
    from .tasks import hotpotqa_task, qa_jsonl_task

    register(hotpotqa_task)
    register(qa_jsonl_task)


@hookimpl
def register_parsers(register):
    from .parsers import research_codeblock_parser

    register(research_codeblock_parser(), name="research_codeblock")


@hookimpl
def register_commands(register):
    from .cli import app

    register(app, name="deep-research")
