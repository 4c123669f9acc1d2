"""The document collection behind the offline web: documents, their local URLs and a BM25 index (bm25s).

A :class:`Corpus` is built from HotpotQA rows (every context paragraph of the file, one document per distinct
title, so an answer's gold paragraphs sit among all the file's distractors) or from a JSONL file of
``{"title", "text", "url"?}`` rows. Each document has a path ``/wiki/<Title_with_underscores>`` on the local web
and the Wikipedia URL it came from as ``source_url``.
"""

from __future__ import annotations

import json
import logging
import threading
import urllib.parse
from pathlib import Path
from typing import Iterable, Iterator

import attrs

DATA_DIR = Path(__file__).parent / "data"
HOTPOTQA_FILE = DATA_DIR / "hotpot_dev_distractor_80.jsonl"


class CorpusError(ValueError):
    """A corpus file is missing or malformed; the message names the file, the line and what is valid."""


@attrs.define(frozen=True)
class Document:
    """One page: ``title``, plain ``text`` (paragraph sentences joined) and the ``source_url`` it came from."""

    title: str
    text: str
    source_url: str = ""

    @property
    def path(self) -> str:
        """Its path on the local web: ``/wiki/<Title_with_underscores>`` (percent-encoded)."""
        return title_to_path(self.title)


def title_to_path(title: str) -> str:
    return "/wiki/" + urllib.parse.quote(title.replace(" ", "_"), safe="")


def path_to_title(path: str) -> str | None:
    """The title a ``/wiki/...`` path names, or None for any other path."""
    if not path.startswith("/wiki/"):
        return None
    return urllib.parse.unquote(path[len("/wiki/"):]).replace("_", " ")


def jsonl_rows(path: str | Path, what: str) -> Iterator[tuple[int, dict]]:
    """``(line number, object)`` for each non-blank line of a JSONL file. Raises CorpusError naming the file
    (``what`` it should be) when it is missing, and the line when it is not a JSON object."""
    path = Path(path)
    if not path.is_file():
        raise CorpusError(f"{what} '{path}' does not exist")
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise CorpusError(f"{path}:{n}: not JSON ({exc})") from None
        if not isinstance(row, dict):
            raise CorpusError(f"{path}:{n}: each line must be a JSON object, got {type(row).__name__}")
        yield n, row


def hotpotqa_rows(path: str | Path | None = None) -> list[dict]:
    """The rows of a HotpotQA distractor JSONL file (the shipped 80 dev rows by default)."""
    path = Path(path) if path else HOTPOTQA_FILE
    rows = []
    for n, row in jsonl_rows(path, "HotpotQA file (JSONL in the hotpot_qa/distractor layout)"):
        ctx = row.get("context")
        if not isinstance(ctx, dict) or not isinstance(ctx.get("title"), list) or not isinstance(ctx.get("sentences"), list):
            raise CorpusError(f"{path}:{n}: not a HotpotQA row with context.title and context.sentences")
        rows.append(row)
    return rows


def documents_from_hotpotqa(rows: Iterable[dict]) -> list[Document]:
    """One document per distinct paragraph title over all rows' contexts (first occurrence wins)."""
    docs: dict[str, Document] = {}
    for row in rows:
        ctx = row["context"]
        for title, sentences in zip(ctx["title"], ctx["sentences"]):
            if title not in docs:
                text = "".join(sentences).strip()
                url = "https://en.wikipedia.org/wiki/" + urllib.parse.quote(title.replace(" ", "_"))
                docs[title] = Document(title=title, text=text, source_url=url)
    return list(docs.values())


def documents_from_jsonl(path: str | Path) -> list[Document]:
    """Documents from a JSONL file of ``{"title": str, "text": str, "url": str (optional)}`` rows."""
    docs = []
    for n, row in jsonl_rows(path, "corpus file (JSONL rows with 'title' and 'text')"):
        if not isinstance(row.get("title"), str) or not isinstance(row.get("text"), str):
            raise CorpusError(f"{path}:{n}: each row needs string fields 'title' and 'text'")
        docs.append(Document(title=row["title"], text=row["text"], source_url=str(row.get("url") or "")))
    return docs


@attrs.define(frozen=True)
class Hit:
    """One search result: the document and its BM25 score."""

    document: Document
    score: float


class Corpus:
    """Documents by title plus a BM25 index (Robertson & Zaragoza 2009, via bm25s) over title and text.

    ``search(query, k)`` returns at most ``k`` hits with a positive score, best first. Thread-safe to query.
    """

    def __init__(self, documents: list[Document]) -> None:
        if not documents:
            raise CorpusError("a corpus needs at least one document")
        import bm25s

        logging.getLogger("bm25s").setLevel(logging.WARNING)  # it logs at DEBUG on itself
        self.documents = documents
        self.by_title = {d.title: d for d in documents}
        self.by_title_lower = {d.title.lower(): d for d in documents}
        tokens = bm25s.tokenize([f"{d.title}. {d.title}. {d.text}" for d in documents], stopwords="en",
                                show_progress=False)
        self._retriever = bm25s.BM25()
        self._retriever.index(tokens, show_progress=False)
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self.documents)

    def get(self, title: str) -> Document | None:
        """The document titled ``title`` (exact, else case-insensitive), or None."""
        return self.by_title.get(title) or self.by_title_lower.get(title.lower())

    def search(self, query: str, k: int = 5) -> list[Hit]:
        import bm25s

        tokens = bm25s.tokenize([query], stopwords="en", show_progress=False)
        if not tokens.ids or not tokens.ids[0]:
            return []
        k = max(1, min(k, len(self.documents)))
        with self._lock:
            ids, scores = self._retriever.retrieve(tokens, k=k, show_progress=False)
        return [Hit(self.documents[int(i)], float(s)) for i, s in zip(ids[0], scores[0]) if s > 0]


_CORPORA: dict[str, Corpus] = {}
_CORPORA_LOCK = threading.Lock()


def load_corpus(source: str = "hotpotqa") -> Corpus:
    """A corpus by name, built once per process: ``hotpotqa`` (the shipped rows' paragraphs),
    ``hotpotqa:<path>`` (another HotpotQA distractor file) or the path of a ``{"title", "text"}`` JSONL file."""
    with _CORPORA_LOCK:
        if source not in _CORPORA:
            if source == "hotpotqa":
                docs = documents_from_hotpotqa(hotpotqa_rows())
            elif source.startswith("hotpotqa:"):
                docs = documents_from_hotpotqa(hotpotqa_rows(source.split(":", 1)[1]))
            else:
                docs = documents_from_jsonl(source)
            _CORPORA[source] = Corpus(docs)
        return _CORPORA[source]
