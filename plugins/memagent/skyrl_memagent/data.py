"""RULER-HotpotQA long documents (Hsieh et al. 2024, arXiv 2404.06654, the ``qa_2`` task; as MemAgent trains on
it, Yu et al. 2025, arXiv 2507.02259) built from HotpotQA distractor rows, and the chunker that splits them.

Construction of one instance, for a question and a target length ``T`` in tokens of the policy's tokenizer:

1. the question's gold paragraphs (the titles in ``supporting_facts``) are always in the document;
2. distractor paragraphs are drawn in a seeded random order from the paragraph pool (every paragraph of every
   row of the bundled file except this question's gold ones: its own eight distractors and the other questions'
   paragraphs), each added while the document stays within ``T`` tokens;
3. when the pool runs out before ``T`` (the bundled 80 rows hold about 112k tokens of paragraphs), the drawing
   goes round the pool again in a fresh seeded order; ``repeated_paragraphs`` counts such repeats;
4. the paragraphs are shuffled with the same seed, numbered (``Document k: <title>``) and split into chunks of at
   most ``chunk_tokens`` tokens at sentence boundaries (a sentence longer than a chunk is split by tokens).

Token counts come from one batched tokenisation of each sentence (cached per tokenizer); a chunk's count is the
sum of its pieces, checked by encoding the chunk once. Sentences of HotpotQA start with their space, so the
pieces' ids concatenate to the document's ids and building a document costs time linear in its length
(``benchmarks/bench_long_inputs.py``).

The rows ship inside the package (``skyrl_memagent/data/hotpotqa``: 80 dev-set records, CC BY-SA 4.0 upstream,
MIT for the conversion; see its SOURCE.txt). ``data.path`` may point at another JSONL file in the same layout
(Hugging Face ``hotpot_qa/distractor``).
"""

from __future__ import annotations

import collections
import functools
import importlib.resources
import json
import logging
import random
import threading
from pathlib import Path
from typing import Any, Sequence

import attrs

from skyrl_core import DataSpec, Instance
from skyrl_core.errors import ConfigError

log = logging.getLogger(__name__)

BUNDLED_FILE = "hotpot_dev_distractor_80.jsonl"
# The bundled 80 rows: the first 60 train, the last 20 test; "all" is every row.
SPLITS = {"train": slice(0, 60), "test": slice(60, 80), "all": slice(0, None)}
DEFAULT_TOKENIZER = "smollm2-135m-instruct"
PARAGRAPH_SEPARATOR = "\n\n"


@attrs.define(frozen=True)
class Options:
    """Loader options (``tasks.N.data.options``), all validated.

    ``target_tokens``: document length in tokens (RULER-HotpotQA uses 8k, 28k in MemAgent's training, up to
    112k and more in its evaluation); ``chunk_tokens``: the most tokens of document text in one chunk (MemAgent:
    at most 4k); ``memory_tokens``: the cap on the memory the model writes (longer memories are cut to this and
    the model is told); ``tokenizer``: the policy's model name or HF directory, whose tokenizer measures all of
    these (set it to the config's ``model``); ``seed``: the distractor draw and shuffle; ``demonstration``
    (bool, default false): every context starts with a worked example of the call it asks for
    (:data:`skyrl_memagent.tasks.DEMONSTRATION`), for small policies that do not call tools unprompted.
    """

    target_tokens: int = 8192
    chunk_tokens: int = 2048
    memory_tokens: int = 256
    tokenizer: str = DEFAULT_TOKENIZER
    seed: int = 0
    demonstration: bool = False

    @classmethod
    def from_spec(cls, spec: DataSpec) -> "Options":
        fields = {f.name: f for f in attrs.fields(cls)}
        unknown = sorted(set(spec.options) - set(fields))
        if unknown:
            raise ConfigError(f"memagent data.options: unknown key(s) {', '.join(unknown)}; valid: "
                              f"{', '.join(fields)}")
        values: dict[str, Any] = {}
        for key, value in spec.options.items():
            if key == "tokenizer":
                if not isinstance(value, str) or not value:
                    raise ConfigError(f"memagent data.options.tokenizer must be a model name or directory, got {value!r}")
            elif key == "demonstration":
                if not isinstance(value, bool):
                    raise ConfigError(f"memagent data.options.demonstration must be true or false, got {value!r}")
            elif isinstance(value, bool) or not isinstance(value, int):
                raise ConfigError(f"memagent data.options.{key} must be an integer, got {value!r}")
            values[key] = value
        opts = cls(**values)
        if opts.chunk_tokens < 64:
            raise ConfigError(f"memagent data.options.chunk_tokens must be at least 64, got {opts.chunk_tokens}")
        if opts.memory_tokens < 1:
            raise ConfigError(f"memagent data.options.memory_tokens must be at least 1, got {opts.memory_tokens}")
        if opts.target_tokens < opts.chunk_tokens:
            raise ConfigError(f"memagent data.options.target_tokens ({opts.target_tokens}) must be at least "
                              f"chunk_tokens ({opts.chunk_tokens})")
        return opts


@attrs.define(frozen=True)
class Paragraph:
    """One HotpotQA paragraph: ``title``, ``sentences`` (text, each with its leading space as in the data) and
    ``row`` (the index of the row it came from)."""

    title: str
    sentences: tuple[str, ...]
    row: int


def read_rows(path: str | Path | None = None) -> list[dict]:
    """The HotpotQA rows of a JSONL file (default: the bundled 80). Raises ConfigError naming the file and line
    of a row that is not HotpotQA-shaped."""
    if path is None:
        source = importlib.resources.files("skyrl_memagent") / "data" / "hotpotqa" / BUNDLED_FILE
        text, where = source.read_text(encoding="utf-8"), f"bundled {BUNDLED_FILE}"
    else:
        p = Path(path).expanduser()
        if p.is_dir():
            p = p / BUNDLED_FILE
        if not p.is_file():
            raise ConfigError(f"memagent data.path {str(path)!r}: no such file (a HotpotQA distractor JSONL file)")
        text, where = p.read_text(encoding="utf-8"), str(p)
    rows = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            ctx = row["context"]
            if not (isinstance(row["question"], str) and isinstance(row["answer"], str)
                    and len(ctx["title"]) == len(ctx["sentences"]) and row["supporting_facts"]["title"]):
                raise ValueError("fields have the wrong types")
        except (ValueError, KeyError, TypeError) as exc:
            raise ConfigError(f"{where} line {n}: not a HotpotQA distractor row (needs question, answer, "
                              f"supporting_facts.title, context.title/sentences): {exc}") from None
        rows.append(row)
    return rows


def paragraphs_of(rows: Sequence[dict]) -> list[Paragraph]:
    """Every paragraph of ``rows``, once per title (a title seen twice keeps its first text)."""
    out: dict[str, Paragraph] = {}
    for i, row in enumerate(rows):
        for title, sents in zip(row["context"]["title"], row["context"]["sentences"]):
            if title not in out:
                out[title] = Paragraph(title=title, sentences=tuple(_sentence(s, k) for k, s in enumerate(sents)),
                                       row=i)
    return list(out.values())


def _sentence(text: str, k: int) -> str:
    # the first sentence follows the header line; later ones must start with a space so pieces concatenate
    text = text.rstrip("\n")
    return text if k == 0 or text.startswith((" ", "\n")) else " " + text


class TokenCounter:
    """Token counts of text pieces under one tokenizer, cached (each distinct piece is tokenised once).

    ``tokenizer``: a transformers tokenizer. Counts exclude special tokens."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self._cache: dict[str, int] = {}

    def counts(self, pieces: Sequence[str]) -> list[int]:
        """Token counts [len(pieces)]; missing pieces are tokenised in one batch."""
        missing = list(dict.fromkeys(p for p in pieces if p not in self._cache))
        if missing:
            ids = self.tokenizer(missing, add_special_tokens=False)["input_ids"]
            self._cache.update(zip(missing, (len(x) for x in ids)))
        return [self._cache[p] for p in pieces]

    def count(self, text: str) -> int:
        return len(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def separator_tokens(self) -> int:
        """Tokens the paragraph separator adds between two paragraphs (in context it may tokenise differently
        from alone: SmolLM2 writes a lone ``\\n\\n`` as one token, two between sentences)."""
        if "_sep" not in self.__dict__:
            a, b = "End.", header(1, "T")
            self._sep = self.count(a + PARAGRAPH_SEPARATOR + b) - self.count(a) - self.count(b)
        return self._sep


def header(number: int, title: str) -> str:
    return f"Document {number}: {title}\n"


def paragraph_pieces(number: int, para: Paragraph) -> list[str]:
    """A paragraph as the pieces chunks are cut between: the header with the first sentence, then each later
    sentence. Joined they are the paragraph's text."""
    first = header(number, para.title) + (para.sentences[0] if para.sentences else "")
    return [first, *para.sentences[1:]]


def chunk_pieces(pieces: Sequence[str], counts: Sequence[int], chunk_tokens: int, counter: TokenCounter,
                 breaks: Sequence[bool]) -> list[str]:
    """Greedy chunking: consecutive pieces go into one chunk while their token count stays within
    ``chunk_tokens``; ``breaks[i]`` puts the paragraph separator before piece ``i``. A piece longer than a chunk
    is cut into token slices of ``chunk_tokens``. Each finished chunk is encoded once to check its count (BPE
    merges across a piece boundary can change it); an over-long chunk gives back its last piece.
    Returns the chunk texts, each of at most ``chunk_tokens`` tokens. Time linear in the total length."""
    sep = counter.separator_tokens()
    chunks: list[str] = []
    cur: list[str] = []
    cur_n = 0
    queue = list(zip(pieces, counts, breaks))
    queue.reverse()
    while queue or cur:
        if not queue:  # the last chunk: its check may give pieces back to the queue
            _close(chunks, cur, counter, chunk_tokens, queue)
            cur, cur_n = [], 0
            continue
        piece, n, brk = queue.pop()
        if n > chunk_tokens:
            if cur:
                queue.append((piece, n, brk))  # before the pieces a check may give back, which come first
                _close(chunks, cur, counter, chunk_tokens, queue)
                cur, cur_n = [], 0
                continue
            ids = counter.tokenizer(piece, add_special_tokens=False)["input_ids"]
            chunks.extend(counter.tokenizer.decode(ids[i:i + chunk_tokens]) for i in range(0, len(ids), chunk_tokens))
            continue
        glue = PARAGRAPH_SEPARATOR if brk and cur else ""
        extra = n + (sep if glue else 0)
        if cur and cur_n + extra > chunk_tokens:
            queue.append((piece, n, brk))
            _close(chunks, cur, counter, chunk_tokens, queue)
            cur, cur_n = [], 0
            continue
        cur.append(glue + piece)
        cur_n += extra
    return chunks


def _close(chunks: list[str], cur: list[str], counter: TokenCounter, limit: int, queue: list) -> None:
    # a chunk that starts mid-paragraph starts with its sentence's space: dropped
    text = "".join(cur).lstrip()
    while len(cur) > 1 and counter.count(text) > limit:
        last = cur.pop()
        brk = last.startswith(PARAGRAPH_SEPARATOR)
        body = last[len(PARAGRAPH_SEPARATOR):] if brk else last
        queue.append((body, counter.counts([body])[0], brk))
        text = "".join(cur).lstrip()
    chunks.append(text)


@attrs.define
class Document:
    """A built document: ``paragraphs`` in order, ``chunks`` (texts of at most ``chunk_tokens`` tokens),
    ``tokens`` (document tokens: paragraphs plus separators) and ``repeated_paragraphs``."""

    paragraphs: list[Paragraph]
    chunks: list[str]
    tokens: int
    repeated_paragraphs: int = 0


def build_document(gold: Sequence[Paragraph], pool: Sequence[Paragraph], target_tokens: int, chunk_tokens: int,
                   counter: TokenCounter, rng: random.Random) -> Document:
    """Gold paragraphs plus seeded distractors from ``pool`` up to ``target_tokens``, shuffled and chunked.

    Raises ConfigError when the gold paragraphs alone exceed ``target_tokens`` or the pool is empty and more
    text is needed."""
    sep = counter.separator_tokens()

    def size(p: Paragraph) -> int:
        # numbered headers differ by a digit or two; count with a 3-digit number, at least as long as most
        return sum(counter.counts(paragraph_pieces(100, p))) + sep

    chosen = list(gold)
    total = sum(size(p) for p in chosen)
    if total > target_tokens:
        raise ConfigError(f"the gold paragraphs alone are {total} tokens, more than target_tokens={target_tokens}")
    repeats, rounds, smallest = 0, 0, min((size(p) for p in pool), default=None)
    while smallest is not None and total + smallest <= target_tokens:
        order = list(pool)
        rng.shuffle(order)
        for p in order:
            n = size(p)
            if total + n <= target_tokens:
                chosen.append(p)
                total += n
                repeats += rounds > 0
        rounds += 1
    rng.shuffle(chosen)
    pieces: list[str] = []
    breaks: list[bool] = []
    for k, p in enumerate(chosen, 1):
        ps = paragraph_pieces(k, p)
        pieces.extend(ps)
        breaks.extend([True] + [False] * (len(ps) - 1))
    counts = counter.counts(pieces)
    chunks = chunk_pieces(pieces, counts, chunk_tokens, counter, breaks)
    tokens = sum(counts) + sep * (len(chosen) - 1)
    return Document(paragraphs=chosen, chunks=chunks, tokens=tokens, repeated_paragraphs=repeats)


@functools.lru_cache(maxsize=4)
def _tokenizer(name: str):
    from skyrl_core.default_plugins.engines.models import load_tokenizer

    return load_tokenizer(name)


@functools.lru_cache(maxsize=4)
def _counter(name: str) -> TokenCounter:
    return TokenCounter(_tokenizer(name))


def gold_sentences(row: dict) -> list[str]:
    """The supporting-fact sentences of a row (stripped), in the order ``supporting_facts`` lists them."""
    by_title = dict(zip(row["context"]["title"], row["context"]["sentences"]))
    out = []
    for title, k in zip(row["supporting_facts"]["title"], row["supporting_facts"]["sent_id"]):
        sents = by_title.get(title, [])
        if 0 <= k < len(sents):
            out.append(sents[k].strip())
    return out


def load_ruler_hotpotqa(spec: DataSpec) -> list[Instance]:
    """Instances of the ``memagent_hotpotqa`` task: one per row of ``spec.split`` (``train`` rows 0-59,
    ``test`` rows 60-79, ``all``; of ``spec.path`` when given, where every row is one split).

    Loading is cheap: an instance's document is built by :func:`ensure_document` when it is first rolled out
    (the instruction builder calls it in the init stage), so ``data.limit: 5`` builds five documents.
    Instance data: ``question``, ``answer``, ``type``, ``row``, ``gold_titles``, ``gold_sentences`` and the
    options ``target_tokens``, ``chunk_tokens``, ``memory_tokens``, ``tokenizer``, ``seed``, ``demonstration``,
    ``source`` (the rows file, None for the bundled one). Raises ConfigError for a bad split, path or option."""
    opts = Options.from_spec(spec)
    rows = _rows(spec.path or None)
    if spec.path:
        selected = list(enumerate(rows))
    else:
        if spec.split not in SPLITS:
            raise ConfigError(f"memagent data.split {spec.split!r} is not one of {', '.join(SPLITS)}")
        selected = [(i, rows[i]) for i in range(len(rows))[SPLITS[spec.split]]]
    return [Instance(id=str(row["id"]), data={
        "question": row["question"], "answer": row["answer"], "type": row.get("type"), "row": i,
        "gold_titles": list(dict.fromkeys(row["supporting_facts"]["title"])), "gold_sentences": gold_sentences(row),
        "target_tokens": opts.target_tokens, "chunk_tokens": opts.chunk_tokens, "memory_tokens": opts.memory_tokens,
        "tokenizer": opts.tokenizer, "seed": opts.seed, "source": spec.path or None,
        "demonstration": opts.demonstration,
    }) for i, row in selected]


@functools.lru_cache(maxsize=8)
def _rows(source: str | None) -> tuple[dict, ...]:
    return tuple(read_rows(source))


@functools.lru_cache(maxsize=8)
def _pool(source: str | None) -> tuple[Paragraph, ...]:
    return tuple(paragraphs_of(_rows(source)))


_build_lock = threading.Lock()
_documents: "collections.OrderedDict[tuple, Document]" = collections.OrderedDict()
MAX_CACHED_DOCUMENTS = 256


def document_key(data: dict) -> tuple:
    return (data.get("source"), data["row"], data["target_tokens"], data["chunk_tokens"], data["tokenizer"],
            data["seed"])


def ensure_document(instance: Instance) -> Document:
    """The instance's document, built once (thread-safe) and kept in a cache of the last
    ``MAX_CACHED_DOCUMENTS`` (instance data stays small: it is hashed and logged). Seeded by (``seed``, question
    id, ``target_tokens``): every rollout of an instance reads the same document."""
    data = instance.data
    key = document_key(data)
    with _build_lock:
        doc = _documents.get(key)
        if doc is not None:
            _documents.move_to_end(key)
            return doc
        source = data.get("source")
        row = _rows(source)[data["row"]]
        titles = data["gold_titles"]
        by_title = {p.title: p for p in paragraphs_of([row])}
        gold = [by_title[t] for t in titles if t in by_title]
        pool = [p for p in _pool(source) if p.title not in titles]
        counter = _counter(data["tokenizer"])
        rng = random.Random(f"{data['seed']}:{row['id']}:{data['target_tokens']}")
        doc = build_document(gold, pool, data["target_tokens"], data["chunk_tokens"], counter, rng)
        if doc.repeated_paragraphs:
            log.info("memagent: %s at %d tokens repeats %d distractor paragraphs (the pool is smaller)",
                     row["id"], data["target_tokens"], doc.repeated_paragraphs)
        _documents[key] = doc
        while len(_documents) > MAX_CACHED_DOCUMENTS:
            _documents.popitem(last=False)
        return doc
