"""The local web: a corpus served on 127.0.0.1 over real HTTP, speaking the hosted services' wire formats.

Routes (a starlette app under uvicorn, in a background thread or as ``skyrl deep-research serve-corpus``):

- ``GET /wiki/<Title>`` — the document as an HTML page with navigation, a sidebar and a footer around the
  article, so main-text extraction (trafilatura) does real work; 404 for an unknown title.
- ``POST /search`` — a **stand-in for Serper's search API** (``google.serper.dev/search``): a JSON body
  ``{"q": str, "num": int}`` (or a list of them) and an ``X-API-KEY`` header in; ``{"searchParameters": {...},
  "organic": [{"title", "link", "snippet", "position"}]}`` out (a list for a list), BM25 over the corpus.
- ``GET /go?to=<url>`` — a redirect to ``to`` (an open redirect, as many sites have).
- ``GET /reader/<url>`` — a **stand-in for Jina Reader** (``r.jina.ai/<url>``): with ``Accept:
  application/json`` it answers ``{"code": 200, "status": 20000, "data": {"title", "url", "content",
  "usage": {"tokens"}}}``; plain text otherwise. It reads only this corpus (any host's ``/wiki/<Title>``) and
  never fetches anything.

Faults for tests and drills: ``LocalWeb.faults`` is a list of fault names consumed one per request (FIFO):
``429`` and ``500``/``502``/``503`` answer with that status and the service's error-body shape; ``slow:<s>``
sleeps ``s`` seconds before answering; ``malformed`` answers 200 with a body cut mid-JSON. The error bodies
follow the shapes the services document (Serper: ``{"message", "statusCode"}``; Jina: ``{"code", "name",
"status", "message"}``); they are stand-ins, not recordings of those services.
"""

from __future__ import annotations

import asyncio
import html
import json
import logging
import threading
import time
import urllib.parse
from typing import Any

from .corpus import Corpus, path_to_title

log = logging.getLogger(__name__)

PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{title} - Local Wiki</title></head>
<body>
<header><nav><a href="/">Main page</a> | <a href="/random">Random article</a> | <a href="/help">Help</a></nav>
<form action="/search"><input name="q" placeholder="Search the local wiki"></form></header>
<aside class="sidebar"><h3>Navigation</h3><ul><li><a href="/about">About this wiki</a></li>
<li><a href="/contact">Contact us</a></li><li><a href="/donate">Donate</a></li></ul></aside>
<main><article><h1>{title}</h1>
{paragraphs}
</article></main>
<footer><p>Text is available under the Creative Commons Attribution-ShareAlike License 4.0.</p>
<p><a href="/privacy">Privacy policy</a> | <a href="/terms">Terms of use</a></p></footer>
</body></html>
"""


def render_page(title: str, text: str) -> str:
    """The HTML page of one document (sentences grouped in paragraphs of up to three)."""
    import re

    sentences = [s for s in re.split(r"(?<=[.!?])\s+", text) if s]
    paras = [" ".join(sentences[i:i + 3]) for i in range(0, len(sentences), 3)] or [text]
    body = "\n".join(f"<p>{html.escape(p)}</p>" for p in paras)
    return PAGE.format(title=html.escape(title), paragraphs=body)


def snippet(text: str, query: str, width: int = 160) -> str:
    """About ``width`` characters of ``text`` around the first query word it contains (Serper-style snippet)."""
    lower = text.lower()
    pos = min((lower.find(w) for w in query.lower().split() if len(w) > 3 and w in lower), default=0)
    start = max(0, pos - width // 3)
    piece = text[start:start + width].strip()
    return ("..." if start else "") + piece + ("..." if start + width < len(text) else "")


class LocalWeb:
    """A corpus served on ``host`` (127.0.0.1) at ``port`` (0: any free port). ``start()`` runs it in a
    daemon thread and returns the base URL; ``stop()`` shuts it down. ``requests`` counts requests by route
    (``search``, ``page``, ``reader``) — what tests read to see that a cache hit sent nothing."""

    def __init__(self, corpus: Corpus, host: str = "127.0.0.1", port: int = 0, api_key: str | None = None) -> None:
        self.corpus = corpus
        self.host = host
        self.port = port
        self.api_key = api_key
        self.faults: list[str] = []
        self.requests: dict[str, int] = {"search": 0, "page": 0, "reader": 0}
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self.app = self._build_app()

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    # -- the app ---------------------------------------------------------------------------------------
    def _build_app(self):
        from starlette.applications import Starlette
        from starlette.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response
        from starlette.routing import Route

        async def fault(kind: str) -> Response | None:
            if not self.faults:
                return None
            name = self.faults.pop(0)
            if name.startswith("slow:"):
                await asyncio.sleep(float(name.split(":", 1)[1]))
                return None
            if name == "malformed":
                return Response('{"organic": [{"title": "cut', media_type="application/json")
            if name.isdigit():
                code = int(name)
                headers = {"Retry-After": "0"} if code == 429 else {}
                if kind == "reader":
                    body = {"data": None, "code": code, "name": "RateLimitTriggeredError" if code == 429
                            else "InternalServerError", "status": code * 100 + 3,
                            "message": "Too many requests" if code == 429 else "Internal server error"}
                else:
                    body = {"message": "Too many requests" if code == 429 else "Internal server error",
                            "statusCode": code}
                return JSONResponse(body, status_code=code, headers=headers)
            raise ValueError(f"unknown fault {name!r}: valid are 429, 500, 502, 503, slow:<seconds>, malformed")

        def one_search(q: Any, num: Any) -> dict:
            hits = self.corpus.search(str(q), int(num))
            return {"searchParameters": {"q": q, "type": "search", "num": num, "engine": "google"},
                    "organic": [{"title": h.document.title, "link": self.base_url + h.document.path,
                                 "snippet": snippet(h.document.text, str(q)), "position": i + 1}
                                for i, h in enumerate(hits)],
                    "credits": 1}

        async def search(request):
            self.requests["search"] += 1
            if (early := await fault("search")) is not None:
                return early
            if self.api_key is not None and request.headers.get("x-api-key") != self.api_key:
                return JSONResponse({"message": "Unauthorized.", "statusCode": 403}, status_code=403)
            try:
                body = json.loads(await request.body())
            except json.JSONDecodeError:
                return JSONResponse({"message": "Invalid JSON body", "statusCode": 400}, status_code=400)
            queries = body if isinstance(body, list) else [body]
            if not all(isinstance(b, dict) and isinstance(b.get("q"), str) for b in queries):
                return JSONResponse({"message": "Each query needs a string 'q'", "statusCode": 400}, status_code=400)
            out = [await asyncio.to_thread(one_search, b["q"], b.get("num", 10)) for b in queries]
            return JSONResponse(out if isinstance(body, list) else out[0])

        async def page(request):
            self.requests["page"] += 1
            if (early := await fault("page")) is not None:
                return early
            doc = self.corpus.get(path_to_title(request.url.path) or "")
            if doc is None:
                return HTMLResponse("<html><body><h1>Not found</h1></body></html>", status_code=404)
            return HTMLResponse(render_page(doc.title, doc.text))

        async def reader(request):
            self.requests["reader"] += 1
            if (early := await fault("reader")) is not None:
                return early
            target = request.url.path[len("/reader/"):]
            title = path_to_title(urllib.parse.urlsplit(target).path)
            doc = self.corpus.get(title or "")
            if doc is None:
                body = {"data": None, "code": 422, "name": "AssertionFailureError", "status": 42206,
                        "message": f"Failed to fetch {target}"}
                return JSONResponse(body, status_code=422)
            content = f"{doc.text}"
            if "application/json" in request.headers.get("accept", ""):
                return JSONResponse({"code": 200, "status": 20000, "data": {
                    "title": doc.title, "url": target, "content": content,
                    "usage": {"tokens": len(content.split())}}})
            return PlainTextResponse(f"Title: {doc.title}\n\nURL Source: {target}\n\nMarkdown Content:\n{content}")

        async def go(request):
            # an open redirect, as many real sites have: what the HTTP reader's per-hop leakage check is for
            self.requests["page"] += 1
            return Response(status_code=302, headers={"Location": request.query_params.get("to", "/")})

        async def home(request):
            links = "".join(f'<li><a href="{d.path}">{html.escape(d.title)}</a></li>' for d in self.corpus.documents[:50])
            return HTMLResponse(f"<html><body><h1>Local wiki: {len(self.corpus)} pages</h1><ul>{links}</ul></body></html>")

        return Starlette(routes=[Route("/", home), Route("/search", search, methods=["POST"]),
                                 Route("/wiki/{title:path}", page), Route("/go", go), Route("/reader/{target:path}", reader)])

    # -- lifecycle -------------------------------------------------------------------------------------
    def start(self, timeout_s: float = 10.0) -> str:
        """Serve in a daemon thread; returns the base URL once the socket listens. Raises RuntimeError when the
        server does not come up within ``timeout_s`` seconds."""
        import uvicorn

        config = uvicorn.Config(self.app, host=self.host, port=self.port, log_level="warning", access_log=False,
                                lifespan="off")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, name="skyrl-local-web", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the local web did not start on {self.host}:{self.port}")
            time.sleep(0.02)
        self.port = self._server.servers[0].sockets[0].getsockname()[1]
        log.info("local web: %d pages at %s", len(self.corpus), self.base_url)
        return self.base_url

    def serve_forever(self) -> None:
        """Serve in the calling thread until interrupted (the CLI)."""
        import uvicorn

        uvicorn.run(self.app, host=self.host, port=self.port, log_level="warning", lifespan="off")

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=5)


_SHARED: dict[str, LocalWeb] = {}
_SHARED_LOCK = threading.Lock()


def shared_local_web(corpus_source: str) -> LocalWeb:
    """One running local web per corpus per process, started on first use (what ``provider: local_web``
    points the HTTP clients at)."""
    from .corpus import load_corpus

    with _SHARED_LOCK:
        web = _SHARED.get(corpus_source)
        if web is None:
            web = LocalWeb(load_corpus(corpus_source))
            web.start()
            _SHARED[corpus_source] = web
        return web
