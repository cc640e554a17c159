"""The embedded SmolLM2-135M as a simulator model: its GGUF tokenizer and held-out perplexity.

The GGUF file carries a GPT-2-style byte-level BPE (``tokenizer.ggml.tokens`` and ``.merges``,
tokens written in GPT-2's byte-to-unicode alphabet). :class:`GGUFTokenizer` applies those merges
after the same GPT-2-style pre-tokenisation used by ``geodrift.sim.text`` (SmolLM2's own
pre-tokeniser differs in details, e.g. digit splitting; the tokenisation is then valid but not always
the one the model saw in training, which can only raise the measured perplexity).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch

from geodrift.errors import GeodriftError
from geodrift.sim.text import encode_pretokenized, eval_windows, perplexity


def _bytes_to_unicode() -> dict[int, str]:
    # GPT-2's reversible map from bytes to printable unicode characters.
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, (chr(c) for c in cs), strict=True))


class GGUFTokenizer:
    """A GPT-2-style BPE read from a GGUF file's tokenizer metadata.

    Example:
        >>> from geodrift.scan.embedded import embedded_model_path
        >>> tok = GGUFTokenizer.from_gguf(embedded_model_path())  # doctest: +SKIP
        >>> tok.decode(tok.encode("Hello world"))  # doctest: +SKIP
        'Hello world'
    """

    kind = "gguf"

    def __init__(self, tokens: list[str], merges: list[str]) -> None:
        self.tokens = tokens
        self.ids = {t: i for i, t in enumerate(tokens)}
        self.ranks = {tuple(m.split(" ", 1)): r for r, m in enumerate(merges)}
        self.byte_map = _bytes_to_unicode()
        self.unmap = {c: b for b, c in self.byte_map.items()}
        self.vocab_size = len(tokens)
        self._cache: dict[str, list[int]] = {}

    @classmethod
    def from_gguf(cls, path: str | Path) -> GGUFTokenizer:
        """Read ``tokenizer.ggml.tokens``/``merges`` from a GGUF file.

        Raises:
            GeodriftError: when the file has no GPT-2-style tokenizer.
        """
        from gguf import GGUFReader

        reader = GGUFReader(str(path))
        fields = reader.fields
        if "tokenizer.ggml.merges" not in fields or "tokenizer.ggml.tokens" not in fields:
            raise GeodriftError(f"{path}: no GPT-2-style tokenizer (tokenizer.ggml.merges) in the GGUF metadata")

        def strings(name: str) -> list[str]:
            f = fields[name]
            return [bytes(f.parts[i]).decode("utf-8") for i in f.data]

        return cls(strings("tokenizer.ggml.tokens"), strings("tokenizer.ggml.merges"))

    def _encode_word(self, word: str) -> list[int]:
        ids = self._cache.get(word)
        if ids is None:
            parts = [self.byte_map[b] for b in word.encode("utf-8")]
            while len(parts) > 1:
                pairs = list(zip(parts, parts[1:], strict=False))
                best = min(pairs, key=lambda p: self.ranks.get(p, 1 << 30))
                if best not in self.ranks:
                    break
                merged: list[str] = []
                i = 0
                while i < len(parts):
                    if i + 1 < len(parts) and (parts[i], parts[i + 1]) == best:
                        merged.append(parts[i] + parts[i + 1])
                        i += 2
                    else:
                        merged.append(parts[i])
                        i += 1
                parts = merged
            ids = [self.ids[p] for p in parts]
            self._cache[word] = ids
        return ids

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` (no BOS)."""
        return encode_pretokenized(text, self._encode_word)

    def decode(self, ids: Iterable[int]) -> str:
        """Inverse of :meth:`encode` for ordinary (non-special) tokens."""
        return bytes(self.unmap[c] for i in ids for c in self.tokens[i] if c in self.unmap).decode("utf-8", "replace")

    def token_bytes(self) -> list[int]:
        """UTF-8 bytes each token stands for (special tokens count their characters)."""
        return [sum(1 for c in t if c in self.unmap) or len(t) for t in self.tokens]

    def to_dict(self) -> dict[str, Any]:
        """JSON form (a reference to the embedded file, not the 49k-token table)."""
        return {"kind": "gguf"}


def smollm2_perplexity(text: str, seq_len: int = 128, max_windows: int = 32) -> dict[str, float]:
    """Held-out perplexity of the embedded SmolLM2-135M-Instruct on ``text`` with its own tokenizer.

    Args:
        text: held-out text (e.g. the simulator corpus's validation split).
        seq_len: tokens per window (context); windows are consecutive.
        max_windows: cap on the number of windows (CPU time).

    Returns:
        ``perplexity()``'s dict (``nll``, ``ppl``, ``tokens``, ``bits_per_byte``).
    """
    from geodrift.scan.embedded import embedded_model_path
    from geodrift.scan.readers import open_checkpoint
    from geodrift.sim.llama import llama_from_checkpoint

    tokenizer = GGUFTokenizer.from_gguf(embedded_model_path())
    ids = torch.tensor(tokenizer.encode(text), dtype=torch.int64)
    model = llama_from_checkpoint(open_checkpoint(None))
    return perplexity(model, eval_windows(ids, seq_len, max_windows), tokenizer.token_bytes(), batch=8)
