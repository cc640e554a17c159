"""Corpora, the local byte-level BPE, batches and perplexity (real text: the embedded stdlib corpus)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from geodrift.errors import GeodriftError
from geodrift.sim.llama import LlamaLM
from geodrift.sim.text import (
    BPETokenizer,
    ByteTokenizer,
    eval_windows,
    load_corpus,
    perplexity,
    sample_batch,
    split_documents,
    tokenizer_from_dict,
)


@pytest.fixture(scope="module")
def corpus():  # type: ignore[no-untyped-def]
    return load_corpus()


def test_default_corpus_is_english_text_and_deterministic(corpus) -> None:  # type: ignore[no-untyped-def]
    again = load_corpus()
    assert again.sha256 == corpus.sha256 and again.train == corpus.train
    assert len(corpus.train) > 500_000 and len(corpus.valid) > 50_000
    words = corpus.train.lower().split()
    assert words.count("the") > 0.02 * len(words)  # English prose


def test_held_out_documents_are_not_in_the_training_split(corpus) -> None:  # type: ignore[no-untyped-def]
    train_docs = set(corpus.train.split("\n\n"))
    valid_docs = [d for d in corpus.valid.split("\n\n") if len(d) > 200]
    assert valid_docs
    assert sum(d in train_docs for d in valid_docs) == 0


def test_split_is_every_tenth_document() -> None:
    docs = [f"doc {i}" for i in range(25)]
    train, valid = split_documents(docs)
    assert valid.split("\n\n") == ["doc 9", "doc 19"]
    assert len(train.split("\n\n")) == 23


def test_bpe_round_trips_and_compresses_real_text(corpus) -> None:  # type: ignore[no-untyped-def]
    text = corpus.train[:200_000]
    tok = BPETokenizer.train(text, 600)
    assert tok.vocab_size == 600
    held = corpus.valid[:20_000]
    ids = tok.encode(held)
    assert tok.decode(ids) == held  # lossless on unseen text (byte fallback)
    assert len(ids) < 0.6 * len(held.encode("utf-8"))
    assert max(ids) < 600 and min(ids) >= 0


def test_bpe_training_is_deterministic_and_serialisable() -> None:
    text = "low lower lowest newer newest wider " * 50 + "ünïcödé _under_score 12345 "
    a, b = BPETokenizer.train(text, 300), BPETokenizer.train(text, 300)
    assert a.merges == b.merges
    c = tokenizer_from_dict(a.to_dict())
    assert c.encode(text) == a.encode(text)
    assert a.decode(a.encode(text)) == text


def test_bpe_first_merge_is_the_most_frequent_pair() -> None:
    tok = BPETokenizer.train("ab ab ab ab cd", 257)
    assert tok.merges == [(ord("a"), ord("b"))]


def test_byte_tokenizer_is_utf8() -> None:
    tok = ByteTokenizer()
    assert tok.encode("é") == [0xC3, 0xA9] and tok.decode([0xC3, 0xA9]) == "é"


def test_wikitext_layout_is_recognised(tmp_path: Path) -> None:
    (tmp_path / "wiki.train.raw").write_text(" = Title = \n\n The train text . \n", encoding="utf-8")
    (tmp_path / "wiki.valid.raw").write_text(" = Other = \n\n The valid text . \n", encoding="utf-8")
    (tmp_path / "wiki.test.raw").write_text(" = Test = \n", encoding="utf-8")
    c = load_corpus(tmp_path)
    assert c.name == "wikitext" and "train text" in c.train and "valid text" in c.valid


def test_text_file_corpus_and_its_errors(tmp_path: Path) -> None:
    f = tmp_path / "t.txt"
    f.write_text("\n\n".join(f"paragraph number {i} of the text" for i in range(30)), encoding="utf-8")
    c = load_corpus(f)
    assert c.name == "text" and "paragraph number 9 " in c.valid and "paragraph number 9 " not in c.train
    with pytest.raises(GeodriftError, match="no such file"):
        load_corpus(tmp_path / "missing.txt")
    short = tmp_path / "short.txt"
    short.write_text("one\n\ntwo", encoding="utf-8")
    with pytest.raises(GeodriftError, match="paragraphs"):
        load_corpus(short)
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"\xff\xfe\x00bad")
    with pytest.raises(GeodriftError, match="UTF-8"):
        load_corpus(bad)


def test_batches_are_windows_of_the_stream_and_seeded() -> None:
    tokens = torch.arange(1000)
    a = sample_batch(tokens, 4, 16, torch.Generator().manual_seed(1))
    b = sample_batch(tokens, 4, 16, torch.Generator().manual_seed(1))
    assert a.shape == (4, 17) and torch.equal(a, b)
    assert torch.equal(a[:, 1:] - a[:, :-1], torch.ones(4, 16, dtype=torch.long))
    with pytest.raises(GeodriftError, match="fewer than one window"):
        sample_batch(torch.arange(10), 2, 16, torch.Generator())


def test_perplexity_of_an_untrained_model_is_near_vocab_size() -> None:
    model = LlamaLM(256, 16, 1, 2, 32, init_std=1e-4)
    windows = eval_windows(torch.randint(0, 256, (400,), generator=torch.Generator().manual_seed(0)), 32)
    out = perplexity(model, windows, [1] * 256)
    assert abs(out["ppl"] - 256) < 1.0
    assert abs(out["bits_per_byte"] - 8.0) < 0.01
    assert math.isclose(out["ppl"], math.exp(out["nll"]))
