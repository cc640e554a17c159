"""One loaded Llama, its tokenizer and two disjoint text sets; forwards that skip layers by index.

Everything in ``geodrift.compress`` works on ONE :class:`~geodrift.lm.llama.LlamaLM` loaded once
(:func:`load_setup`): pruning never copies the model - :func:`window_nll` runs the decoder stack
over the kept layer indices only - and shared bases overwrite projection weights in place and put
the originals back (:class:`~geodrift.compress.share.WeightSwap`).

Texts (deterministic, disjoint): the corpus of ``geodrift.lm.text.load_corpus`` (the embedded
stdlib-docs corpus by default; ``--corpus`` a text file, a folder of ``.txt`` or a WikiText folder).
*Calibration* windows are the first ``calib_windows`` consecutive windows of its training split,
*evaluation* windows the first ``eval_windows`` of its held-out split (WikiText: ``wiki.valid``);
the two splits share no document.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from geodrift.errors import GeodriftError
from geodrift.lm.llama import LlamaLM
from geodrift.lm.text import encode_ids, eval_windows, load_corpus
from geodrift.lm.tokenizer import Tokenizer
from geodrift.pretrained import gguf_tokenizer, llama_from_checkpoint
from geodrift.scan.checkpoint import Checkpoint
from geodrift.scan.embedded import EMBEDDED_LABEL, embedded_model_path
from geodrift.scan.readers import open_checkpoint
from geodrift.weights import TRANSFORMER_ROLES

SUPPORTED_ARCHITECTURES = ("llama", "mistral")
# Windows per forward call: (8, 128) tokens keep the (B, T, vocab) logits near 200 MB for a 49k vocabulary.
BATCH = 8


@dataclass
class Setup:
    """The model under compression and its texts.

    Attributes:
        model: the loaded LlamaLM (eval mode, float32, CPU).
        label: the checkpoint's name for tables (``SmolLM2-135M-Instruct.Q4_1.gguf (embedded default)``).
        config: the checkpoint's shape (``n_layers``, ``d_model``, ...), what ``--save`` writes.
        calib: ``(Wc, T + 1)`` calibration windows (training split).
        evaluation: ``(We, T + 1)`` held-out windows (validation split).
        corpus: the corpus's name and source, and its sha256.
        token_bytes: UTF-8 bytes per id (bits per byte).
        weights: how the weights were stored before geodrift dequantized them (every table's label;
            :func:`weights_label`).
    """

    model: LlamaLM
    label: str
    config: dict[str, Any]
    calib: torch.Tensor
    evaluation: torch.Tensor
    corpus: dict[str, str]
    token_bytes: list[int]
    weights: str = ""

    @property
    def n_layers(self) -> int:
        """Decoder layers of the loaded model."""
        return len(self.model.model.layers)


def tokenizer_for(path: str | Path | None) -> Tokenizer:
    """The tokenizer that goes with a checkpoint.

    A GGUF file (and the embedded default) carries its own BPE; a Hugging Face folder or a
    ``.safetensors`` file needs a ``tokenizer.json`` beside it (the folder's, or the file's folder's).

    Raises:
        GeodriftError: when no tokenizer is found (names the file to add).
    """
    if path is None:
        return gguf_tokenizer(embedded_model_path())
    path = Path(path)
    if path.suffix.lower() == ".gguf":
        return gguf_tokenizer(path)
    folder = path if path.is_dir() else path.parent
    tok_file = folder / "tokenizer.json"
    if not tok_file.is_file():
        raise GeodriftError(f"MODEL {path}: no tokenizer.json in {folder}; perplexity needs the model's tokenizer - "
                            "copy the model's tokenizer.json there (or pass a GGUF, which carries its tokenizer)")
    return _hf_tokenizer(tok_file)


def _hf_tokenizer(path: Path) -> Tokenizer:
    from tokenizers import Tokenizer as HFTokenizer

    hf = HFTokenizer.from_file(str(path))
    size = hf.get_vocab_size(with_added_tokens=True)
    lengths = tuple(len(hf.decode([i], skip_special_tokens=False).encode("utf-8")) for i in range(size))
    return Tokenizer("gguf", size, hf, (), lengths, json.dumps({"kind": "tokenizer.json", "path": path.name}))


_BITS = {"Q4_0": 4, "Q4_1": 4, "Q4_K": 4, "Q5_0": 5, "Q5_1": 5, "Q5_K": 5, "Q6_K": 6, "Q8_0": 8, "Q8_K": 8,
         "Q2_K": 2, "Q3_K": 3, "IQ4_NL": 4, "IQ4_XS": 4}


def weights_label(ckpt: Checkpoint) -> str:
    """How the projections and the embedding were stored, e.g. ``4-bit Q4_1 projections, Q8_0 embedding, dequantized``.

    Example:
        >>> weights_label(open_llama(None))
        '4-bit Q4_1 projections, 8-bit Q8_0 embedding, dequantized to float32'
    """
    def kinds(keys: list[tuple[str, int | None]]) -> str:
        found = Counter(ckpt.dtype(ckpt.plan[k].name) for k in keys if k in ckpt.plan)
        return "/".join(f"{_BITS[d]}-bit {d}" if d in _BITS else d for d, _ in found.most_common())

    projections = kinds([(role, layer) for role in TRANSFORMER_ROLES for layer in range(int(ckpt.config["n_layers"]))])
    embedding = kinds([("embed", None)])
    quantized = any(q in projections + embedding for q in _BITS)
    return (f"{projections} projections, {embedding} embedding, "
            f"{'dequantized to' if quantized else 'read as'} float32")


def open_llama(path: str | Path | None) -> Checkpoint:
    """Open ``path`` (None: the embedded SmolLM2) and check it is a Llama-family model geodrift can run.

    Raises:
        GeodriftError: for another architecture, naming the supported ones.
    """
    ckpt = open_checkpoint(path)
    if ckpt.architecture not in SUPPORTED_ARCHITECTURES:
        raise GeodriftError(
            f"MODEL {ckpt.label}: architecture {ckpt.architecture!r} has no forward implementation in geodrift; "
            f"compress runs {', '.join(SUPPORTED_ARCHITECTURES)} checkpoints (GGUF, safetensors or HF folder)")
    return ckpt


def load_setup(path: str | Path | None, corpus: str | Path | None = None, *, seq_len: int = 128,
               calib_windows: int = 8, eval_windows_count: int = 16) -> Setup:
    """Load the model once and cut the calibration and evaluation windows.

    Args:
        path: checkpoint (None: the embedded SmolLM2-135M-Instruct).
        corpus: ``--corpus`` (None: the embedded stdlib-docs corpus).
        seq_len: tokens per window.
        calib_windows, eval_windows_count: how many windows of each.

    Raises:
        GeodriftError: unsupported architecture, missing tokenizer, or a text too short for one window.
    """
    ckpt = open_llama(path)
    tokenizer = tokenizer_for(path)
    text = load_corpus(corpus)
    if not text.train.strip() or not text.valid.strip():
        raise GeodriftError(f"--corpus {corpus}: empty training or held-out split; pass a text with content")
    calib = _windows(_encode_prefix(tokenizer, text.train, seq_len * calib_windows + 1), seq_len, calib_windows,
                     "--calib-windows", corpus)
    evaluation = _windows(_encode_prefix(tokenizer, text.valid, seq_len * eval_windows_count + 1), seq_len,
                          eval_windows_count, "--eval-windows", corpus)
    model = llama_from_checkpoint(ckpt)
    if tokenizer.vocab_size > model.lm_head.weight.shape[0]:
        raise GeodriftError(f"MODEL {ckpt.label}: tokenizer has {tokenizer.vocab_size} ids but the model "
                            f"{model.lm_head.weight.shape[0]}; use the model's own tokenizer.json")
    label = EMBEDDED_LABEL if path is None else ckpt.label
    return Setup(model, label, dict(ckpt.config), calib, evaluation,
                 {"name": text.name, "source": text.source, "sha256": text.sha256}, tokenizer.token_bytes(),
                 weights_label(ckpt))


def _encode_prefix(tokenizer: Tokenizer, text: str, need: int) -> torch.Tensor:
    # Only the first ``need`` tokens are used: encode a prefix cut at a paragraph break (where the
    # pre-tokenizer gives the same tokens as on the whole text), doubling it until it is long enough.
    size = 8 * need + 1024
    while size < len(text):
        cut = text.rfind("\n\n", 0, size)
        ids = encode_ids(tokenizer, text[: cut if cut > 0 else size])
        if ids.numel() >= need + 1:
            return ids
        size *= 2
    return encode_ids(tokenizer, text)


def _windows(ids: torch.Tensor, seq_len: int, count: int, option: str, corpus: str | Path | None) -> torch.Tensor:
    need = seq_len * count + 1
    if ids.numel() < need:
        raise GeodriftError(f"{option} {count}: the corpus {corpus or '(embedded)'} gives {ids.numel()} tokens, "
                            f"fewer than {count} windows of {seq_len}; lower {option} or --seq-len, or pass "
                            "a longer --corpus")
    return eval_windows(ids, seq_len, count)


def kept_layers(n_layers: int, removed: Iterable[int]) -> list[int]:
    """Layer indices left after removing ``removed`` (in order)."""
    gone = set(removed)
    return [i for i in range(n_layers) if i not in gone]


@torch.no_grad()
def run_stack(model: LlamaLM, h: torch.Tensor, layers: Iterable[int],
              record: Callable[[int, torch.Tensor], None] | None = None) -> torch.Tensor:
    """Run decoder layers ``layers`` (indices, in order) on hidden states ``h (B, T, d)``.

    ``record(i, h_in)`` is called with each layer's input before it runs.
    """
    cos, sin = model._rope_tables(h.shape[1], h.device)
    for i in layers:
        if record is not None:
            record(i, h)
        h = model.model.layers[i](h, cos, sin)
    return h


@torch.no_grad()
def nll_from_hidden(model: LlamaLM, h: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean next-token NLL per window ``(B,)`` from final hidden states ``h (B, T, d)`` and ``targets (B, T)``."""
    logits = model.lm_head(model.model.norm(h)).float()  # (B, T, vocab)
    loss = torch.nn.functional.cross_entropy(logits.transpose(1, 2), targets, reduction="none")  # (B, T)
    return loss.mean(1)


@torch.no_grad()
def window_nll(model: LlamaLM, windows: torch.Tensor, removed: Iterable[int] = (),
               prefix: torch.Tensor | None = None) -> torch.Tensor:
    """Mean NLL (nats/token) of each window ``(W, T + 1)`` with the layers ``removed`` skipped: ``(W,)``.

    The model is not copied: the forward simply runs the kept layer indices. ``prefix`` (the full
    model's layer inputs on these windows, :func:`layer_states`) lets the forward start at the first
    removed layer, since everything before it is unchanged.
    """
    n_layers = len(model.model.layers)
    gone = sorted(set(removed))
    first = gone[0] if gone and prefix is not None else 0
    layers = [i for i in kept_layers(n_layers, gone) if i >= first]
    out = []
    for i in range(0, windows.shape[0], BATCH):
        chunk = windows[i: i + BATCH]
        h = prefix[first, i: i + BATCH] if prefix is not None else model.model.embed_tokens(chunk[:, :-1])
        out.append(nll_from_hidden(model, run_stack(model, h, layers), chunk[:, 1:]))
    return torch.cat(out)


@torch.no_grad()
def layer_states(model: LlamaLM, windows: torch.Tensor) -> torch.Tensor:
    """Residual-stream states entering each layer and leaving the last: ``(L + 1, W, T, d)``."""
    n_layers = len(model.model.layers)
    per_layer: dict[int, list[torch.Tensor]] = {i: [] for i in range(n_layers + 1)}

    def record(i: int, x: torch.Tensor) -> None:
        per_layer[i].append(x)

    for i in range(0, windows.shape[0], BATCH):
        h = run_stack(model, model.model.embed_tokens(windows[i: i + BATCH, :-1]), range(n_layers), record=record)
        per_layer[n_layers].append(h)
    return torch.stack([torch.cat(per_layer[j]) for j in range(n_layers + 1)])


def perplexity_of(nll: torch.Tensor) -> float:
    """``exp(mean NLL)`` over windows (equal-length windows: the token-weighted perplexity)."""
    return math.exp(min(float(nll.mean()), 700.0))


def spread(nll: torch.Tensor) -> float:
    """Standard error of the mean window NLL (``std / sqrt(W)``; 0 for one window)."""
    return float(nll.std() / math.sqrt(nll.numel())) if nll.numel() > 1 else 0.0
