"""The retriever endpoint skyrl-gym's ``search`` env calls, served on 127.0.0.1 over a JSONL corpus.

skyrl-gym's ``SearchToolGroup`` (0.4.0) POSTs ``{"query": str, "topk": int, "return_scores": bool}`` to
``search_url`` and reads ``{"result": [[{"document": {"contents": str}, "score": float}, ...]]}`` (one list per
query). This module answers that request with BM25 (Robertson & Zaragoza 2009, via ``bm25s``) over documents
``{"id": str, "contents": str}``. By default the corpus is the plugin's ``data/search_corpus.jsonl``; a user's
own retriever (e.g. Search-R1's e5 server over Wikipedia) is named with ``env_config.search_url`` instead.

Requests are hostile input too: a body that is not JSON, a query that is not a string or a topk outside 1..50
gets a 400 with the reason, never a stack trace; bodies over 64 KiB are refused (413).
"""

from __future__ import annotations

import functools
import json
import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from pathlib import Path

MAX_BODY = 64 * 1024
MAX_TOPK = 50


class Index:
    """BM25 over ``documents`` (dicts with ``contents``); :meth:`search` gives the ``topk`` best as dicts."""

    def __init__(self, documents: list[dict]) -> None:
        import bm25s

        if not documents:
            raise ValueError("a retriever corpus needs at least one document")
        logging.getLogger("bm25s").setLevel(logging.WARNING)
        self.documents = documents
        self._bm25 = bm25s.BM25()
        self._bm25.index(bm25s.tokenize([d["contents"] for d in documents], stopwords="en", show_progress=False),
                         show_progress=False)
        self._lock = threading.Lock()

    def search(self, query: str, topk: int) -> list[dict]:
        import bm25s

        tokens = bm25s.tokenize([query], stopwords="en", show_progress=False)
        if not tokens.ids or not tokens.ids[0]:
            return []
        k = max(1, min(topk, len(self.documents)))
        with self._lock:
            ids, scores = self._bm25.retrieve(tokens, k=k, show_progress=False)
        return [{"document": self.documents[int(i)], "score": float(s)}
                for i, s in zip(ids[0], scores[0]) if float(s) > 0]


def load_corpus(path: str | Path | None = None) -> list[dict]:
    """The documents of a JSONL corpus (``id``, ``contents`` per line); the shipped one when ``path`` is None.
    Raises ValueError naming the file and line of a malformed row."""
    text = (Path(path).read_text(encoding="utf-8") if path is not None
            else resources.files(__package__).joinpath("data", "search_corpus.jsonl").read_text(encoding="utf-8"))
    docs = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        row = json.loads(line)
        if not isinstance(row, dict) or not isinstance(row.get("contents"), str):
            raise ValueError(f"{path or 'search_corpus.jsonl'} line {n}: a document needs a string 'contents'")
        docs.append(row)
    return docs


def _handler(index: Index) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:  # quiet: tests and rollouts call it often
            pass

        def _reply(self, status: int, body: dict) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_POST(self) -> None:
            if self.path.rstrip("/") != "/retrieve":
                return self._reply(404, {"error": f"no endpoint {self.path!r}; POST /retrieve"})
            try:
                length = int(self.headers.get("Content-Length") or 0)
            except ValueError:
                return self._reply(400, {"error": "bad Content-Length"})
            if length > MAX_BODY:
                return self._reply(413, {"error": f"body over {MAX_BODY} bytes"})
            try:
                body = json.loads(self.rfile.read(length) or b"null")
            except (ValueError, UnicodeDecodeError):
                return self._reply(400, {"error": "the body is not JSON"})
            if not isinstance(body, dict):
                return self._reply(400, {"error": "the body must be an object with 'query' (or 'queries')"})
            queries = body.get("queries", [body.get("query")])
            topk = body.get("topk", 3)
            if not isinstance(queries, list) or not all(isinstance(q, str) for q in queries) or not queries:
                return self._reply(400, {"error": "'query' must be a string ('queries' a list of strings)"})
            if not isinstance(topk, int) or isinstance(topk, bool) or not 1 <= topk <= MAX_TOPK:
                return self._reply(400, {"error": f"'topk' must be an integer in 1..{MAX_TOPK}"})
            self._reply(200, {"result": [index.search(q, topk) for q in queries]})

    return Handler


class Retriever:
    """A running retriever: ``url`` is its ``/retrieve`` endpoint on 127.0.0.1 (port chosen by the OS)."""

    def __init__(self, documents: list[dict], port: int = 0) -> None:
        self.server = ThreadingHTTPServer(("127.0.0.1", port), _handler(Index(documents)))
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/retrieve"
        self._thread = threading.Thread(target=self.server.serve_forever, name="gymenvs-retriever", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@functools.lru_cache(maxsize=1)
def _shipped() -> Retriever:
    return Retriever(load_corpus())


def shipped_retriever_url() -> str:
    """The ``/retrieve`` URL of the retriever over the shipped corpus, started once per process."""
    return _shipped().url
