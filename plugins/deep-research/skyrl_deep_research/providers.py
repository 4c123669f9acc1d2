"""Search and page providers: Serper and Jina Reader online, plain HTTP with trafilatura, and the in-process
document store.

Every HTTP provider goes through :meth:`HttpProvider.request`: a per-call timeout, back-off with full jitter on
429 and 5xx (a ``Retry-After`` header is honoured up to ``max_backoff_s``), at most ``max_retries`` retries a
call and a provider-wide retry budget (retries may not exceed ``budget_min + budget_ratio x requests``, so a
provider that is down is not hammered), and a cap on concurrent requests per provider. Failures raise
:class:`ProviderError` naming the provider; the tools turn it into a tool error for the agent.
"""

from __future__ import annotations

import asyncio
import functools
import os
import weakref
import urllib.parse
from typing import Any

import attrs

from .corpus import Corpus, path_to_title

RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})


class ProviderError(Exception):
    """A provider call failed for good (down, refused, malformed answer, retries spent); ``provider`` names it."""

    def __init__(self, provider: str, message: str) -> None:
        super().__init__(f"{provider}: {message}")
        self.provider = provider


@attrs.define(frozen=True)
class SearchResult:
    """One search hit: ``title``, ``url`` and a ``snippet`` of the page."""

    title: str
    url: str
    snippet: str


@attrs.define(frozen=True)
class Page:
    """A fetched page's main text: ``url`` (the citation), ``title`` and ``text``."""

    url: str
    title: str
    text: str


@attrs.define(frozen=True)
class RetryPolicy:
    """``timeout_s`` per request (seconds); ``max_retries`` per call; back-off ``backoff_s * 2**attempt`` with
    full jitter, capped at ``max_backoff_s``; the retry budget ``budget_min + budget_ratio * requests``."""

    timeout_s: float = 20.0
    max_retries: int = 3
    backoff_s: float = 0.5
    max_backoff_s: float = 8.0
    budget_min: int = 10
    budget_ratio: float = 0.2

    @classmethod
    def from_options(cls, options: dict) -> "RetryPolicy":
        fields = {f.name for f in attrs.fields(cls)}
        bad = sorted(set(options) - fields)
        if bad:
            raise ValueError(f"unknown retry option(s) {', '.join(bad)}; valid: {', '.join(sorted(fields))}")
        return cls(**options)


class HttpProvider:
    """Base of the HTTP providers. ``concurrency`` caps requests in flight (per event loop)."""

    name = "http"

    def __init__(self, base_url: str | None = None, api_key: str | None = None, policy: RetryPolicy | None = None,
                 concurrency: int = 8) -> None:
        self.base_url = (base_url or "").rstrip("/")
        self.api_key = api_key
        self.policy = policy or RetryPolicy()
        self.concurrency = concurrency
        self.requests = 0
        self.retries = 0
        self._per_loop: dict[int, tuple[Any, asyncio.Semaphore, Any]] = {}

    def _loop_state(self) -> tuple[asyncio.Semaphore, Any]:
        """The semaphore and httpx client of the running event loop (both are bound to one loop). A client is
        kept, not made per request: building one loads the CA bundle (measured 0.48 s here)."""
        import httpx

        loop = asyncio.get_running_loop()
        entry = self._per_loop.get(id(loop))
        if entry is None or entry[0]() is not loop:
            client = httpx.AsyncClient(timeout=self.policy.timeout_s, follow_redirects=False, verify=_ssl_context(),
                                       limits=httpx.Limits(max_connections=self.concurrency))
            entry = (weakref.ref(loop), asyncio.Semaphore(self.concurrency), client)
            self._per_loop[id(loop)] = entry
        return entry[1], entry[2]

    def _may_retry(self) -> bool:
        return self.retries < self.policy.budget_min + self.policy.budget_ratio * self.requests

    async def request(self, method: str, url: str, **kwargs: Any):
        """One HTTP exchange with timeouts, retries (tenacity) and the concurrency cap; returns the httpx Response
        of a non-retryable status (the caller checks it). Raises ProviderError when the retries or budget run out."""
        import httpx
        import tenacity

        p = self.policy

        async def once():
            semaphore, client = self._loop_state()
            async with semaphore:
                self.requests += 1
                try:
                    resp = await client.request(method, url, **kwargs)
                except httpx.TimeoutException:
                    raise _Retryable(f"no answer within {p.timeout_s:g} s") from None
                except httpx.HTTPError as exc:
                    raise _Retryable(f"unreachable ({type(exc).__name__}: {exc})") from None
            if resp.status_code not in RETRY_STATUSES:
                return resp
            after = resp.headers.get("retry-after", "")
            raise _Retryable(f"HTTP {resp.status_code}",
                             min(float(after), p.max_backoff_s) if after.replace(".", "", 1).isdigit() else None)

        def stop(state: tenacity.RetryCallState) -> bool:
            if state.attempt_number > p.max_retries:
                return True
            if not self._may_retry():
                state.outcome.exception().cause += " (retry budget spent)"
                return True
            self.retries += 1
            return False

        jitter = tenacity.wait_random_exponential(multiplier=p.backoff_s, max=p.max_backoff_s)  # full jitter

        def wait(state: tenacity.RetryCallState) -> float:
            after = state.outcome.exception().retry_after
            return jitter(state) if after is None else after

        retrying = tenacity.AsyncRetrying(retry=tenacity.retry_if_exception_type(_Retryable), stop=stop, wait=wait,
                                          reraise=True)
        try:
            return await retrying(once)
        except _Retryable as exc:
            raise ProviderError(self.name, f"{method} {url} failed after {retrying.statistics['attempt_number']} "
                                           f"attempt(s): {exc.cause}") from None


class _Retryable(Exception):
    """A timeout, an unreachable host, 429 or 5xx: ``cause`` says which; ``retry_after`` is the server's
    ``Retry-After`` in seconds (capped at ``max_backoff_s``), or None."""

    def __init__(self, cause: str, retry_after: float | None = None) -> None:
        super().__init__(cause)
        self.cause, self.retry_after = cause, retry_after


@functools.lru_cache(maxsize=1)
def _ssl_context():
    """One TLS context for every client in the process (the system CA bundle, as httpx would load it)."""
    import ssl

    import certifi

    return ssl.create_default_context(cafile=certifi.where())


def _json(provider: str, resp) -> Any:
    try:
        return resp.json()
    except ValueError:
        raise ProviderError(provider, f"malformed response from {resp.request.url} (not JSON: "
                                      f"{resp.text[:80]!r})") from None


def _key(explicit: str | None, env: str) -> str | None:
    return explicit if explicit is not None else os.environ.get(env)


# -- search ----------------------------------------------------------------------------------------------

class SerperSearch(HttpProvider):
    """Serper's Google search API: ``POST {base_url}/search`` with ``{"q", "num"}`` and ``X-API-KEY``; the key
    comes from ``api_key`` or ``SERPER_API_KEY``."""

    name = "serper"
    default_base_url = "https://google.serper.dev"

    def __init__(self, base_url: str | None = None, api_key: str | None = None, **kwargs: Any) -> None:
        super().__init__(base_url or self.default_base_url, _key(api_key, "SERPER_API_KEY"), **kwargs)

    async def search(self, query: str, top_k: int) -> list[SearchResult]:
        if not self.api_key:
            raise ProviderError(self.name, "no API key: set SERPER_API_KEY (or search.api_key)")
        resp = await self.request("POST", f"{self.base_url}/search", json={"q": query, "num": top_k},
                                  headers={"X-API-KEY": self.api_key})
        if resp.status_code != 200:
            raise ProviderError(self.name, f"HTTP {resp.status_code}: {resp.text[:200]}")
        body = _json(self.name, resp)
        organic = body.get("organic") if isinstance(body, dict) else None
        if not isinstance(organic, list):
            raise ProviderError(self.name, f"malformed response: no 'organic' list in {str(body)[:120]}")
        out = []
        for item in organic[:top_k]:
            if isinstance(item, dict) and isinstance(item.get("link"), str):
                out.append(SearchResult(str(item.get("title", "")), item["link"], str(item.get("snippet", ""))))
        return out


class LocalSearch:
    """BM25 over the in-process document store (no HTTP); result URLs are the documents' source URLs."""

    name = "local"

    def __init__(self, corpus: Corpus) -> None:
        self.corpus = corpus

    async def search(self, query: str, top_k: int) -> list[SearchResult]:
        from .server import snippet

        hits = await asyncio.to_thread(self.corpus.search, query, top_k)
        return [SearchResult(h.document.title, h.document.source_url or "local:" + h.document.path,
                             snippet(h.document.text, query)) for h in hits]


# -- pages -----------------------------------------------------------------------------------------------

class JinaReader(HttpProvider):
    """Jina Reader: ``GET {base_url}/{url}`` with ``Accept: application/json`` (and ``Authorization: Bearer``
    from ``api_key`` or ``JINA_API_KEY`` when set) -> ``data.title``, ``data.content``."""

    name = "jina"
    default_base_url = "https://r.jina.ai"

    def __init__(self, base_url: str | None = None, api_key: str | None = None, **kwargs: Any) -> None:
        super().__init__(base_url or self.default_base_url, _key(api_key, "JINA_API_KEY"), **kwargs)

    async def open(self, url: str, blocklist: Any = None) -> Page:
        headers = {"Accept": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        resp = await self.request("GET", f"{self.base_url}/{url}", headers=headers)
        body = _json(self.name, resp)
        if resp.status_code != 200:
            message = body.get("message") if isinstance(body, dict) else None
            raise ProviderError(self.name, f"HTTP {resp.status_code}: {message or resp.text[:200]}")
        data = body.get("data") if isinstance(body, dict) else None
        if not isinstance(data, dict) or not isinstance(data.get("content"), str):
            raise ProviderError(self.name, f"malformed response: no data.content in {str(body)[:120]}")
        return Page(url=url, title=str(data.get("title") or ""), text=data["content"].strip())


class HttpReader(HttpProvider):
    """A plain GET (redirects followed by hand, each hop checked against the blocklist; at most
    ``max_bytes``) and main-text extraction with trafilatura (Barbaresi 2021)."""

    name = "http"
    max_redirects = 5
    max_bytes = 4_000_000

    async def open(self, url: str, blocklist: Any = None) -> Page:
        import trafilatura

        current = url
        for _ in range(self.max_redirects + 1):
            if blocklist is not None and blocklist.blocks(current):
                raise BlockedError(current, blocklist.reason(current))
            resp = await self.request("GET", current, headers={"User-Agent": "skyrl-deep-research/0.1"})
            if resp.status_code in (301, 302, 303, 307, 308) and "location" in resp.headers:
                current = urllib.parse.urljoin(current, resp.headers["location"])
                continue
            break
        else:
            raise ProviderError(self.name, f"{url}: more than {self.max_redirects} redirects")
        if resp.status_code != 200:
            raise ProviderError(self.name, f"{current}: HTTP {resp.status_code}")
        if len(resp.content) > self.max_bytes:
            raise ProviderError(self.name, f"{current}: page of {len(resp.content)} bytes exceeds {self.max_bytes}")
        html = resp.text
        text = await asyncio.to_thread(trafilatura.extract, html, include_comments=False, include_tables=True)
        if not text:
            raise ProviderError(self.name, f"{current}: no main text found in the page")
        meta = await asyncio.to_thread(trafilatura.extract_metadata, html)
        title = (getattr(meta, "title", None) or "") if meta is not None else ""
        text = text.strip()
        first, _, rest = text.partition("\n")
        if title and first.strip() and first.strip() in title:  # the page's own heading, already the title
            text = rest.strip() or text
        return Page(url=current, title=title, text=text)


class LocalReader:
    """The in-process document store: any URL whose path is ``/wiki/<Title>`` opens that document."""

    name = "local"

    def __init__(self, corpus: Corpus) -> None:
        self.corpus = corpus

    async def open(self, url: str, blocklist: Any = None) -> Page:
        path = urllib.parse.urlsplit(url).path if "://" in url else url.removeprefix("local:")
        doc = self.corpus.get(path_to_title(path) or "")
        if doc is None:
            raise ProviderError(self.name, f"no page at {url} in the local corpus")
        return Page(url=url, title=doc.title, text=doc.text)


class BlockedError(Exception):
    """A URL the leakage guard refuses (also raised mid-redirect)."""

    def __init__(self, url: str, reason: str) -> None:
        super().__init__(reason)
        self.url = url
