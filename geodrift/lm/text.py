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

Tokenizers live in ``geodrift.lm.tokenizer``. Text is encoded in ~1 MB slices cut at line starts,
so WikiText-103 fits in memory as an int32 tensor. ``TokenBatches`` draws training windows as a
pure function of ``(seed, step)``; ``perplexity`` evaluates held-out windows.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import math
import re
import sysconfig
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from geodrift.errors import GeodriftError
from geodrift.io.checks import check_file
from geodrift.lm.tokenizer import Tokenizer

HOLDOUT_EVERY = 10
_DOC_PACKAGES = ("asyncio", "collections", "concurrent", "email", "html", "http", "importlib", "json",
                 "logging", "multiprocessing", "unittest", "urllib", "xml", "xmlrpc", "zoneinfo")


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


def make_corpus(name: str, source: str, train: str, valid: str) -> Corpus:
    """A :class:`Corpus` of two splits, its sha256 computed here (the one place a corpus is made)."""
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
        >>> len(c.train) > 10 * len(c.valid) / 2  # doctest: +SKIP
        True
    """
    if path is None:
        import sys

        train, valid = split_documents(stdlib_documents())
        corpus = make_corpus("stdlib-docs", f"python {sys.version.split()[0]} stdlib docstrings + pydoc topics",
                              train, valid)
    else:
        corpus = _load_path(Path(path))
    if max_chars is not None and len(corpus.train) > max_chars:
        corpus = make_corpus(corpus.name, corpus.source, corpus.train[:max_chars], corpus.valid)
    return corpus


def _read(path: Path) -> str:
    check_file(path, "--corpus text file")  # a FIFO would block the read below
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
                return make_corpus("wikitext", str(path), _read(train_file), _read(valid_file))
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
    return make_corpus("text", str(path), train, valid)


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


class TokenBatches:
    """``batch(step) -> (B, T + 1)`` windows from ``Generator(seed * 1_000_003 + step)``: pure in step."""

    def __init__(self, tokens: torch.Tensor, batch_size: int, seq_len: int, seed: int, device: torch.device) -> None:
        self.tokens, self.batch_size, self.seq_len, self.seed, self.device = tokens, batch_size, seq_len, seed, device

    def batch(self, step: int) -> torch.Tensor:
        gen = torch.Generator().manual_seed(self.seed * 1_000_003 + step)
        return sample_batch(self.tokens, self.batch_size, self.seq_len, gen).to(self.device)


def lm_loss(model: nn.Module, batch: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Next-token cross-entropy of ``batch (B, T + 1)``; stats ``{"loss"}``."""
    logits = model(batch[:, :-1])
    loss = nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1))
    return loss, {"loss": loss.detach()}


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
