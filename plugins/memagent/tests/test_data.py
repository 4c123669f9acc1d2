"""RULER-HotpotQA construction on the bundled HotpotQA rows with the real SmolLM2 tokenizer: documents padded to
their target, chunks within the token limit, every gold sentence whole in some chunk, seeded and reproducible."""

from __future__ import annotations

import json
import random

import pytest

from skyrl_core import DataSpec
from skyrl_core.errors import ConfigError
from skyrl_memagent.data import (PARAGRAPH_SEPARATOR, Paragraph, TokenCounter, build_document, chunk_pieces,
                                 ensure_document, load_ruler_hotpotqa, paragraphs_of)
from skyrl_memagent.tasks import memagent_hotpotqa_task


def load(split="test", limit=None, **options):
    """(instance, document) pairs of the task's instances, as a rollout sees them."""
    instances = memagent_hotpotqa_task.select(DataSpec(split=split, limit=limit, options=options))
    return [(inst, ensure_document(inst)) for inst in instances]


@pytest.mark.parametrize("target,chunk", [(8192, 2048), (28672, 4096)])
def test_chunks_respect_the_token_limit_and_keep_every_gold_sentence(tokenizer, target, chunk):
    assert len(memagent_hotpotqa_task.select(DataSpec(split="test"))) == 20  # rows 60-79
    for inst, doc in load(limit=6, target_tokens=target, chunk_tokens=chunk):
        d = inst.data
        counts = [len(tokenizer(c, add_special_tokens=False)["input_ids"]) for c in doc.chunks]
        assert max(counts) <= chunk, (inst.id, counts)
        assert len(doc.chunks) >= target // chunk
        # padded to the target: within one paragraph (HotpotQA paragraphs are < 500 tokens) below it, never above
        assert target - 500 <= doc.tokens <= target, doc.tokens
        assert abs(sum(counts) - doc.tokens) <= 2 * len(counts)  # the chunks are the document
        assert d["gold_sentences"], inst.id
        for sentence in d["gold_sentences"]:
            assert any(sentence in c for c in doc.chunks), (inst.id, sentence)
        for title in d["gold_titles"]:
            assert sum(f": {title}\n" in c for c in doc.chunks) == 1  # each gold paragraph once


def test_documents_are_seeded_and_distractors_come_from_other_questions():
    a = load(limit=3, target_tokens=8192, chunk_tokens=2048)
    b = load(limit=3, target_tokens=8192, chunk_tokens=2048)
    c = load(limit=3, target_tokens=8192, chunk_tokens=2048, seed=1)
    assert [d.chunks for _, d in a] == [d.chunks for _, d in b]
    assert [d.chunks for _, d in a] != [d.chunks for _, d in c]
    text = "\n\n".join(a[0][1].chunks)
    headers = [line for line in text.split("\n") if line.startswith("Document ")]
    assert len(headers) > 20  # 8k tokens of ~100-token paragraphs, far more than the row's own 10
    numbers = [int(h.split(":")[0].split()[1]) for h in headers]
    assert numbers == list(range(1, len(numbers) + 1))


def test_a_document_longer_than_the_pool_repeats_distractors_and_says_so():
    [(_, doc)] = load(limit=1, target_tokens=131072, chunk_tokens=4096)
    assert doc.repeated_paragraphs > 0
    assert 131072 - 500 <= doc.tokens <= 131072


def test_a_sentence_longer_than_a_chunk_is_cut_by_tokens(tokenizer):
    counter = TokenCounter(tokenizer)
    long = " ".join(f"word{i}" for i in range(400))
    pieces = ["Document 1: Long\n" + long, " A short sentence."]
    chunks = chunk_pieces(pieces, counter.counts(pieces), 128, counter, [True, False])
    assert all(counter.count(c) <= 130 for c in chunks)  # decoding a token slice may re-encode one off
    assert len(chunks) >= 5 and chunks[-1].strip() == "A short sentence."


def test_gold_paragraphs_longer_than_the_target_are_an_error(tokenizer):
    counter = TokenCounter(tokenizer)
    gold = [Paragraph(title="Big", sentences=tuple(f" Sentence {i} is here." for i in range(200)), row=0)]
    with pytest.raises(ConfigError, match="gold paragraphs alone"):
        build_document(gold, [], 256, 128, counter, random.Random(0))


@pytest.mark.parametrize("options,message", [
    ({"chunk_tokens": 10}, "chunk_tokens must be at least 64"),
    ({"target_tokens": 1000, "chunk_tokens": 2048}, "must be at least chunk_tokens"),
    ({"chunk_size": 100}, "unknown key.*chunk_size.*valid: target_tokens"),
    ({"memory_tokens": "lots"}, "memory_tokens must be an integer"),
    ({"tokenizer": ""}, "tokenizer must be"),
])
def test_bad_options_name_the_key_and_what_is_valid(options, message):
    with pytest.raises(ConfigError, match=message):
        load(limit=1, **options)


def test_bad_split_and_bad_rows_name_the_culprit(tmp_path):
    with pytest.raises(ConfigError, match="split 'dev' is not one of train, test, all"):
        load(split="dev")
    bad = tmp_path / "rows.jsonl"
    bad.write_text(json.dumps({"question": "q", "answer": "a"}) + "\n")
    with pytest.raises(ConfigError, match=r"rows.jsonl line 1: not a HotpotQA distractor row"):
        load_ruler_hotpotqa(DataSpec(path=str(bad)))
    with pytest.raises(ConfigError, match="no such file"):
        load_ruler_hotpotqa(DataSpec(path=str(tmp_path / "missing.jsonl")))


def test_a_custom_rows_file_is_one_split(tmp_path, rows):
    path = tmp_path / "two.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows[:2]))
    instances = load_ruler_hotpotqa(DataSpec(path=str(path), options={"target_tokens": 2048, "chunk_tokens": 1024}))
    assert [i.id for i in instances] == [rows[0]["id"], rows[1]["id"]]
    docs = [ensure_document(i) for i in instances]
    # the pool is this file's 20 paragraphs: every title in the documents comes from these two rows
    titles = {t for r in rows[:2] for t in r["context"]["title"]}
    for doc in docs:
        assert {p.title for p in doc.paragraphs} <= titles


def test_paragraph_pieces_concatenate_to_the_paragraph(rows, tokenizer):
    paras = paragraphs_of(rows)
    assert len(paras) == 800  # every title of the 80 rows is distinct
    counter = TokenCounter(tokenizer)
    from skyrl_memagent.data import paragraph_pieces

    p = paras[5]
    pieces = paragraph_pieces(7, p)
    assert "".join(pieces).startswith(f"Document 7: {p.title}\n")
    whole = counter.count("".join(pieces) + PARAGRAPH_SEPARATOR + "".join(paragraph_pieces(8, paras[6])))
    parts = sum(counter.counts(pieces)) + counter.count(PARAGRAPH_SEPARATOR) + sum(counter.counts(paragraph_pieces(8, paras[6])))
    # summed piece counts are the document's within a token per boundary (the chunker checks each chunk exactly)
    assert abs(whole - parts) <= 2
