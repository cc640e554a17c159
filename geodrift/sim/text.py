"""Text data for the transformer simulator: corpora, a local byte-level BPE, batches, perplexity.

Corpora:
- the default (``path=None``) exists offline on every install: English prose from the Python
  standard library that runs this code - the pydoc help topics (``pydoc_data.topics``) plus the
  docstrings (>= 200 characters) of the standard library's top-level modules and a fixed list of
  packages, read with ``ast`` from the source files (nothing is imported). Documents are their
  blank-line separated paragraphs; exact duplicates are dropped; documents keep a fixed order, so the corpus is a deterministic function of the Python
  version (its sha256 is recorded with every run).
- ``path`` = a WikiText folder (``wiki.train.raw``/``wiki.valid.raw``/``wiki.test.raw`` or the
  ``.tokens`` variant): its official train and validation splits.
- ``path`` = a text file or a folder of ``*.txt`` files: documents are the blank-line separated
  paragraphs (in sorted file order).

Held-out split (except WikiText, which has its own): document ``i`` goes to validation when
``i % 10 == 9`` - deterministic, interleaved, and no document is in both.

Tokenizers: ``bytes`` (256 ids, one per UTF-8 byte) or ``bpe``, a byte-level BPE trained here on
the training split only (GPT-2-style pre-tokenisation with the standard ``re`` module; merges
chosen by count, ties broken by the smaller pair ids; deterministic; learnt from the first
``BPE_TRAIN_CHARS`` characters). No external tokenizer library is needed. Text is encoded in ~1 MB
slices cut at line starts, so WikiText-103 fits in memory as an int32 tensor.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import heapq
import math
import re
import sysconfig
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import torch

from geodrift.errors import GeodriftError

HOLDOUT_EVERY = 10
# The BPE learns its merges from at most this many characters of the training split (the start).
BPE_TRAIN_CHARS = 20_000_000
_DOC_PACKAGES = ("asyncio", "collections", "concurrent", "email", "html", "http", "importlib", "json",
                 "logging", "multiprocessing", "unittest", "urllib", "xml", "xmlrpc", "zoneinfo")
# GPT-2's pre-tokenisation with unicode classes that the standard ``re`` supports.
_PRETOKEN = re.compile(r"""'s|'t|'re|'ve|'m|'ll|'d| ?[^\W\d_]+| ?\d+| ?(?:[^\s\w]|_)+|\s+(?!\S)|\s+""")


def encode_pretokenized(text: str, encode_word: Callable[[str], list[int]]) -> list[int]:
    """Split ``text`` with the GPT-2 pre-tokenizer pattern and encode each piece with ``encode_word``."""
    out: list[int] = []
    for word in _PRETOKEN.findall(text):
        out.extend(encode_word(word))
    return out


@dataclass(frozen=True)
class Corpus:
    """A training and a held-out text, with where they came from.

    Attributes:
        name: ``"stdlib-docs"``, ``"wikitext"`` or ``"text"``.
        source: a human-readable origin (path or Python version).
        train, valid: the two splits.
        sha256: hash of ``train + "\\0" + valid`` (recorded with every run).
    """

    name: str
    source: str
    train: str
    valid: str
    sha256: str


def _make_corpus(name: str, source: str, train: str, valid: str) -> Corpus:
    digest = hashlib.sha256((train + "\0" + valid).encode("utf-8")).hexdigest()
    return Corpus(name, source, train, valid, digest)


def split_documents(docs: list[str]) -> tuple[str, str]:
    """Deterministic held-out split: document ``i`` is held out when ``i % 10 == 9``.

    Returns:
        ``(train_text, valid_text)``, documents joined by blank lines.
    """
    train = [d for i, d in enumerate(docs) if i % HOLDOUT_EVERY != HOLDOUT_EVERY - 1]
    valid = [d for i, d in enumerate(docs) if i % HOLDOUT_EVERY == HOLDOUT_EVERY - 1]
    return "\n\n".join(train), "\n\n".join(valid)


def _dedupe(docs: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(d.strip() for d in docs if d.strip()))


def stdlib_documents() -> list[str]:
    """The default corpus's documents: pydoc topics, then stdlib docstrings (fixed order)."""
    return list(_stdlib_documents())


@functools.lru_cache(maxsize=1)
def _stdlib_documents() -> tuple[str, ...]:
    # Parsed once per process (about 2 s); the result is immutable.
    docs: list[str] = []
    try:
        from pydoc_data.topics import topics  # type: ignore[import-not-found]

        docs.extend(topics[key] for key in sorted(topics))
    except ImportError:  # pragma: no cover - some minimal Pythons strip pydoc_data
        pass
    root = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(root.glob("*.py"))
    for package in _DOC_PACKAGES:
        files.extend(sorted((root / package).rglob("*.py")))
    for path in files:
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                doc = ast.get_docstring(node)
                if doc and len(doc) >= 200:
                    docs.append(doc)
    # Paragraphs are the documents (as for text files): a paragraph shared by two docstrings can then
    # never sit in both splits.
    docs = _dedupe(p for d in docs for p in re.split(r"\n\s*\n", d))
    if len(docs) < 20:
        raise GeodriftError(
            "default corpus: the Python standard library sources and pydoc topics are missing on this "
            "install; pass --corpus PATH (a text file, a folder of .txt files or a WikiText folder)"
        )
    return tuple(docs)


def load_corpus(path: str | Path | None = None, max_chars: int | None = None) -> Corpus:
    """Load the default corpus (``path=None``), a WikiText folder, a text file or a folder of .txt.

    Args:
        path: see the module docstring.
        max_chars: keep at most this many characters of the training split (prefix; None = all).

    Raises:
        GeodriftError: when the path is missing, empty, not UTF-8, or a folder with no text in it.

    Example:
        >>> c = load_corpus()  # doctest: +SKIP
        >>> len(c.train) > 10 * len(c.valid) / 2
        True
    """
    if path is None:
        import sys

        train, valid = split_documents(stdlib_documents())
        corpus = _make_corpus("stdlib-docs", f"python {sys.version.split()[0]} stdlib docstrings + pydoc topics",
                              train, valid)
    else:
        corpus = _load_path(Path(path))
    if max_chars is not None and len(corpus.train) > max_chars:
        corpus = _make_corpus(corpus.name, corpus.source, corpus.train[:max_chars], corpus.valid)
    return corpus


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        raise GeodriftError(f"--corpus {path}: not UTF-8 text ({error.reason}); convert it to UTF-8") from None
    except OSError as error:
        raise GeodriftError(f"--corpus {path}: cannot read ({error.strerror})") from None


def _load_path(path: Path) -> Corpus:
    if not path.exists():
        raise GeodriftError(f"--corpus {path}: no such file or folder; pass a text file, a folder of .txt "
                            "files or a WikiText folder (wiki.train.raw, wiki.valid.raw)")
    if path.is_dir():
        for suffix in ("raw", "tokens"):
            train_file, valid_file = path / f"wiki.train.{suffix}", path / f"wiki.valid.{suffix}"
            if train_file.is_file() and valid_file.is_file():
                return _make_corpus("wikitext", str(path), _read(train_file), _read(valid_file))
        files = sorted(path.rglob("*.txt"))
        if not files:
            raise GeodriftError(f"--corpus {path}: folder has no *.txt files and no wiki.train.raw/"
                                "wiki.valid.raw; put text files in it")
        text = "\n\n".join(_read(f) for f in files)
    else:
        text = _read(path)
    docs = _dedupe(re.split(r"\n\s*\n", text))
    if len(docs) < HOLDOUT_EVERY:
        raise GeodriftError(f"--corpus {path}: only {len(docs)} paragraphs; need at least {HOLDOUT_EVERY} "
                            "blank-line separated paragraphs for a held-out split")
    train, valid = split_documents(docs)
    return _make_corpus("text", str(path), train, valid)


class Tokenizer(Protocol):
    """What the simulator needs from a tokenizer."""

    kind: str
    vocab_size: int

    def encode(self, text: str) -> list[int]: ...
    def decode(self, ids: Iterable[int]) -> str: ...
    def token_bytes(self) -> list[int]: ...
    def to_dict(self) -> dict[str, Any]: ...


class ByteTokenizer:
    """One id per UTF-8 byte (vocab 256)."""

    kind = "bytes"
    vocab_size = 256

    def encode(self, text: str) -> list[int]:
        """UTF-8 bytes of ``text``."""
        return list(text.encode("utf-8"))

    def decode(self, ids: Iterable[int]) -> str:
        """Inverse of :meth:`encode` (invalid UTF-8 is replaced)."""
        return bytes(ids).decode("utf-8", errors="replace")

    def token_bytes(self) -> list[int]:
        """Bytes per token id (all 1)."""
        return [1] * 256

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {"kind": "bytes"}


class BPETokenizer:
    """Byte-level BPE: ids 0..255 are bytes, id ``256 + i`` is merge ``i`` (a pair of earlier ids).

    Example:
        >>> tok = BPETokenizer.train("the cat the hat the bat " * 20, vocab_size=270)
        >>> tok.decode(tok.encode("the cat")) == "the cat"
        True
    """

    kind = "bpe"

    def __init__(self, merges: list[tuple[int, int]]) -> None:
        self.merges = [tuple(m) for m in merges]
        self.ranks = {pair: i for i, pair in enumerate(self.merges)}
        self.vocab: list[bytes] = [bytes([b]) for b in range(256)]
        for a, b in self.merges:
            self.vocab.append(self.vocab[a] + self.vocab[b])
        self.vocab_size = len(self.vocab)
        self._cache: dict[str, list[int]] = {}

    @classmethod
    def train(cls, text: str, vocab_size: int) -> BPETokenizer:
        """Learn ``vocab_size - 256`` merges (fewer if pairs run out) from ``text``.

        Raises:
            GeodriftError: when ``vocab_size < 256``.
        """
        if vocab_size < 256:
            raise GeodriftError(f"--vocab {vocab_size}: a byte-level BPE needs at least 256 ids")
        counts: Counter[str] = Counter()
        for chunk in _chunks(text[:BPE_TRAIN_CHARS]):
            counts.update(_PRETOKEN.findall(chunk))
        words = [list(w.encode("utf-8")) for w in counts]
        freqs = list(counts.values())
        pair_counts: Counter[tuple[int, int]] = Counter()
        where: dict[tuple[int, int], set[int]] = {}
        for i, (w, f) in enumerate(zip(words, freqs, strict=True)):
            for pair in zip(w, w[1:], strict=False):
                pair_counts[pair] += f
                where.setdefault(pair, set()).add(i)
        heap = [(-c, p) for p, c in pair_counts.items()]
        heapq.heapify(heap)
        merges: list[tuple[int, int]] = []
        while len(merges) < vocab_size - 256 and heap:
            neg, pair = heapq.heappop(heap)
            if pair_counts.get(pair, 0) != -neg:
                continue  # stale heap entry
            if -neg < 2:
                break
            new_id = 256 + len(merges)
            merges.append(pair)
            touched: set[tuple[int, int]] = set()
            for i in sorted(where.pop(pair, set())):
                w, f = words[i], freqs[i]
                for p in zip(w, w[1:], strict=False):
                    pair_counts[p] -= f
                    touched.add(p)
                words[i] = w = _merge(w, pair, new_id)
                for p in zip(w, w[1:], strict=False):
                    pair_counts[p] += f
                    where.setdefault(p, set()).add(i)
                    touched.add(p)
            pair_counts.pop(pair, None)
            for p in touched:
                c = pair_counts.get(p, 0)
                if c > 0 and p != pair:
                    heapq.heappush(heap, (-c, p))
        return cls(merges)

    def _encode_word(self, word: str) -> list[int]:
        ids = self._cache.get(word)
        if ids is None:
            ids = list(word.encode("utf-8"))
            while len(ids) > 1:
                best = min(zip(ids, ids[1:], strict=False), key=lambda p: self.ranks.get(p, math.inf))
                if best not in self.ranks:
                    break
                ids = _merge(ids, best, 256 + self.ranks[best])
            self._cache[word] = ids
        return ids

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text``."""
        return encode_pretokenized(text, self._encode_word)

    def decode(self, ids: Iterable[int]) -> str:
        """Inverse of :meth:`encode` (invalid UTF-8 is replaced)."""
        return b"".join(self.vocab[i] for i in ids).decode("utf-8", errors="replace")

    def token_bytes(self) -> list[int]:
        """Bytes per token id, for bits-per-byte."""
        return [len(v) for v in self.vocab]

    def to_dict(self) -> dict[str, Any]:
        """JSON form (the merges)."""
        return {"kind": "bpe", "merges": [list(m) for m in self.merges]}


def _merge(ids: list[int], pair: tuple[int, int], new_id: int) -> list[int]:
    out: list[int] = []
    i, n = 0, len(ids)
    while i < n:
        if i + 1 < n and ids[i] == pair[0] and ids[i + 1] == pair[1]:
            out.append(new_id)
            i += 2
        else:
            out.append(ids[i])
            i += 1
    return out


def make_tokenizer(kind: str, train_text: str, vocab_size: int) -> Tokenizer:
    """``bytes`` or a BPE of ``vocab_size`` trained on ``train_text``.

    Raises:
        GeodriftError: on an unknown kind.
    """
    if kind == "bytes":
        return ByteTokenizer()
    if kind == "bpe":
        return BPETokenizer.train(train_text, vocab_size)
    raise GeodriftError(f"--tokenizer {kind!r}: choose bpe or bytes")


def tokenizer_from_dict(payload: dict[str, Any]) -> Tokenizer:
    """Rebuild a tokenizer from :meth:`to_dict` output (run records)."""
    if payload.get("kind") == "bytes":
        return ByteTokenizer()
    return BPETokenizer([tuple(m) for m in payload["merges"]])  # type: ignore[misc]


def _chunks(text: str, size: int = 1 << 20) -> Iterable[str]:
    # Slices of about ``size`` characters, cut just after a newline that is followed by a non-space
    # character, where the pre-tokeniser gives the same tokens as on the whole text.
    start = 0
    while start < len(text):
        end = start + size
        if end < len(text):
            match = re.compile(r"\n(?=\S)").search(text, end)
            end = match.end() if match else len(text)
        yield text[start:end]
        start = end


def encode_ids(tokenizer: Tokenizer, text: str) -> torch.Tensor:
    """``(N,)`` int64 token ids of ``text``, encoded in slices (bounded memory for WikiText-103)."""
    parts = [torch.tensor(tokenizer.encode(chunk), dtype=torch.int32) for chunk in _chunks(text)]
    return torch.cat(parts).long() if parts else torch.zeros(0, dtype=torch.int64)


def sample_batch(tokens: torch.Tensor, batch: int, seq_len: int, generator: torch.Generator) -> torch.Tensor:
    """``(batch, seq_len + 1)`` windows at uniformly random offsets of ``tokens (N,)``.

    Raises:
        GeodriftError: when the text is shorter than one window.
    """
    n = tokens.numel() - seq_len - 1
    if n <= 0:
        raise GeodriftError(f"corpus: {tokens.numel()} tokens is fewer than one window of {seq_len + 1}; "
                            "use a larger corpus or a shorter --seq-len")
    starts = torch.randint(0, n + 1, (batch,), generator=generator)
    return torch.stack([tokens[s: s + seq_len + 1] for s in starts.tolist()])


def eval_windows(tokens: torch.Tensor, seq_len: int, max_windows: int | None = None) -> torch.Tensor:
    """``(W, seq_len + 1)`` consecutive windows (overlapping by one token) covering ``tokens`` from the start."""
    count = (tokens.numel() - 1) // seq_len
    if max_windows is not None:
        count = min(count, max_windows)
    if count < 1:
        raise GeodriftError(f"held-out text: {tokens.numel()} tokens is fewer than one window of {seq_len + 1}")
    return torch.stack([tokens[i * seq_len: i * seq_len + seq_len + 1] for i in range(count)])


@torch.no_grad()
def perplexity(model: torch.nn.Module, windows: torch.Tensor, token_bytes: list[int] | None = None,
               batch: int = 16) -> dict[str, float]:
    """Held-out perplexity of ``model`` on ``windows (W, T + 1)`` (predict tokens 1..T of each window).

    Returns:
        ``{"nll": mean nats per token, "ppl": exp(nll), "tokens": count, "bits_per_byte": ...}``
        (bits per byte only when ``token_bytes`` is given: comparable across tokenizers).
    """
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    total, count, n_bytes = 0.0, 0, 0
    lengths = torch.tensor(token_bytes) if token_bytes is not None else None
    for i in range(0, windows.shape[0], batch):
        chunk = windows[i: i + batch].to(device)
        logits = model(chunk[:, :-1]).float()
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), chunk[:, 1:].reshape(-1),
                                                 reduction="sum")
        total += float(loss)
        count += chunk[:, 1:].numel()
        if lengths is not None:
            n_bytes += int(lengths[chunk[:, 1:].cpu()].sum())
    model.train(was_training)
    nll = total / count
    out = {"nll": nll, "ppl": math.exp(min(nll, 700.0)), "tokens": float(count)}
    if lengths is not None:
        out["bits_per_byte"] = total / max(n_bytes, 1) / math.log(2)
    return out
