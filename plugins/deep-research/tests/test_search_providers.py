"""BM25 search and browsing on the real HotpotQA corpus; the Serper and Jina clients against the local web (the
stand-in speaking their wire formats) with 429, 500, slow and malformed answers; the HTTP reader's extraction."""

from __future__ import annotations

import socket

import pytest

from skyrl_deep_research.corpus import CorpusError, documents_from_jsonl, title_to_path
from skyrl_deep_research.providers import (HttpReader, JinaReader, LocalReader, LocalSearch, ProviderError, RetryPolicy,
                                           SerperSearch)


def test_corpus_holds_every_context_paragraph_of_the_file(corpus, rows):
    titles = {t for r in rows for t in r["context"]["title"]}
    assert len(corpus) == len(titles) == 800
    # gold paragraphs sit among all the distractors: every supporting title is a document
    assert all(corpus.get(t) is not None for r in rows for t in r["supporting_facts"]["title"])


def test_bm25_finds_the_gold_paragraph_for_a_gold_title_query(corpus, rows):
    golds = [(r, t) for r in rows for t in sorted(set(r["supporting_facts"]["title"]))]
    top1 = sum(corpus.search(t, 5)[0].document.title == t for _, t in golds)
    top5 = sum(t in [h.document.title for h in corpus.search(t, 5)] for _, t in golds)
    assert len(golds) == 160
    assert top5 == 160          # measured: 160/160 in the top 5
    assert top1 >= 150          # measured: 151/160 first


async def test_local_search_and_reader_return_the_gold_sentence(corpus, rows):
    row = rows[0]  # VIVA Media AG -> GmbH
    results = await LocalSearch(corpus).search("VIVA Media AG name change 2004", 3)
    assert results[0].title == "VIVA Media"
    assert results[0].url == "https://en.wikipedia.org/wiki/VIVA_Media"
    page = await LocalReader(corpus).open(results[0].url)
    sent = row["context"]["sentences"][row["context"]["title"].index("VIVA Media")][0]
    assert sent.strip() in page.text and page.url == results[0].url
    with pytest.raises(ProviderError, match="local: no page at"):
        await LocalReader(corpus).open("https://en.wikipedia.org/wiki/No_such_page_at_all")


async def test_serper_client_against_the_local_web(web, fast_retry):
    serper = SerperSearch(base_url=web.base_url, api_key="test-key", policy=fast_retry)
    results = await serper.search("Jonny Craig", 3)
    assert [r.title for r in results][:1] == ["Jonny Craig"]
    assert results[0].url == web.base_url + "/wiki/Jonny_Craig"
    assert "Craig" in results[0].snippet
    assert web.requests["search"] == 1 and serper.retries == 0


async def test_serper_wrong_or_missing_key(web, fast_retry, monkeypatch):
    bad = SerperSearch(base_url=web.base_url, api_key="wrong", policy=fast_retry)
    with pytest.raises(ProviderError, match="serper: HTTP 403"):
        await bad.search("Pete Doherty", 3)
    monkeypatch.delenv("SERPER_API_KEY", raising=False)
    with pytest.raises(ProviderError, match="SERPER_API_KEY"):
        await SerperSearch(base_url=web.base_url, policy=fast_retry).search("Pete Doherty", 3)


async def test_serper_429_is_retried_after_retry_after(web, fast_retry):
    web.faults[:] = ["429", "429"]
    serper = SerperSearch(base_url=web.base_url, api_key="test-key", policy=fast_retry)
    results = await serper.search("Pete Doherty", 2)
    assert results and serper.retries == 2 and web.requests["search"] == 3


async def test_serper_500_until_the_retries_run_out(web, fast_retry):
    web.faults[:] = ["500", "502", "503", "500"]
    serper = SerperSearch(base_url=web.base_url, api_key="test-key", policy=fast_retry)
    with pytest.raises(ProviderError, match=r"serper: POST .*/search failed after 3 attempt\(s\): HTTP 503"):
        await serper.search("Pete Doherty", 2)
    assert web.requests["search"] == 3 and web.faults == ["500"]


async def test_serper_slow_answer_times_out_then_succeeds(web, fast_retry):
    web.faults[:] = ["slow:1.5"]
    serper = SerperSearch(base_url=web.base_url, api_key="test-key", policy=fast_retry)  # 0.5 s per request
    results = await serper.search("Pete Doherty", 2)
    assert results and serper.retries == 1


async def test_serper_malformed_answer_is_a_named_error(web, fast_retry):
    web.faults[:] = ["malformed"]
    with pytest.raises(ProviderError, match="serper: malformed response"):
        await SerperSearch(base_url=web.base_url, api_key="test-key", policy=fast_retry).search("Pete Doherty", 2)


async def test_retry_budget_stops_hammering_a_failing_provider(web):
    policy = RetryPolicy(timeout_s=0.5, max_retries=5, backoff_s=0.001, budget_min=1, budget_ratio=0.0)
    serper = SerperSearch(base_url=web.base_url, api_key="test-key", policy=policy)
    web.faults[:] = ["500"] * 10
    with pytest.raises(ProviderError, match="retry budget spent"):
        await serper.search("Pete Doherty", 2)
    assert serper.retries == 1 and web.requests["search"] == 2


async def test_provider_down_is_named(fast_retry):
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(ProviderError, match="serper: .*unreachable"):
        await SerperSearch(base_url=f"http://127.0.0.1:{port}", api_key="k", policy=fast_retry).search("x", 1)


async def test_jina_client_against_the_local_reader(web, fast_retry):
    jina = JinaReader(base_url=web.base_url + "/reader", api_key="jina-key", policy=fast_retry)
    url = "https://en.wikipedia.org" + title_to_path("Pete Doherty")
    page = await jina.open(url)
    assert page.title == "Pete Doherty" and page.url == url and "Peter Doherty" in page.text
    web.faults[:] = ["429", "malformed"]
    with pytest.raises(ProviderError, match="jina: malformed response"):
        await jina.open(url)
    assert jina.retries == 1
    with pytest.raises(ProviderError, match="jina: HTTP 422: Failed to fetch"):
        await jina.open("https://en.wikipedia.org/wiki/Not_in_the_corpus")


async def test_http_reader_extracts_the_article_not_the_boilerplate(web, corpus, fast_retry):
    page = await HttpReader(policy=fast_retry).open(web.base_url + title_to_path("Pete Doherty"))
    assert page.title.startswith("Pete Doherty")
    assert corpus.get("Pete Doherty").text.split(".")[0] in page.text
    for boilerplate in ("Privacy policy", "Donate", "Random article", "Creative Commons"):
        assert boilerplate not in page.text
    with pytest.raises(ProviderError, match="http: .*HTTP 404"):
        await HttpReader(policy=fast_retry).open(web.base_url + "/wiki/Nothing_here")


def test_jsonl_corpus_errors_name_the_line(tmp_path):
    path = tmp_path / "docs.jsonl"
    path.write_text('{"title": "A", "text": "alpha"}\n{"title": 3}\n')
    with pytest.raises(CorpusError, match=r"docs.jsonl:2: each row needs string fields 'title' and 'text'"):
        documents_from_jsonl(path)
    path.write_text('{"title": "A", "text": "alpha", "url": "https://a.example/A"}\n')
    assert documents_from_jsonl(path)[0].source_url == "https://a.example/A"
