"""The ``web_search`` and ``open_page`` tools (``web_search``, not ``search``: the swe plugin's code search
holds that name, and both plugins install side by side). Stateless: everything they touch is the trajectory's ``web`` runtime
(providers, cache, leakage guard, counters). A provider that fails, a blocked URL or a wrong runtime is a tool
error naming the cause, never an exception out of the agent loop."""

from __future__ import annotations

import asyncio

from skyrl_core import Tool, ToolContext, ToolResult

from .providers import BlockedError, ProviderError
from .runtime import WebRuntime
from .summary import SideEngineError

MAX_QUERIES = 5
MAX_TOP_K = 10


def _web(ctx: ToolContext) -> WebRuntime | ToolResult:
    if not isinstance(ctx.runtime, WebRuntime):
        kind = type(ctx.runtime).__name__ if ctx.runtime is not None else "none"
        return ToolResult(output=f"this tool needs the 'web' runtime (tasks.N.runtime: web), got {kind}", error=True)
    return ctx.runtime


def format_results(query: str, results: list[dict]) -> str:
    if not results:
        return f'## "{query}"\nno results'
    lines = [f'## "{query}"']
    for i, r in enumerate(results, 1):
        lines.append(f"{i}. {r['title']} - {r['url']}\n   {r['snippet']}")
    return "\n".join(lines)


async def run_search(args: dict, ctx: ToolContext) -> ToolResult:
    web = _web(ctx)
    if isinstance(web, ToolResult):
        return web
    queries = args["queries"]
    # a string holds one query per line (how a fenced ```search block with several lines arrives)
    queries = queries.splitlines() if isinstance(queries, str) else list(queries)
    queries = [q.strip() for q in queries if q.strip()]
    if not queries:
        return ToolResult(output="web_search needs at least one non-empty query", error=True)
    if len(queries) > MAX_QUERIES:
        return ToolResult(output=f"web_search takes at most {MAX_QUERIES} queries, got {len(queries)}", error=True)
    top_k = int(args.get("top_k", 5))
    answers = await asyncio.gather(*(web.search(q, top_k) for q in queries), return_exceptions=True)
    blocks, errors = [], 0
    for q, answer in zip(queries, answers):
        if isinstance(answer, ProviderError):
            errors += 1
            blocks.append(f'## "{q}"\nsearch failed: {answer}')
        elif isinstance(answer, BaseException):
            raise answer
        else:
            blocks.append(format_results(q, answer))
    return ToolResult(output="\n\n".join(blocks), error=errors == len(queries),
                      metadata={"queries": len(queries), "provider_errors": errors})


search_tool = Tool(
    name="web_search",
    description="Search the web. Give one or more queries; returns the top results (title, url, snippet) for each.",
    parameters={
        "type": "object",
        "properties": {
            "queries": {"type": ["array", "string"], "items": {"type": "string", "maxLength": 500},
                        "maxItems": MAX_QUERIES, "maxLength": 500, "description": "search queries"},
            "top_k": {"type": "integer", "minimum": 1, "maximum": MAX_TOP_K, "description": "results per query"},
        },
        "required": ["queries"],
        "additionalProperties": False,
    },
    handler=run_search,
)


async def run_open_page(args: dict, ctx: ToolContext) -> ToolResult:
    web = _web(ctx)
    if isinstance(web, ToolResult):
        return web
    url, goal = args["url"].strip(), (args.get("goal") or "").strip() or "the question"
    try:
        page = await web.open_page(url, goal, engine=ctx.engine)
    except BlockedError as exc:
        return ToolResult(output=f"open_page refused {url}: {exc}", error=True, metadata={"blocked": True})
    except (ProviderError, SideEngineError) as exc:
        return ToolResult(output=f"open_page failed: {exc}", error=True)
    head = f"# {page['title']}\n" if page["title"] else ""
    return ToolResult(output=f"{head}{page['content']}\n\n[source: {page['url']}]",
                      metadata={"url": page["url"], "summarised": page["summarised"]})


open_page_tool = Tool(
    name="open_page",
    description="Open a web page and read the parts relevant to a goal; long pages come back summarised, "
                "always with the page's url as the source.",
    parameters={
        "type": "object",
        "properties": {
            "url": {"type": "string", "maxLength": 2000, "description": "the page's url (from search results)"},
            "goal": {"type": "string", "maxLength": 1000, "description": "what you want to learn from the page"},
        },
        "required": ["url"],
        "additionalProperties": False,
    },
    handler=run_open_page,
)
