"""The prose retriever's array-built BM25 tables equal bm25s's own per-document build on real code (inflection
0.5.1's sdist and this plugin's source), and a rebuild after an edit re-tokenises only the edited file."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import numpy as np
import pytest

from skyrl_swe import search_prose
from skyrl_swe.index import CodeIndex, code_tokens
from skyrl_swe.search_prose import FIELDS, ProseIndex, _documents

PLUGIN_SRC = Path(search_prose.__file__).resolve().parent
QUERIES = ["camelize underscore", "return the plural form of a word", "ProseIndex build fielded BM25",
           "parameterize a string for URLs", "refresh stats parse", "x", "_"]


def _equivalence():
    path = Path(__file__).resolve().parents[1] / "benchmarks" / "prose_equivalence.py"
    spec = importlib.util.spec_from_file_location("prose_equivalence", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def reference_tables(index: CodeIndex) -> dict[str, tuple[object, dict[str, int]]]:
    """Each field indexed the straightforward way: code_tokens per document, bm25s.BM25().index per field."""
    import bm25s

    corpora: dict[str, list[list[str]]] = {f: [] for f in FIELDS}
    for path, entry in index.files.items():
        for _sym, *texts in _documents(path, entry):
            for field, text in zip(FIELDS, texts):
                corpora[field].append(code_tokens(text) or ["_"])
    out = {}
    for field, corpus in corpora.items():
        vocab: dict[str, int] = {}
        ids = [[vocab.setdefault(t, len(vocab)) for t in doc] for doc in corpus]
        retriever = bm25s.BM25()
        retriever.index(bm25s.tokenization.Tokenized(ids=ids, vocab=vocab), show_progress=False)
        out[field] = (retriever, vocab)
    return out


def assert_same_tables(new: ProseIndex, reference) -> None:
    columns = _equivalence().columns
    for field, (retriever, vocab) in reference.items():
        want, got = columns(retriever, vocab), columns(new.retrievers[field], new.vocab)
        assert want.keys() == got.keys(), field
        for token, (docs, scores) in want.items():
            assert np.array_equal(got[token][0], docs) and np.array_equal(got[token][1], scores), (field, token)
            assert got[token][1].dtype == scores.dtype == np.float32


@pytest.mark.parametrize("which", ["inflection", "plugin"])
def test_array_build_equals_bm25s_index_on_real_code(which, project_src):
    index = CodeIndex(project_src if which == "inflection" else PLUGIN_SRC)
    index.refresh()
    new = ProseIndex.build(index)
    assert len(new.docs) == sum(len(_documents(p, e)) for p, e in index.files.items()) > 20
    assert_same_tables(new, reference_tables(index))
    if which == "inflection":
        top = new.rank("convert a string to camel case", 3)
        assert top[0].symbol.ref == "inflection/__init__.py:camelize" and top[0].score > top[1].score > 0
        assert new.rank("zzqx", 3) == [] and new.rank("", 3) == []


def test_rebuild_after_an_edit_tokenises_only_that_file(project_src, tmp_path, monkeypatch):
    root = tmp_path / "proj"
    shutil.copytree(project_src, root)
    index = CodeIndex(root)
    index.refresh()
    ProseIndex.build(index)
    made: list[str] = []
    real = search_prose._documents
    monkeypatch.setattr(search_prose, "_documents", lambda path, entry: made.append(path) or real(path, entry))
    target = root / "inflection" / "__init__.py"
    target.write_text(target.read_text() + '\n\ndef zebra_quagga(herd):\n    """Count the zebras in a herd."""\n'
                      '    return len(herd)\n')
    index.refresh()
    rebuilt = ProseIndex.build(index)
    assert made == ["inflection/__init__.py"]
    assert rebuilt.rank("count zebras in the herd", 1)[0].symbol.ref == "inflection/__init__.py:zebra_quagga"
    assert_same_tables(rebuilt, reference_tables(index))  # cached files and the fresh one agree with a cold build


def test_vocabulary_reset_keeps_answers(project_src, monkeypatch):
    index = CodeIndex(project_src)
    index.refresh()
    before = [(h.symbol.ref, h.score) for h in ProseIndex.build(index).rank(QUERIES[1], 10)]
    monkeypatch.setattr(search_prose, "VOCAB_CAPACITY", 10)  # forces a fresh vocabulary and file cache
    old_vocab = search_prose._VOCAB
    after = ProseIndex.build(index)
    assert search_prose._VOCAB is not old_vocab
    assert [(h.symbol.ref, h.score) for h in after.rank(QUERIES[1], 10)] == before and before
