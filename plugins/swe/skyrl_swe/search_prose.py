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
them. Built lazily on the first prose query and rebuilt when the index version changes; a rebuild re-tokenises
only files whose (path, content) it has not seen (token ids cached per file in a bounded process-wide LRU,
:data:`FILE_DOCS_CAPACITY` files), and the field tables are made from those ids with array operations.
"""

from __future__ import annotations

import bisect
import logging
import math
import re
import threading
from collections import OrderedDict
from itertools import chain, compress, islice
from typing import Any

import attrs

from .index import IDENT, CodeIndex, Symbol, code_tokens, ident_tokens

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


def _clear(flags: list[bool], first: int, last: int) -> None:
    """``flags[first..last] = False`` (inclusive, clipped to the list)."""
    last = min(last, len(flags) - 1)
    if last >= first:
        flags[first: last + 1] = [False] * (last + 1 - first)


def _documents(path: str, entry) -> list[tuple[int, str, str, str]]:
    """One file's documents as ``(symbol index or -1 for the module, name text, head text, body text)``."""
    lines = entry.data.decode("utf-8", "replace").splitlines()
    path_words = path.replace("/", " ").replace(".py", " ")
    symbols = entry.symbols
    outside = [True] * (len(lines) + 1)  # [1-based line]: not in a top-level definition nor the docstring
    top = [s for s in symbols if "." not in s.qualname]
    for s in top:
        _clear(outside, s.start, s.end)
    span = _docstring_span(lines, next((i + 1 for i, t in enumerate(lines) if t.strip()
                                        and not t.startswith("#")), 0))
    mod_doc = "\n".join(lines[span[0] - 1: span[1]][:DOC_LINES]) if span else ""
    if span:
        _clear(outside, span[0], span[1])
    mod_body = list(islice(compress(lines, islice(outside, 1, None)), BODY_LINES))
    mod_sigs = [lines[s.start - 1] for s in top if s.start <= len(lines)]
    out = [(-1, path_words, mod_doc, "\n".join(mod_body + mod_sigs))]
    func_quals = {s.qualname for s in symbols if s.kind != "class"}
    starts = [s.start for s in symbols]  # symbols are sorted by (start, -end): a class's members follow it
    for i, s in enumerate(symbols):
        parts = s.qualname.split(".")
        if any(".".join(parts[:k]) in func_quals for k in range(1, len(parts))):
            continue  # a nested function is read as part of its parent
        head_lines = lines[s.start - 1: s.header_end]
        doc = _docstring_span(lines, s.header_end + 1)
        doc_text = lines[doc[0] - 1: doc[1]][:DOC_LINES] if doc else []
        body_from = (doc[1] if doc else s.header_end) + 1
        if s.kind == "class":
            after = symbols[i + 1: bisect.bisect_right(starts, s.end)]
            members = [m for m in after if m.start > s.start and m.end <= s.end]
            stop = min(s.end, len(lines))
            own_rows = [True] * (stop + 1)  # [1-based line] of the class outside its members
            for m in members:
                _clear(own_rows, m.start, m.end)
            own = list(islice(compress(lines[body_from - 1: stop], islice(own_rows, body_from, None)), BODY_LINES))
            sigs = [lines[m.start - 1] for m in members if m.qualname.count(".") == s.qualname.count(".") + 1
                    and m.start <= len(lines)]
            body = own + sigs
        else:
            body = lines[body_from - 1: min(s.end, len(lines))][:BODY_LINES]
        out.append((i, f"{s.qualname} {s.qualname.replace('.', ' ')} {path_words}", "\n".join(head_lines + doc_text),
                    "\n".join(body)))
    return out


# -- token ids: one process-wide vocabulary, so a file's token ids can be cached by its content ------------------
class _Vocabulary:
    """token -> id for every prose token seen in the process, and identifier -> its tokens' ids. Ids are stable
    while this vocabulary lives: a build that finds it past :data:`VOCAB_CAPACITY` tokens or identifiers starts a
    fresh one and empties the file cache that refers to it."""

    def __init__(self) -> None:
        self.ids: dict[str, int] = {}
        self.tokens: list[str] = []
        self.ident_ids = _IdentIds(self)
        self.underscore = self.id("_")  # an empty field holds this one token (as it always has)

    def id(self, token: str) -> int:
        found = self.ids.get(token)
        if found is None:
            found = self.ids[token] = len(self.tokens)
            self.tokens.append(token)
        return found

    def add_text(self, text: str, flat: list[int]) -> int:
        """Append the ids of :func:`skyrl_swe.index.code_tokens` ``(text)`` to ``flat`` (``id("_")`` when it has
        none); return how many were appended."""
        before = len(flat)
        flat.extend(chain.from_iterable(map(self.ident_ids.__getitem__, IDENT.findall(text))))
        if len(flat) == before:
            flat.append(self.underscore)
        return len(flat) - before


class _IdentIds(dict):
    def __init__(self, vocab: _Vocabulary) -> None:
        super().__init__()
        self.vocab = vocab

    def __missing__(self, ident: str) -> tuple[int, ...]:
        ids = self[ident] = tuple(self.vocab.id(t) for t in ident_tokens(ident))
        return ids


@attrs.frozen
class _FileDocs:
    """One file's prose documents as token ids (``FIELDS`` order): cached by (path, SHA-1, its symbols)."""

    symbols: tuple[Symbol, ...]
    doc_symbols: tuple[int, ...]  # index into ``symbols``, -1 for the module document
    ids: tuple[Any, ...]  # per field: int32 [total tokens]
    lengths: tuple[Any, ...]  # per field: int64 [documents]


FIELDS = tuple(FIELD_WEIGHTS)
VOCAB_CAPACITY = 2_000_000
FILE_DOCS_CAPACITY = 20_000  # about 5 KB of ids per file: Django's 2761 files hold 14 MB
_VOCAB = _Vocabulary()
_FILE_DOCS: OrderedDict[tuple[str, str], _FileDocs] = OrderedDict()
_VOCAB_LOCK = threading.Lock()


def _file_docs(path: str, entry) -> _FileDocs:
    import numpy as np

    key = (path, entry.sha1)
    cached = _FILE_DOCS.get(key)
    if cached is not None and (cached.symbols is entry.symbols or cached.symbols == entry.symbols):
        _FILE_DOCS.move_to_end(key)
        return cached
    flat: list[list[int]] = [[] for _ in FIELDS]
    lengths: list[list[int]] = [[] for _ in FIELDS]
    add_text = _VOCAB.add_text
    docs = _documents(path, entry)
    for _sym, *texts in docs:
        for f, text in enumerate(texts):
            lengths[f].append(add_text(text, flat[f]))
    made = _FileDocs(symbols=entry.symbols, doc_symbols=tuple(d[0] for d in docs),
                     ids=tuple(np.array(f, dtype=np.int32) for f in flat),
                     lengths=tuple(np.array(n, dtype=np.int64) for n in lengths))
    _FILE_DOCS[key] = made
    while len(_FILE_DOCS) > FILE_DOCS_CAPACITY:
        _FILE_DOCS.popitem(last=False)
    return made


def _bm25_from_ids(ids, lengths, n_vocab: int):
    """A ``bm25s.BM25`` (Lucene variant, its default k1/b/dtypes) over documents given as one flat id array
    ``ids`` [total tokens] and ``lengths`` [documents], built with array operations instead of bm25s's
    per-document loop. The score matrix is bit-identical to ``BM25().index(...)`` on the same documents
    (``tests/test_prose_build.py``): idf ``ln(1 + (N - df + 0.5) / (df + 0.5))`` in float64 stored as float32,
    tf part ``tf / (k1 * (1 - b + b * |d| / avgdl) + tf)`` in float64 (Kamphuis et al., ECIR 2020)."""
    import bm25s
    import numpy as np

    retriever = bm25s.BM25()
    if retriever.method != "lucene" or retriever.idf_method != "lucene":
        raise RuntimeError(f"bm25s {bm25s.__version__} defaults to {retriever.method!r}, expected 'lucene'")
    n_docs = len(lengths)
    avg_len = lengths.mean()  # as bm25s: the float64 mean of the int lengths
    doc_of = np.repeat(np.arange(n_docs, dtype=np.int64), lengths)
    pairs, tf = np.unique(doc_of * n_vocab + ids, return_counts=True)  # sorted by (document, token)
    docs, toks = pairs // n_vocab, pairs % n_vocab
    df = np.bincount(toks, minlength=n_vocab)
    values, where = np.unique(df, return_inverse=True)  # a few hundred distinct document frequencies
    idf = np.array([math.log(1 + (n_docs - d + 0.5) / (d + 0.5)) if d else 0.0 for d in values.tolist()])[where]
    idf = idf.astype(retriever.dtype)
    k1, b = retriever.k1, retriever.b
    tf32 = tf.astype(retriever.dtype)
    scores = (idf[toks] * (tf32 / (k1 * ((1 - b) + b * lengths[docs] / avg_len) + tf32))).astype(retriever.dtype)
    order = np.argsort(toks, kind="stable")  # column-major (CSC), rows ascending within a column
    indptr = np.zeros(n_vocab + 1, dtype=np.int64)
    np.cumsum(df, out=indptr[1:])
    retriever.scores = {"data": scores[order], "indices": docs[order].astype(retriever.int_dtype),
                        "indptr": indptr, "num_docs": n_docs}
    retriever.nonoccurrence_array = None  # what bm25s's own build sets for the Lucene variant
    return retriever


class ProseIndex:
    """The fielded BM25 tables of one :class:`CodeIndex` version (build with :meth:`build`).

    ``docs`` [documents]; ``vocab`` token -> column shared by the three fields (a token absent from a field has
    an empty column there); ``retrievers`` field -> ``bm25s.BM25``."""

    def __init__(self, docs: list[Symbol], vocab: dict[str, int], retrievers: dict[str, Any]) -> None:
        import numpy as np

        self.docs = docs
        self.vocab = vocab
        self.retrievers = retrievers
        self.test_mask = np.array([0.0 if is_test_path(d.path) else 1.0 for d in docs], dtype="float32")

    @classmethod
    def build(cls, index: CodeIndex) -> "ProseIndex":
        """Documents of every file (tokens cached per file by content, so a rebuild after an edit re-reads only
        the edited files), then one BM25 per field. Seconds on Django 4.2.11: README "Measured"."""
        import numpy as np

        logging.getLogger("bm25s").setLevel(logging.WARNING)
        global _VOCAB
        docs: list[Symbol] = []
        parts: list[_FileDocs] = []
        with _VOCAB_LOCK:
            if max(len(_VOCAB.tokens), len(_VOCAB.ident_ids)) > VOCAB_CAPACITY:
                _VOCAB = _Vocabulary()
                _FILE_DOCS.clear()
            vocab_tokens = _VOCAB.tokens
            for path, entry in index.files.items():
                part = _file_docs(path, entry)
                parts.append(part)
                docs.extend(module_symbol(path, entry.n_lines) if i < 0 else part.symbols[i]
                            for i in part.doc_symbols)
            n_global = len(vocab_tokens)
            ids = [np.concatenate([p.ids[f] for p in parts]) if parts else np.zeros(0, np.int32)
                   for f in range(len(FIELDS))]
            present = np.zeros(n_global, dtype=bool)
            for field_ids in ids:
                present[field_ids] = True
            used = np.flatnonzero(present)
            vocab = {vocab_tokens[g]: n for n, g in enumerate(used.tolist())}
        column = np.cumsum(present) - 1  # process-wide id -> this index's dense column
        retrievers = {}
        for f, field in enumerate(FIELDS):
            lengths = np.concatenate([p.lengths[f] for p in parts]) if parts else np.zeros(0, np.int64)
            if len(lengths):
                retrievers[field] = _bm25_from_ids(column[ids[f]].astype(np.int64), lengths, len(used))
        return cls(docs, vocab, retrievers)

    def rank(self, query: str, k: int, include_tests: bool = False, keep=None) -> list[ProseHit]:
        """The ``k`` best documents for ``query`` (prose or code); ``keep(symbol) -> bool`` filters (scope,
        kind). Scores are the weighted sum of the field BM25 scores; zero-score documents are never returned."""
        import numpy as np

        q = [self.vocab[t] for t in dict.fromkeys(code_tokens(query)) if len(t) > 1 and t in self.vocab]
        if not q or not self.retrievers:
            return []
        total = None
        for field, retriever in self.retrievers.items():
            scores = retriever.get_scores(q) * FIELD_WEIGHTS[field]
            total = scores if total is None else total + scores
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
