"""The ``web`` runtime: a trajectory's view of the web — search and page providers, the cache, the leakage
guard, the summariser — and its counters (cache hits, misses, saved seconds, blocked attempts, provider errors).

Runtime options (``tasks.N.runtime.options``), all optional::

    corpus: hotpotqa              # the local web's documents: hotpotqa | hotpotqa:<file> | <docs .jsonl>
    search:    {provider: local_web}   # local_web | local | serper   (+ base_url, api_key, concurrency, retry)
    open_page: {provider: local_web}   # local_web | local | http | jina (+ base_url, api_key, concurrency, retry)
    cache: {path: <sqlite file>, ttl_s: 604800, enabled: true}
    blocklist: [...]              # replaces the default leakage blocklist; extra_blocklist: [...] adds to it
    allow_hosts: [host:port, ...] # private/loopback addresses open_page may read (a self-hosted reader or wiki)
    summarizer: policy            # or {model: ..., engine: {type: ...}}: any registered engine
    summary_threshold_chars: 4000 # pages longer than this go through the two-stage summary
    chunk_chars: 2000             # chunk size of the summary's first stage
    summary_max_tokens: 192       # tokens per note and for the merged summary
    max_page_chars: 6000          # a page shown without a summary is cut here (summary off: summarize: false)

``local_web`` serves the corpus on 127.0.0.1 (one server per corpus per process) and talks to it with the
Serper client (search) and plain HTTP + trafilatura (pages): the offline default runs the same clients,
extraction, cache and error paths as the hosted services. Going online is ``search: {provider: serper}`` and
``open_page: {provider: jina}`` (or ``http``) with ``SERPER_API_KEY`` / ``JINA_API_KEY`` set.

Providers and the cache are shared by every runtime in the process with the same settings (so concurrency
caps and retry budgets are per provider, not per trajectory); the runtime itself only counts.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.parse
from typing import Any

from skyrl_core.runtime import ExecResult, Runtime, RuntimeSpec

from .cache import WebCache, normalise_query, normalise_url
from .guard import make_blocklist, private_host
from .providers import (BlockedError, HttpReader, JinaReader, LocalReader, LocalSearch, ProviderError, RetryPolicy,
                        SerperSearch)

SEARCH_PROVIDERS = ("local_web", "local", "serper")
PAGE_PROVIDERS = ("local_web", "local", "http", "jina")
OPTIONS = {"allow_hosts", "corpus", "search", "open_page", "cache", "blocklist", "extra_blocklist", "summarizer", "summarize",
           "summary_threshold_chars", "summary_max_tokens", "chunk_chars", "max_page_chars", "judge", "judge_prompt"}
PROVIDER_OPTIONS = {"provider", "base_url", "api_key", "concurrency", "retry"}
LOCAL_WEB = "{local_web}"  # stands for the local web's base URL in cached values (its port changes per process)

_SHARED: dict[str, Any] = {}
_SHARED_LOCK = threading.Lock()


def _shared(key: str, build):
    with _SHARED_LOCK:
        if key not in _SHARED:
            _SHARED[key] = build()
        return _SHARED[key]


class WebOptionsError(ValueError):
    """A web runtime option is malformed; the message names the option and what is valid."""


def _provider_options(options: dict, section: str, valid: tuple[str, ...]) -> dict:
    value = options.get(section, {"provider": "local_web"})
    if isinstance(value, str):
        value = {"provider": value}
    if not isinstance(value, dict):
        raise WebOptionsError(f"runtime option '{section}' must be a mapping like {{provider: {valid[0]}}}, got {value!r}")
    bad = sorted(set(value) - PROVIDER_OPTIONS)
    if bad:
        raise WebOptionsError(f"runtime option '{section}': unknown key(s) {', '.join(bad)}; valid: "
                              f"{', '.join(sorted(PROVIDER_OPTIONS))}")
    value = {"provider": "local_web", **value}
    if value["provider"] not in valid:
        raise WebOptionsError(f"runtime option '{section}.provider' is {value['provider']!r}; valid: {', '.join(valid)}")
    return value


class WebRuntime(Runtime):
    """Hosts a trajectory's web access. Tools call :meth:`search` and :meth:`open_page`; the verifier reads
    :attr:`metrics`. Raises WebOptionsError at construction for a malformed option (an ``error_init``)."""

    name = "web"
    isolation = "network-client"

    def __init__(self, spec: RuntimeSpec | None = None, **kwargs: Any) -> None:
        super().__init__(spec or RuntimeSpec(type="web"), **kwargs)
        self.options = dict(self.spec.options or {})
        bad = sorted(set(self.options) - OPTIONS)
        if bad:
            raise WebOptionsError(f"unknown web runtime option(s) {', '.join(bad)}; valid: {', '.join(sorted(OPTIONS))}")
        self.search_options = _provider_options(self.options, "search", SEARCH_PROVIDERS)
        self.page_options = _provider_options(self.options, "open_page", PAGE_PROVIDERS)
        try:
            self.blocklist = make_blocklist(self.options)
        except ValueError as exc:
            raise WebOptionsError(str(exc)) from None
        allow = self.options.get("allow_hosts", [])
        if not (isinstance(allow, list) and all(isinstance(h, str) for h in allow)):
            raise WebOptionsError(f"runtime option 'allow_hosts' must be a list of host or host:port, got {allow!r}")
        self.allow_hosts = {h.lower() for h in allow}
        self.corpus_source = str(self.options.get("corpus", "hotpotqa"))
        self.summarize = bool(self.options.get("summarize", True))
        self.summary_threshold = int(self.options.get("summary_threshold_chars", 4000))
        self.chunk_chars = int(self.options.get("chunk_chars", 2000))
        self.summary_max_tokens = int(self.options.get("summary_max_tokens", 192))
        self.max_page_chars = int(self.options.get("max_page_chars", 6000))
        self.metrics: dict[str, float] = {"search_queries": 0, "pages_opened": 0, "cache_hits": 0,
                                          "cache_misses": 0, "cache_saved_s": 0.0, "blocked": 0,
                                          "provider_errors": 0, "summaries": 0}
        self.searcher: Any = None
        self.reader: Any = None
        self.cache: WebCache | None = None
        self.local_base: str | None = None

    # -- lifecycle -------------------------------------------------------------------------------------
    async def start(self) -> None:
        import asyncio

        await asyncio.to_thread(self._build)
        self.closed = False

    def _build(self) -> None:
        uses_local_web = "local_web" in (self.search_options["provider"], self.page_options["provider"])
        if uses_local_web:
            from .server import shared_local_web

            self.local_base = shared_local_web(self.corpus_source).base_url
        self.searcher = self._provider("search", self.search_options)
        self.reader = self._provider("open_page", self.page_options)
        cache_opts = self.options.get("cache", {}) or {}
        if not isinstance(cache_opts, dict) or set(cache_opts) - {"path", "ttl_s", "enabled"}:
            raise WebOptionsError(f"runtime option 'cache' must be a mapping with path, ttl_s, enabled; got {cache_opts!r}")
        if cache_opts.get("enabled", True):
            path, ttl = cache_opts.get("path"), cache_opts.get("ttl_s", 7 * 24 * 3600)
            self.cache = _shared(f"cache:{path}:{ttl}", lambda: WebCache(path, ttl))

    def _provider(self, section: str, opts: dict):
        kind = opts["provider"]
        if kind == "local":
            from .corpus import load_corpus

            corpus = load_corpus(self.corpus_source)
            return LocalSearch(corpus) if section == "search" else LocalReader(corpus)
        try:
            policy = RetryPolicy.from_options(opts.get("retry", {}) or {})
        except (ValueError, TypeError) as exc:
            raise WebOptionsError(f"runtime option '{section}.retry': {exc}") from None
        kwargs = {"policy": policy, "concurrency": int(opts.get("concurrency", 8))}
        if kind == "local_web":
            if section == "search":
                cls, kwargs = SerperSearch, {**kwargs, "base_url": self.local_base, "api_key": "local"}
            else:
                cls = HttpReader
        else:
            cls = {"serper": SerperSearch, "jina": JinaReader, "http": HttpReader}[kind]
            kwargs = {**kwargs, "base_url": opts.get("base_url"), "api_key": opts.get("api_key")}
        key = f"{section}:{kind}:" + json.dumps({**opts, "local_base": self.local_base}, sort_keys=True, default=str)
        return _shared(key, lambda: cls(**kwargs))

    async def exec(self, command, timeout_s: float = 30.0, stdin=None, env=None) -> ExecResult:
        return ExecResult(exit_code=None, output="the web runtime runs no commands: use search and open_page")

    async def close(self) -> None:
        self.closed = True

    # -- the cache, with the local web's port taken out of keys and values ------------------------------
    def _provider_key(self, section: str) -> str:
        opts = self.search_options if section == "search" else self.page_options
        if section == "summary":
            from .summary import side_engine_key

            return f"summary:{side_engine_key(self.options.get('summarizer', 'policy'))}"
        if opts["provider"] in ("local_web", "local"):
            return f"{section}:{opts['provider']}:{self.corpus_source}"
        return f"{section}:{opts['provider']}:{opts.get('base_url') or 'default'}"

    def _portable(self, text: str) -> str:
        return text.replace(self.local_base, LOCAL_WEB) if self.local_base else text

    def _local(self, text: str) -> str:
        return text.replace(LOCAL_WEB, self.local_base) if self.local_base else text

    async def _cached(self, section: str, key: str, fetch):
        """``fetch()`` through the cache; counts hits, misses and the seconds a hit saved."""
        if self.cache is None:
            return await fetch()
        provider = self._provider_key(section)
        key = self._portable(key)
        hit = await self.cache.aget(provider, key)
        if hit is not None:
            value, cost_s = hit
            self.metrics["cache_hits"] += 1
            self.metrics["cache_saved_s"] += cost_s
            return json.loads(self._local(json.dumps(value)))
        self.metrics["cache_misses"] += 1
        t0 = time.perf_counter()
        value = await fetch()
        await self.cache.aput(provider, key, json.loads(self._portable(json.dumps(value))), time.perf_counter() - t0)
        return value

    def blocks(self, url: str) -> bool:
        """The leakage guard for one URL (also checked by the HTTP reader at every redirect hop)."""
        return self._blocked(url)

    def reason(self, url: str) -> str:
        return self._block_reason(url)

    def _blocked(self, url: str) -> bool:
        # "local:" URLs name documents of the in-process store (no host to block)
        return not url.startswith("local:") and (self.blocklist.blocks(url) or self._private(url))

    def _private(self, url: str) -> bool:
        # the local web itself is the one private address a trajectory may read
        here = urllib.parse.urlsplit(url.strip())
        if self.local_base:
            there = urllib.parse.urlsplit(self.local_base)
            if (here.scheme, here.hostname, here.port) == (there.scheme, there.hostname, there.port):
                return False
        if (here.hostname or "") in self.allow_hosts or f"{here.hostname}:{here.port}" in self.allow_hosts:
            return False
        return private_host(url)

    def _block_reason(self, url: str) -> str:
        if self._private(url) and not self.blocklist.blocks(url):
            return f"'{url}' is a private or loopback address (not reachable from a trajectory)"
        return self.blocklist.reason(url)

    # -- what the tools call -----------------------------------------------------------------------------
    async def search(self, query: str, top_k: int) -> list[dict]:
        """``top_k`` results for one query, blocked domains removed: ``[{"title", "url", "snippet"}]``.
        Raises ProviderError (counted) when the provider fails."""
        self.metrics["search_queries"] += 1

        async def fetch():
            # ask for a few more than needed: blocked results are dropped afterwards
            results = await self.searcher.search(query, top_k + 3)
            return [{"title": r.title, "url": r.url, "snippet": r.snippet} for r in results]

        try:
            results = await self._cached("search", normalise_query(query) + f"|{top_k + 3}", fetch)
        except ProviderError:
            self.metrics["provider_errors"] += 1
            raise
        kept = [r for r in results if not self._blocked(r["url"])]
        self.metrics["blocked"] += len(results) - len(kept)
        return kept[:top_k]

    async def open_page(self, url: str, goal: str, engine: Any = None) -> dict:
        """The page at ``url`` for ``goal``: ``{"url", "title", "content", "summarised"}``; a page longer
        than ``summary_threshold_chars`` is summarised in two stages by the summariser. Raises BlockedError
        (counted) for a blocked URL, ProviderError (counted) when the provider fails."""
        if self._blocked(url):
            self.metrics["blocked"] += 1
            raise BlockedError(url, self._block_reason(url))
        if self.page_options["provider"] == "local_web":
            url = self._on_local_web(url)

        async def fetch():
            page = await self.reader.open(url, self)
            return {"url": page.url, "title": page.title, "text": page.text}

        try:
            page = await self._cached("open_page", normalise_url(url), fetch)
        except BlockedError:
            self.metrics["blocked"] += 1
            raise
        except ProviderError:
            self.metrics["provider_errors"] += 1
            raise
        self.metrics["pages_opened"] += 1
        text = page["text"]
        if self.summarize and len(text) > self.summary_threshold:
            from .summary import side_engine, two_stage_summary

            summariser = await side_engine(self.options.get("summarizer", "policy"), engine, "summarizer")
            result = await self._cached(
                "summary", f"{normalise_url(url)}|{normalise_query(goal)}",
                lambda: two_stage_summary(summariser, page["url"], page["title"], text, goal, self.chunk_chars,
                                          self.summary_max_tokens))
            self.metrics["summaries"] += 1
            return {"url": page["url"], "title": page["title"], "content": result["summary"], "summarised": True}
        if len(text) > self.max_page_chars:
            text = text[: self.max_page_chars] + f"\n[... page cut at {self.max_page_chars} of {len(text)} characters]"
        return {"url": page["url"], "title": page["title"], "content": text, "summarised": False}

    def _on_local_web(self, url: str) -> str:
        """Offline, the local web is the whole web: a ``/wiki/<Title>`` URL of any host (the Wikipedia URL a model
        remembers) opens the local copy; any other URL is a ProviderError saying so (counted)."""
        here = urllib.parse.urlsplit(url.strip())
        there = urllib.parse.urlsplit(self.local_base or "")
        if (here.hostname, here.port) == (there.hostname, there.port):
            return url
        if here.path.startswith("/wiki/"):
            return self.local_base + here.path
        self.metrics["provider_errors"] += 1
        raise ProviderError("local_web", f"offline: only the local web at {self.local_base} is reachable "
                                         f"(its /wiki/<Title> pages); open a url from web_search results")

    def trajectory_metrics(self) -> dict[str, float]:
        """The counters plus ``cache_hit_rate`` (hits / lookups; absent when nothing was looked up)."""
        out = dict(self.metrics)
        lookups = out["cache_hits"] + out["cache_misses"]
        if lookups:
            out["cache_hit_rate"] = out["cache_hits"] / lookups
        return out
