"""Corpora, splits, encoding, batches and perplexity (real text: the embedded stdlib corpus).

The tokenizers themselves are tested in tests/test_tokenizer.py.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from geodrift.errors import GeodriftError
from geodrift.lm.llama import LlamaLM
from geodrift.lm.text import (
    TokenBatches,
    encode_ids,
    eval_windows,
    lm_loss,
    load_corpus,
    perplexity,
    sample_batch,
    split_documents,
)
from geodrift.lm.tokenizer import byte_tokenizer


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


def test_max_chars_keeps_a_prefix_of_the_training_split_only(corpus) -> None:  # type: ignore[no-untyped-def]
    short = load_corpus(max_chars=1000)
    assert short.train == corpus.train[:1000] and short.valid == corpus.valid
    assert short.sha256 != corpus.sha256


def test_encode_ids_in_slices_equals_encoding_the_whole_text(corpus) -> None:  # type: ignore[no-untyped-def]
    tok = byte_tokenizer()
    text = corpus.train  # > 1 MB: encoded in more than one slice
    assert len(text) > 1 << 20
    ids = encode_ids(tok, text)
    assert ids.dtype == torch.int64 and ids.tolist() == list(text.encode("utf-8"))
    assert encode_ids(tok, "").numel() == 0


def test_token_batches_are_a_pure_function_of_seed_and_step() -> None:
    tokens = torch.arange(5000)
    a, b = TokenBatches(tokens, 4, 16, 7, torch.device("cpu")), TokenBatches(tokens, 4, 16, 7, torch.device("cpu"))
    assert torch.equal(a.batch(3), b.batch(3)) and a.batch(3).shape == (4, 17)
    assert not torch.equal(a.batch(3), a.batch(4))
    assert not torch.equal(a.batch(3), TokenBatches(tokens, 4, 16, 8, torch.device("cpu")).batch(3))
    assert torch.equal(a.batch(9), a.batch(9))  # no hidden state: any order, any resume point


def test_lm_loss_is_next_token_cross_entropy() -> None:
    model = LlamaLM(50, 16, 1, 2, 32, generator=torch.Generator().manual_seed(0))
    batch = torch.randint(0, 50, (3, 9), generator=torch.Generator().manual_seed(1))
    loss, stats = lm_loss(model, batch)
    logits = model(batch[:, :-1])
    want = torch.nn.functional.cross_entropy(logits.reshape(-1, 50), batch[:, 1:].reshape(-1))
    assert torch.allclose(loss, want) and not stats["loss"].requires_grad


def test_eval_windows_are_consecutive_and_overlap_by_one_token() -> None:
    w = eval_windows(torch.arange(100), 10)
    assert w.shape == (9, 11) and torch.equal(w[1, 0], w[0, -1]) and int(w[0, 0]) == 0
    assert eval_windows(torch.arange(100), 10, max_windows=3).shape == (3, 11)
    with pytest.raises(GeodriftError, match="fewer than one window"):
        eval_windows(torch.arange(5), 10)


def test_perplexity_of_an_untrained_model_is_near_vocab_size() -> None:
    model = LlamaLM(256, 16, 1, 2, 32, init_std=1e-4)
    windows = eval_windows(torch.randint(0, 256, (400,), generator=torch.Generator().manual_seed(0)), 32)
    out = perplexity(model, windows, [1] * 256)
    assert abs(out["ppl"] - 256) < 1.0
    assert abs(out["bits_per_byte"] - 8.0) < 0.01
    assert math.isclose(out["ppl"], math.exp(out["nll"]))
