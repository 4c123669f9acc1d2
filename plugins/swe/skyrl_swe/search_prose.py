"""The prose form of the ``search`` tool: fielded BM25 over modules and definitions (a retriever, not a fallback).

Documents (one per module, class and top-level-or-method function; a function nested in another is part of its
parent's document, since the parent is what a reader edits):

- ``name`` field — the qualified name and the path, split into code tokens (``get_or_create`` -> ``get_or_create``,
  ``get``, ``or``, ``create``); weighted :data:`FIELD_WEIGHTS` ``name`` so a definition named like the query wins;
- ``head`` field — decorators, the signature and the first :data:`DOC_LINES` lines of the docstring (a long
  docstring no longer drowns the code); for a module, its docstring and ``__all__``;
- ``body`` field — the code (at most :data:`BODY_LINES` lines); for a class, its own lines and its members'
  signatures; for a module, the module-level code outside definitions (imports, constants, assignments).

Each field is its own BM25 index (bm25s, Lucene variant, Robertson & Zaragoza 2009); a document's score is the
weighted sum of its field scores (the per-field approximation of BM25F). Test and fixture files are indexed but
scored zero unless the caller asks for them (``include_tests``), so a ``path:`` into a test tree still reaches
them. Built lazily on the first prose query and rebuilt when the index version changes.
"""

from __future__ import annotations

import logging
import re
import threading
from collections import OrderedDict

import attrs

from .index import CodeIndex, Symbol, code_tokens

DOC_LINES = 12
BODY_LINES = 300
FIELD_WEIGHTS = {"name": 3.0, "head": 1.0, "body": 1.0}
MODULE_KIND = "module"


def is_test_path(path: str) -> bool:
    """A test or fixture file: ``test_*.py``, ``*_test.py``, ``conftest.py``, or anything under a directory
    named ``tests``/``test``/``testing``/``fixtures``."""
    parts = path.split("/")
    name = parts[-1]
    return (name.startswith("test_") or name.endswith("_test.py") or name == "conftest.py"
            or any(p in ("tests", "test", "testing", "fixtures") for p in parts[:-1]))


def module_symbol(path: str, n_lines: int) -> Symbol:
    """The pseudo-definition standing for a whole file (``kind="module"``, ``qualname="<module>"``)."""
    return Symbol(path=path, kind=MODULE_KIND, name=path.rsplit("/", 1)[-1], qualname="<module>", start=1,
                  end=max(1, n_lines), header_end=1)


def _docstring_span(lines: list[str], first: int) -> tuple[int, int] | None:
    """(start, end) 1-based lines of a docstring starting at line ``first``, or None."""
    if first < 1 or first > len(lines):
        return None
    text = lines[first - 1].strip()
    for quote in ('"""', "'''"):
        at = text.find(quote)
        if at >= 0 and at <= 2:
            if text.count(quote) >= 2:
                return first, first
            end = first
            while end < len(lines) and quote not in lines[end]:
                end += 1
            return first, min(end + 1, len(lines))
    return None


_WORD = re.compile(rb"[A-Za-z_][A-Za-z0-9_]*")
_WORDS: OrderedDict[str, frozenset[str]] = OrderedDict()
_WORDS_LOCK = threading.Lock()
WORDS_CAPACITY = 100_000


def file_words(entry) -> frozenset[str]:
    """The identifiers occurring in an indexed file (a content index for word search), memoised by the file's
    SHA-1 in a bounded process-wide LRU so copies of one repository are scanned once."""
    with _WORDS_LOCK:
        words = _WORDS.get(entry.sha1)
        if words is not None:
            _WORDS.move_to_end(entry.sha1)
            return words
    words = frozenset(w.decode("ascii") for w in set(_WORD.findall(entry.data)))
    with _WORDS_LOCK:
        _WORDS[entry.sha1] = words
        while len(_WORDS) > WORDS_CAPACITY:
            _WORDS.popitem(last=False)
    return words


@attrs.frozen
class ProseHit:
    symbol: Symbol
    score: float


class ProseIndex:
    """The fielded BM25 tables of one :class:`CodeIndex` version (build with :meth:`build`)."""

    def __init__(self, docs: list[Symbol], fields: dict[str, list[list[str]]]) -> None:
        import bm25s
        import numpy as np

        logging.getLogger("bm25s").setLevel(logging.WARNING)
        self.docs = docs
        self.retrievers = {}  # field -> (BM25, that field's token -> id); bm25s wants dense ids per index
        for field, corpus in fields.items():
            vocab: dict[str, int] = {}
            ids = [[vocab.setdefault(t, len(vocab)) for t in (doc or ["_"])] for doc in corpus]
            retriever = bm25s.BM25()
            retriever.index(bm25s.tokenization.Tokenized(ids=ids, vocab=vocab), show_progress=False)
            self.retrievers[field] = (retriever, vocab)
        self.test_mask = np.array([0.0 if is_test_path(d.path) else 1.0 for d in docs], dtype="float32")

    @classmethod
    def build(cls, index: CodeIndex) -> "ProseIndex":
        docs: list[Symbol] = []
        fields: dict[str, list[list[str]]] = {"name": [], "head": [], "body": []}

        def add(sym: Symbol, name: str, head: str, body: str) -> None:
            docs.append(sym)
            fields["name"].append(code_tokens(name))
            fields["head"].append(code_tokens(head))
            fields["body"].append(code_tokens(body))

        for path, entry in index.files.items():
            lines = entry.data.decode("utf-8", "replace").splitlines()
            path_words = path.replace("/", " ").replace(".py", " ")
            covered = [False] * (len(lines) + 2)
            top = [s for s in entry.symbols if "." not in s.qualname]
            for s in top:
                for n in range(s.start, min(s.end, len(lines)) + 1):
                    covered[n] = True
            span = _docstring_span(lines, next((i + 1 for i, t in enumerate(lines) if t.strip()
                                                and not t.startswith("#")), 0))
            mod_doc = "\n".join(lines[span[0] - 1: span[1]][:DOC_LINES]) if span else ""
            mod_body = [t for n, t in enumerate(lines, 1) if not covered[n] and not (span and span[0] <= n <= span[1])]
            mod_sigs = [lines[s.start - 1] for s in top if s.start <= len(lines)]
            add(module_symbol(path, entry.n_lines), path_words, mod_doc,
                "\n".join(mod_body[:BODY_LINES] + mod_sigs))
            func_quals = {s.qualname for s in entry.symbols if s.kind != "class"}
            for s in entry.symbols:
                parts = s.qualname.split(".")
                if any(".".join(parts[:i]) in func_quals for i in range(1, len(parts))):
                    continue  # a nested function is read as part of its parent
                head_lines = lines[s.start - 1: s.header_end]
                doc = _docstring_span(lines, s.header_end + 1)
                doc_text = lines[doc[0] - 1: doc[1]][:DOC_LINES] if doc else []
                body_from = (doc[1] if doc else s.header_end) + 1
                if s.kind == "class":
                    members = [m for m in entry.symbols if m.start > s.start and m.end <= s.end]
                    member_rows = {n for m in members for n in range(m.start, m.end + 1)}
                    own = [lines[n - 1] for n in range(body_from, min(s.end, len(lines)) + 1) if n not in member_rows]
                    sigs = [lines[m.start - 1] for m in members if m.qualname.count(".") == s.qualname.count(".") + 1
                            and m.start <= len(lines)]
                    body = own[:BODY_LINES] + sigs
                else:
                    body = lines[body_from - 1: min(s.end, len(lines))][:BODY_LINES]
                add(s, f"{s.qualname} {s.qualname.replace('.', ' ')} {path_words}",
                    "\n".join(head_lines + doc_text), "\n".join(body))
        return cls(docs, fields)

    def rank(self, query: str, k: int, include_tests: bool = False, keep=None) -> list[ProseHit]:
        """The ``k`` best documents for ``query`` (prose or code); ``keep(symbol) -> bool`` filters (scope,
        kind). Scores are the weighted sum of the field BM25 scores; zero-score documents are never returned."""
        import numpy as np

        tokens = [t for t in dict.fromkeys(code_tokens(query)) if len(t) > 1]
        total = None
        for field, (retriever, vocab) in self.retrievers.items():
            q = [vocab[t] for t in tokens if t in vocab]
            if not q:
                continue
            scores = retriever.get_scores(q) * FIELD_WEIGHTS[field]
            total = scores if total is None else total + scores
        if total is None:
            return []
        if not include_tests:
            total = total * self.test_mask
        order = np.argsort(-total)
        out: list[ProseHit] = []
        for i in order:
            score = float(total[i])
            if score <= 0 or len(out) >= k:
                break
            sym = self.docs[int(i)]
            if keep is None or keep(sym):
                out.append(ProseHit(sym, score))
        return out


def prose_index(index: CodeIndex) -> ProseIndex:
    """The :class:`ProseIndex` of ``index``'s current version (built on first use, cached in the index)."""
    return index.derived("prose", lambda: ProseIndex.build(index))
