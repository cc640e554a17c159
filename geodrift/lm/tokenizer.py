"""Tokenizers for the simulator: UTF-8 bytes, a byte-level BPE trained here, and a GGUF model's own BPE.

Every BPE *encoding* runs in the Hugging Face ``tokenizers`` library; only the 256-id byte tokenizer
is plain Python. Three kinds, one :class:`Tokenizer` class:

- ``bytes`` (:func:`byte_tokenizer`): id ``b`` is byte ``b`` of the UTF-8 text.
- ``bpe`` (:func:`train_bpe`): a byte-level BPE learnt by ``tokenizers``' own ``BpeTrainer`` with
  GPT-2's pre-tokenizer (``ByteLevel``, regex on, no prefix space), all 256 bytes as the initial
  alphabet, merges while a pair occurs at least twice. Ids 0..255 are the bytes, numbered as in
  ``bytes`` (id ``b`` = byte ``b``; the trainer numbers them in the order of GPT-2's byte-to-unicode
  characters, and we renumber those 256 only); ids 256.. are the learnt tokens in the order the
  trainer created them. ``to_dict`` stores the merges as id pairs, from which the vocabulary is
  rebuilt exactly (``train_bpe`` checks that on every call).
- ``gguf`` (:func:`gguf_bpe_tokenizer`): a GPT-2-style BPE from a GGUF file's tokenizer metadata
  (the caller reads the file; ``geodrift.sim`` does not import ``geodrift.scanner``), with the file's
  own ids. Control tokens (``token_type`` 3) are special tokens: ``"<|im_start|>"`` in the text
  encodes to its id and decodes back to its text.

``token_bytes()[i]`` is the number of UTF-8 bytes that ``decode([i])`` writes for id ``i``; special
tokens count the UTF-8 length of their text (``decode`` writes them out). So for ``ids =
encode(text)``, ``sum(token_bytes()[i] for i in ids) == len(text.encode())`` (bar the bytes a GGUF
vocabulary cannot represent, below), which is what bits per byte needs.

Is ``tokenizers``' BPE trainer reproducible? Measured with tokenizers 0.22.2 (2 CPU cores), each run
a fresh process, comparing the sha256 of the full vocabulary (id order) and merge list:
the stdlib-docs corpus's training split (all of it: 1,233,104 characters) and the first 8,000,000
characters of the standard library's ``*.py`` sources, at vocab 2048 (1792 merges) and 8192 (7936
merges), four runs each with ``PYTHONHASHSEED`` 1/2/3/5, ``TOKENIZERS_PARALLELISM`` true/false and
``RAYON_NUM_THREADS`` 1/2: all four runs identical in every case (0 differing merges, 0 differing
vocabulary entries). Its tie-break is deterministic (``Ord for Merge`` in tokenizers'
``models/bpe/trainer.rs``: equal counts, the smaller pair of ids wins), so
geodrift's hand-written trainer is not needed and is gone.

SmolLM2's pre-tokenizer (``tokenizer.ggml.pre = "smollm"``): ``Sequence([Digits(individual_digits=
True), ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)])`` - the
``pre_tokenizer`` of HuggingFaceTB/SmolLM2-135M's ``tokenizer.json``, and what llama.cpp runs for
``LLAMA_VOCAB_PRE_TYPE_SMOLLM`` (``"\\p{N}"`` first, then GPT-2's regex). transformers' GGUF loader
instead uses a plain ``ByteLevel`` (no digit split) and an unknown token with byte fallback, so on
text with digits, or with a byte the vocabulary lacks, its ids differ from these (tests/test_tokenizer.py
states how). SmolLM2's vocabulary lacks 21 of the 256 byte symbols: the control characters 0x04
0x06 0x13 0x14 0x16 0x1D, 0xC0 0xC1 0xF5..0xFF (never in UTF-8) and 0xF1 0xF2 (lead bytes of the
unassigned planes 4-11). Like SmolLM2's own tokenizer (no unknown token, no byte fallback),
``encode`` drops them; ``Tokenizer.missing_bytes`` lists them.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from tokenizers import AddedToken, decoders, models, pre_tokenizers, trainers
from tokenizers import Tokenizer as HFTokenizer

from geodrift.errors import GeodriftError

# The BPE learns its merges from at most this many characters of the training text (the start).
BPE_TRAIN_CHARS = 20_000_000
# ``tokenizer.ggml.pre`` values gguf_bpe_tokenizer knows (see the module docstring).
SUPPORTED_PRE = ("gpt2", "smollm")
_CONTROL, _USER_DEFINED = 3, 4  # GGUF token types registered as added tokens


def _byte_chars() -> list[str]:
    # GPT-2's reversible byte -> printable character map (the ByteLevel alphabet), indexed by byte.
    keep = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    chars, extra = {}, 0
    for b in range(256):
        if b in keep:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    return [chars[b] for b in range(256)]


BYTE_CHARS: list[str] = _byte_chars()
_BYTE_OF = {c: b for b, c in enumerate(BYTE_CHARS)}


@dataclass(frozen=True, eq=False)
class Tokenizer:
    """A tokenizer of kind ``bytes``, ``bpe`` or ``gguf`` (build it with the functions of this module).

    Attributes:
        kind: ``"bytes"``, ``"bpe"`` or ``"gguf"``.
        vocab_size: number of ids (special tokens included).
        backend: the ``tokenizers.Tokenizer`` doing the work (None for ``bytes``).
        missing_bytes: bytes no id stands for; ``encode`` drops them (empty except for some GGUF vocabularies).
    """

    kind: str
    vocab_size: int
    backend: HFTokenizer | None = field(repr=False)
    missing_bytes: tuple[int, ...] = ()
    _lengths: tuple[int, ...] = field(default=(), repr=False)
    _record: str = field(default="{}", repr=False)  # to_dict() as JSON text (immutable)

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` (no BOS or other added special tokens)."""
        if self.backend is None:
            return list(text.encode("utf-8"))
        return list(self.backend.encode(text, add_special_tokens=False).ids)

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """``[encode(t) for t in texts]``, in parallel threads for a BPE."""
        if self.backend is None:
            return [self.encode(t) for t in texts]
        return [list(e.ids) for e in self.backend.encode_batch(list(texts), add_special_tokens=False)]

    def decode(self, ids: Iterable[int]) -> str:
        """Text of ``ids`` (special tokens written out; invalid UTF-8 becomes U+FFFD)."""
        ids = list(ids)
        if self.backend is None:
            return bytes(ids).decode("utf-8", errors="replace")
        return self.backend.decode(ids, skip_special_tokens=False)

    def token_bytes(self) -> list[int]:
        """``(vocab_size,)`` UTF-8 bytes each id decodes to (special tokens: their text's bytes)."""
        return list(self._lengths)

    def to_dict(self) -> dict[str, Any]:
        """JSON form for run records; :func:`tokenizer_from_dict` rebuilds ``bytes`` and ``bpe`` exactly.

        A ``gguf`` tokenizer gives ``{"kind": "gguf", "pre", "vocab_size", "sha256"}`` (a reference:
        rebuild it from the GGUF file; ``sha256`` fingerprints its tokens, merges and token types).
        """
        out: dict[str, Any] = json.loads(self._record)
        return out


def byte_tokenizer() -> Tokenizer:
    """The 256-id tokenizer: id ``b`` is byte ``b`` of the UTF-8 text."""
    return Tokenizer("bytes", 256, None, (), (1,) * 256, json.dumps({"kind": "bytes"}))


def _pre_tokenizer(pre: str) -> pre_tokenizers.PreTokenizer:
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)
    if pre == "gpt2":
        return byte_level
    if pre == "smollm":
        return pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), byte_level])
    raise GeodriftError(f"tokenizer.ggml.pre {pre!r}: unsupported pre-tokenizer; supported: "
                        f"{', '.join(SUPPORTED_PRE)} (use a GGUF whose tokenizer is one of these)")


def _piece_bytes(token: str) -> int:
    # What the ByteLevel decoder writes for one token: a byte per character when all are in the
    # alphabet, else the token's own UTF-8 text.
    return len(token) if all(c in _BYTE_OF for c in token) else len(token.encode("utf-8"))


def train_bpe(text: str, vocab_size: int) -> Tokenizer:
    """Learn a byte-level BPE of ``vocab_size`` ids (fewer if pairs run out) from ``text``.

    Args:
        text: training text; only its first ``BPE_TRAIN_CHARS`` characters are used.
        vocab_size: total ids, the 256 bytes included.

    Returns:
        A ``bpe`` :class:`Tokenizer` (ids 0..255 = bytes, then the learnt tokens).

    Raises:
        GeodriftError: when ``vocab_size < 256``.

    Example:
        >>> tok = train_bpe("the cat the hat the bat " * 20, vocab_size=270)
        >>> tok.decode(tok.encode("the cat")), tok.vocab_size <= 270
        ('the cat', True)
    """
    if vocab_size < 256:
        raise GeodriftError(f"--vocab {vocab_size}: a byte-level BPE needs at least 256 ids (one per byte); "
                            "pass --vocab 256 or more")
    hf = HFTokenizer(models.BPE())
    hf.pre_tokenizer = _pre_tokenizer("gpt2")
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2, show_progress=False, special_tokens=[],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    hf.train_from_iterator([text[:BPE_TRAIN_CHARS]], trainer=trainer)
    model = json.loads(hf.to_str())["model"]
    trained: dict[str, int] = model["vocab"]
    if sorted(trained[c] for c in BYTE_CHARS) != list(range(256)):
        raise RuntimeError("tokenizers' BpeTrainer did not give the 256 bytes ids 0..255")
    ours = {s: (_BYTE_OF[s] if i < 256 else i) for s, i in trained.items()}
    pairs = [(ours[a], ours[b]) for a, b in (_merge_pair(m) for m in model["merges"])]
    tok = _bpe_from_merges(pairs)
    if tok.backend is None or tok.backend.get_vocab() != ours or tok.vocab_size != len(trained):
        raise RuntimeError("rebuilding the trained BPE from its merges did not give the trained vocabulary")
    return tok


def _merge_pair(merge: Any) -> tuple[str, str]:
    # tokenizers writes a merge as ["a", "b"] (0.20+) or "a b" (older).
    if isinstance(merge, str):
        a, b = merge.split(" ")
        return a, b
    return merge[0], merge[1]


def _bpe_from_merges(pairs: Sequence[tuple[int, int]]) -> Tokenizer:
    names = list(BYTE_CHARS)
    index = {s: i for i, s in enumerate(names)}
    merges: list[tuple[str, str]] = []
    for rank, (a, b) in enumerate(pairs):
        if not (0 <= a < len(names) and 0 <= b < len(names)):
            raise GeodriftError(f"tokenizer record: merges[{rank}] = {[a, b]} names an id not defined before it; "
                                "the record is corrupt")
        merges.append((names[a], names[b]))
        joined = names[a] + names[b]
        if joined not in index:  # a merge may rebuild an existing token (the trainer reuses its id)
            index[joined] = len(names)
            names.append(joined)
    hf = HFTokenizer(models.BPE(vocab=index, merges=merges))
    hf.pre_tokenizer = _pre_tokenizer("gpt2")
    hf.decoder = decoders.ByteLevel()
    record = json.dumps({"kind": "bpe", "pre": "gpt2", "merges": [[a, b] for a, b in pairs]})
    return Tokenizer("bpe", len(names), hf, (), tuple(len(s) for s in names), record)


def gguf_bpe_tokenizer(tokens: list[str], merges: list[str], pre: str,
                       token_types: list[int] | None = None) -> Tokenizer:
    """A GPT-2-style byte-level BPE from GGUF tokenizer metadata (pure: the caller reads the file).

    Args:
        tokens: ``tokenizer.ggml.tokens`` (id ``i`` is ``tokens[i]``, in GPT-2's byte alphabet).
        merges: ``tokenizer.ggml.merges``, ``"left right"`` strings in rank order.
        pre: ``tokenizer.ggml.pre`` (one of ``SUPPORTED_PRE``).
        token_types: ``tokenizer.ggml.token_type`` (3 = control -> special token, 4 = user-defined ->
            added token); None registers no added tokens.

    Returns:
        A ``gguf`` :class:`Tokenizer` with the file's ids.

    Raises:
        GeodriftError: on an unsupported ``pre``, or metadata that is not a consistent BPE.
    """
    model_pre = _pre_tokenizer(pre)
    if token_types is not None and len(token_types) != len(tokens):
        raise GeodriftError(f"GGUF tokenizer: {len(token_types)} tokenizer.ggml.token_type entries for "
                            f"{len(tokens)} tokenizer.ggml.tokens; the file's tokenizer metadata is corrupt")
    vocab = {t: i for i, t in enumerate(tokens)}
    if len(vocab) != len(tokens):
        raise GeodriftError(f"GGUF tokenizer: tokenizer.ggml.tokens has {len(tokens) - len(vocab)} duplicate "
                            "strings; a BPE needs distinct tokens")
    pairs: list[tuple[str, str]] = []
    for rank, merge in enumerate(merges):
        parts = merge.split(" ")
        if len(parts) != 2 or parts[0] + parts[1] not in vocab or parts[0] not in vocab or parts[1] not in vocab:
            raise GeodriftError(f"GGUF tokenizer: tokenizer.ggml.merges[{rank}] = {merge!r} is not two tokens "
                                "whose join is a token; the file's tokenizer metadata is corrupt")
        pairs.append((parts[0], parts[1]))
    hf = HFTokenizer(models.BPE(vocab=vocab, merges=pairs))
    hf.pre_tokenizer = model_pre
    hf.decoder = decoders.ByteLevel()
    types = list(token_types) if token_types is not None else [1] * len(tokens)
    special = [AddedToken(t, special=True, normalized=False) for t, k in zip(tokens, types, strict=True)
               if k == _CONTROL]
    added = [AddedToken(t, special=False, normalized=False) for t, k in zip(tokens, types, strict=True)
             if k == _USER_DEFINED]
    if special:
        hf.add_special_tokens(special)
    if added:
        hf.add_tokens(added)
    lengths = tuple(len(t.encode("utf-8")) if k in (_CONTROL, _USER_DEFINED) else _piece_bytes(t)
                    for t, k in zip(tokens, types, strict=True))
    missing = tuple(b for b in range(256) if BYTE_CHARS[b] not in vocab)
    digest = hashlib.sha256(json.dumps([tokens, merges, types]).encode("utf-8")).hexdigest()
    record = json.dumps({"kind": "gguf", "pre": pre, "vocab_size": len(tokens), "sha256": digest})
    return Tokenizer("gguf", len(tokens), hf, missing, lengths, record)


def make_tokenizer(kind: str, train_text: str, vocab_size: int) -> Tokenizer:
    """``bytes`` (``vocab_size`` ignored) or a BPE of ``vocab_size`` ids trained on ``train_text``.

    Raises:
        GeodriftError: on an unknown kind, or a BPE with ``vocab_size < 256``.
    """
    if kind == "bytes":
        return byte_tokenizer()
    if kind == "bpe":
        return train_bpe(train_text, vocab_size)
    raise GeodriftError(f"--tokenizer {kind!r}: choose bpe or bytes")


def tokenizer_from_dict(payload: dict[str, Any]) -> Tokenizer:
    """Rebuild a ``bytes`` or ``bpe`` tokenizer from :meth:`Tokenizer.to_dict` output (run records).

    Raises:
        GeodriftError: on a malformed record, a BPE written by geodrift's earlier hand-written BPE (no
            ``"pre"``), or a ``gguf`` record (rebuild that one from its GGUF file).
    """
    kind = payload.get("kind") if isinstance(payload, dict) else None
    if kind == "bytes":
        return byte_tokenizer()
    if kind == "gguf":
        raise GeodriftError("tokenizer record: a gguf tokenizer is a reference to its GGUF file; rebuild it "
                            "from the file (gguf_bpe_tokenizer with the file's tokenizer metadata)")
    if kind != "bpe":
        raise GeodriftError(f"tokenizer record: unknown kind {kind!r}; expected bytes, bpe or gguf")
    if payload.get("pre") != "gpt2":
        raise GeodriftError("tokenizer record: this BPE was written by geodrift's earlier hand-written BPE "
                            "(other pre-tokenization); re-run the simulation to record a current one")
    merges = payload.get("merges")
    if not isinstance(merges, list):
        raise GeodriftError("tokenizer record: bpe without a 'merges' list; the record is corrupt")
    pairs: list[tuple[int, int]] = []
    for i, m in enumerate(merges):
        if not (isinstance(m, list) and len(m) == 2 and all(type(x) is int for x in m)):
            raise GeodriftError(f"tokenizer record: merges[{i}] = {m!r} is not a pair of ids; the record is corrupt")
        pairs.append((m[0], m[1]))
    return _bpe_from_merges(pairs)
