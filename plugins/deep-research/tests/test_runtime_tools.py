"""The web runtime through the search and open_page tools: the offline default on the local web, the cache across
trajectories and runs, the leakage guard and its attack cases, provider failures as tool errors."""

from __future__ import annotations

import socket

import pytest

from skyrl_core import ToolContext
from skyrl_core.runtime import RuntimeSpec
from skyrl_deep_research.cache import WebCache, normalise_query, normalise_url
from skyrl_deep_research.corpus import title_to_path
from skyrl_deep_research.runtime import WebOptionsError, WebRuntime
from skyrl_deep_research.tools import open_page_tool, search_tool

FAST = {"timeout_s": 0.5, "max_retries": 1, "backoff_s": 0.01, "max_backoff_s": 0.02}


async def started(**options) -> WebRuntime:
    rt = WebRuntime(RuntimeSpec(type="web", options=options))
    await rt.start()
    return rt


def serper_at(web) -> dict:
    """The Serper client pointed at the test's own local web (the stand-in for google.serper.dev)."""
    return {"provider": "serper", "base_url": web.base_url, "api_key": "test-key", "retry": FAST}


async def test_offline_default_searches_and_reads_the_local_web(cache_path):
    rt = await started(cache={"path": str(cache_path)})
    ctx = ToolContext(runtime=rt)
    out = await search_tool.call({"queries": ["Missouri Compromise"], "top_k": 2}, ctx)
    assert not out.error and out.output.startswith('## "Missouri Compromise"\n1. Missouri Compromise - http://127.0.0.1:')
    url = out.output.split(" - ", 1)[1].split()[0]
    page = await open_page_tool.call({"url": url, "goal": "what it decided"}, ctx)
    assert not page.error and "Missouri" in page.output and page.output.endswith(f"[source: {url}]")
    assert rt.trajectory_metrics() == {"search_queries": 1, "pages_opened": 1, "cache_hits": 0, "cache_misses": 2,
                                       "cache_saved_s": 0.0, "blocked": 0, "provider_errors": 0, "summaries": 0,
                                       "cache_hit_rate": 0.0}


async def test_cache_hits_across_two_trajectories_and_a_new_run(web, cache_path):
    first = await started(search=serper_at(web), open_page="http", cache={"path": str(cache_path)},
                          allow_hosts=[f"127.0.0.1:{web.port}"])
    url = web.base_url + title_to_path("Pete Doherty")
    await search_tool.call({"queries": ["Pete  DOHERTY "]}, ToolContext(runtime=first))
    await open_page_tool.call({"url": url, "goal": "bands"}, ToolContext(runtime=first))
    assert web.requests["search"] == 1 and web.requests["page"] == 1
    assert first.metrics["cache_misses"] == 2 and first.metrics["cache_hits"] == 0

    second = await started(search=serper_at(web), open_page="http", cache={"path": str(cache_path)},
                           allow_hosts=[f"127.0.0.1:{web.port}"])
    out = await search_tool.call({"queries": ["pete doherty"]}, ToolContext(runtime=second))
    page = await open_page_tool.call({"url": url + "#career", "goal": "bands"}, ToolContext(runtime=second))
    assert "Pete Doherty" in out.output and "Peter Doherty" in page.output
    assert web.requests["search"] == 1 and web.requests["page"] == 1  # nothing sent: both came from the cache
    assert second.metrics["cache_hits"] == 2 and second.metrics["cache_saved_s"] > 0
    assert second.trajectory_metrics()["cache_hit_rate"] == 1.0

    # a new run (a new cache object on the same file) hits too; an expired entry does not
    assert WebCache(cache_path).get("search:serper:" + web.base_url, normalise_query("Pete Doherty") + "|8") is not None
    assert WebCache(cache_path, ttl_s=0).get("search:serper:" + web.base_url, normalise_query("Pete Doherty") + "|8") is None


def test_url_and_query_normalisation():
    assert normalise_url("HTTP://Example.COM:80/a/?b=2&a=1#frag") == "http://example.com/a?a=1&b=2"
    assert normalise_url("https://x.org") == "https://x.org/"
    assert normalise_query("  Ed\tWOOD ") == "ed wood"


async def test_local_web_cache_survives_a_new_port(cache_path, corpus):
    """Cached local-web links carry a placeholder for the base URL, so a later process (another port) reads them."""
    rt = await started(cache={"path": str(cache_path)})
    cache = WebCache(cache_path)
    value, _ = cache.get("search:local_web:hotpotqa", normalise_query("Jonny Craig") + "|8") or (None, 0)
    assert value is None
    await search_tool.call({"queries": ["Jonny Craig"]}, ToolContext(runtime=rt))
    value, _ = cache.get("search:local_web:hotpotqa", normalise_query("Jonny Craig") + "|8")
    assert value[0]["url"] == "{local_web}/wiki/Jonny_Craig"


async def test_blocklist_drops_results_and_refuses_fetches(cache_path):
    # the in-process store's results carry their Wikipedia source URLs: block that domain
    rt = await started(search="local", open_page="local", extra_blocklist=["wikipedia.org"], cache={"enabled": False})
    ctx = ToolContext(runtime=rt)
    out = await search_tool.call({"queries": ["Pete Doherty"], "top_k": 3}, ctx)
    assert out.output == '## "Pete Doherty"\nno results' and rt.metrics["blocked"] == 6  # top_k + 3 asked, all dropped
    page = await open_page_tool.call({"url": "https://en.wikipedia.org/wiki/Pete_Doherty"}, ctx)
    assert page.error and "'en.wikipedia.org' is on the blocklist" in page.output and rt.metrics["blocked"] == 7


@pytest.mark.parametrize("url, why", [
    ("https://huggingface.co/datasets/hotpot_qa", "'huggingface.co' is on the blocklist"),
    ("https://raw.githubusercontent.com/hotpotqa/hotpot/master/x.json", "'raw.githubusercontent.com' is on the blocklist"),
    ("https://HOTPOTQA.github.io./", "'hotpotqa.github.io' is on the blocklist"),
    ("http://curtis.ml.cmu.edu/datasets/hotpot/hotpot_dev_distractor_v1.json", "'curtis.ml.cmu.edu' is on the blocklist"),
    ("file:///etc/passwd", "is not an http(s) URL"),
    ("javascript:alert(1)", "is not an http(s) URL"),
    ("http://169.254.169.254/latest/meta-data/", "private or loopback address"),
    ("http://localhost:22/", "private or loopback address"),
    ("http://[::1]:8080/", "private or loopback address"),
    ("http://10.0.0.7/admin", "private or loopback address"),
])
async def test_attack_urls_are_refused_and_counted(url, why, cache_path):
    rt = await started(open_page="http", cache={"path": str(cache_path)})
    page = await open_page_tool.call({"url": url, "goal": "the answer"}, ToolContext(runtime=rt))
    assert page.error and why in page.output and rt.metrics["blocked"] == 1 and rt.metrics["pages_opened"] == 0


async def test_private_addresses_stay_refused_after_a_redirect(web, cache_path):
    """A public-looking hop may not bounce the reader onto the host's own services."""
    rt = await started(open_page="http", cache={"path": str(cache_path)}, allow_hosts=[f"127.0.0.1:{web.port}"])
    page = await open_page_tool.call({"url": f"{web.base_url}/go?to=http://127.0.0.1:1/secret"}, ToolContext(runtime=rt))
    assert page.error and "private or loopback address" in page.output and rt.metrics["blocked"] == 1


async def test_redirect_to_a_blocked_host_is_refused_mid_hop(web, cache_path):
    """An open redirect on an allowed site must not carry the reader to a blocked one (checked at every hop)."""
    rt = await started(search=serper_at(web), open_page="http", cache={"path": str(cache_path)},
                       allow_hosts=[f"127.0.0.1:{web.port}"])  # the test's web is not the runtime's own local web
    hostile = f"http://127.0.0.1:{web.port}/go?to=https://huggingface.co/datasets/hotpot_qa"
    page = await open_page_tool.call({"url": hostile}, ToolContext(runtime=rt))
    assert page.error and "'huggingface.co' is on the blocklist" in page.output and rt.metrics["blocked"] == 1
    ok = await open_page_tool.call({"url": f"{web.base_url}/go?to={title_to_path('Jonny Craig')}"},
                                   ToolContext(runtime=rt))
    assert not ok.error and ok.output.endswith(f"[source: {web.base_url}/wiki/Jonny_Craig]")


async def test_a_provider_that_is_down_is_a_tool_error_naming_it(cache_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    rt = await started(search={"provider": "serper", "base_url": f"http://127.0.0.1:{port}", "api_key": "k",
                               "retry": FAST}, open_page={"provider": "jina", "base_url": f"http://127.0.0.1:{port}",
                                                          "retry": FAST}, cache={"path": str(cache_path)})
    ctx = ToolContext(runtime=rt)
    out = await search_tool.call({"queries": ["a", "b"]}, ctx)
    assert out.error and out.output.count("search failed: serper: POST") == 2 and "unreachable" in out.output
    page = await open_page_tool.call({"url": "https://example.org/"}, ctx)
    assert page.error and "open_page failed: jina: GET" in page.output
    assert rt.metrics["provider_errors"] == 3


async def test_tools_need_the_web_runtime():
    out = await search_tool.call({"queries": "x"}, ToolContext(runtime=None))
    assert out.error and "needs the 'web' runtime" in out.output


def test_bad_options_name_the_culprit():
    with pytest.raises(WebOptionsError, match=r"unknown web runtime option\(s\) serach; valid: allow_hosts, blocklist"):
        WebRuntime(RuntimeSpec(type="web", options={"serach": {}}))
    with pytest.raises(WebOptionsError, match="'search.provider' is 'google'; valid: local_web, local, serper"):
        WebRuntime(RuntimeSpec(type="web", options={"search": "google"}))
    with pytest.raises(WebOptionsError, match="'blocklist' must be a list of domain names"):
        WebRuntime(RuntimeSpec(type="web", options={"blocklist": "github.com"}))


async def test_search_schema_refuses_oversized_arguments():
    from skyrl_core.errors import ToolArgumentsError

    with pytest.raises(ToolArgumentsError, match="top_k"):
        search_tool.validate({"queries": ["a"], "top_k": 1000})
    with pytest.raises(ToolArgumentsError, match="queries"):
        search_tool.validate({"queries": ["q"] * 50})


async def test_research_codeblock_fences_are_the_research_tools(cache_path):
    from skyrl_deep_research.parsers import research_codeblock_parser

    parser = research_codeblock_parser()
    calls = parser.parse("Let me look.\n```search\nPete Doherty\nJonny Craig\n```\n").calls
    assert [(c.name, c.arguments) for c in calls] == [("web_search", {"queries": "Pete Doherty\nJonny Craig"})]
    rt = await started(search="local", open_page="local", cache={"path": str(cache_path)})
    out = await search_tool.call(calls[0].arguments, ToolContext(runtime=rt))
    assert out.output.startswith('## "Pete Doherty"\n1.') and '\n\n## "Jonny Craig"\n1. Jonny Craig' in out.output
    assert rt.metrics["search_queries"] == 2
    assert parser.parse("```answer\nIsmaning\n```").calls[0].arguments == {"answer": "Ismaning"}
    assert parser.parse("```open\nhttps://en.wikipedia.org/wiki/Pete_Doherty\n```").calls[0].name == "open_page"
    many = await search_tool.call({"queries": "\n".join(["q"] * 6)}, ToolContext(runtime=rt))
    assert many.error and "at most 5 queries, got 6" in many.output


async def test_offline_the_local_web_is_the_whole_web(cache_path):
    rt = await started(cache={"path": str(cache_path)})
    ctx = ToolContext(runtime=rt)
    remembered = await open_page_tool.call({"url": "https://en.wikipedia.org/wiki/Jonny_Craig"}, ctx)
    assert not remembered.error and remembered.output.endswith(f"[source: {rt.local_base}/wiki/Jonny_Craig]")
    elsewhere = await open_page_tool.call({"url": "https://example.org/news"}, ctx)
    assert elsewhere.error and "local_web: offline: only the local web at http://127.0.0.1:" in elsewhere.output
    assert rt.metrics["provider_errors"] == 1 and rt.metrics["pages_opened"] == 1
