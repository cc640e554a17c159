"""One loaded model, its tokenizer and two disjoint text sets; forwards that skip layers by index.

Everything in ``geodrift.compress`` works on ONE model loaded once (:func:`load_setup`, through
``geodrift.pretrained``): geodrift's :class:`~geodrift.lm.llama.LlamaLM` for llama/mistral checkpoints,
or (pruning only) any other Hugging Face folder's ``transformers`` model behind the same interface
(:class:`~geodrift.lm.hf_causal.HFCausalLM`; :class:`LayerStack` is what pruning uses). Pruning never
copies the model - :func:`window_nll` runs the decoder stack over the kept layer indices only
(``run_layers``) - and shared bases overwrite projection weights in place and put the
originals back (:func:`~geodrift.compress.share.swapped_weights`).

Texts (deterministic, disjoint): the corpus of ``geodrift.lm.text.load_corpus`` (the embedded
stdlib-docs corpus by default; ``--corpus`` a text file, a folder of ``.txt`` or a WikiText folder).
*Calibration* windows are the first ``calib_windows`` consecutive windows of its training split,
*evaluation* windows the first ``eval_windows`` of its held-out split (WikiText: ``wiki.valid``);
the two splits share no document.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

import torch

from geodrift.errors import GeodriftError
from geodrift.io.checks import format_size
from geodrift.lm.hf_causal import HFCausalLM
from geodrift.lm.llama import LlamaLM
from geodrift.lm.text import encode_ids, eval_windows, load_corpus
from geodrift.lm.tokenizer import Tokenizer
from geodrift.pretrained import (
    model_from_checkpoint,
    model_parameters,
    open_model,
    tokenizer_for,
    weights_label,
)
from geodrift.weights import WeightSet

# Windows per forward call: (8, 128) tokens keep the (B, T, vocab) logits near 200 MB for a 49k vocabulary.
BATCH = 8


class LayerStack(Protocol):
    """What pruning needs of a model: ``LlamaLM`` and ``HFCausalLM`` both have it."""

    @property
    def n_layers(self) -> int: ...

    def embed(self, ids: torch.Tensor) -> torch.Tensor: ...

    def run_layers(self, h: torch.Tensor, layers: Iterable[int],
                   record: Callable[[int, torch.Tensor], None] | None = None) -> torch.Tensor: ...

    def logits(self, h: torch.Tensor) -> torch.Tensor: ...

    def weightset(self, origin: str = ...) -> WeightSet: ...


ModelT = TypeVar("ModelT", bound=LayerStack)


@dataclass
class Setup(Generic[ModelT]):
    """The model under compression and its texts.

    Attributes:
        model: the loaded model (eval mode, float32, CPU): a LlamaLM, or for another architecture's
            Hugging Face folder an HFCausalLM (``compress prune`` only).
        label: the checkpoint's name for tables (``SmolLM2-135M-Instruct.Q4_1.gguf (embedded default)``).
        config: the checkpoint's shape (``n_layers``, ``d_model``, ...), what ``--save`` writes.
        calib: ``(Wc, T + 1)`` calibration windows (training split).
        evaluation: ``(We, T + 1)`` held-out windows (validation split).
        corpus: the corpus's name and source, and its sha256.
        token_bytes: UTF-8 bytes per id (bits per byte).
        weights: how the weights were stored before geodrift dequantized them (every table's label;
            :func:`geodrift.pretrained.weights_label`).
    """

    model: ModelT
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
        return self.model.n_layers


def llama_only(setup: Setup[Any], command: str) -> Setup[LlamaLM]:
    """``setup`` when its model is geodrift's Llama; else a one-line error (``command`` needs its projections)."""
    if not isinstance(setup.model, LlamaLM):
        raise GeodriftError(f"MODEL {setup.label}: {command} runs llama/mistral checkpoints only (it rewrites their "
                            "projections); compress prune runs any transformers causal LM")
    return setup


def memory_estimate(cfg: Mapping[str, Any], params: int, seq_len: int, windows: int) -> int:
    """Bytes a compression run needs at most: the float32 model (``params`` parameters), one forward
    batch (logits, MLP and attention scores) and the per-layer states of ``windows`` windows (pruning's
    cached prefixes). ``cfg`` is the checkpoint's config (``d_model``, ``vocab_size``, ``d_ff``, ...).

    Example:
        >>> cfg = {"d_model": 64, "vocab_size": 100, "d_ff": 128, "n_heads": 4, "n_layers": 2}
        >>> memory_estimate(cfg, params=50_000, seq_len=16, windows=2)
        884032
    """
    d, vocab, heads, layers = (int(cfg[k]) for k in ("d_model", "vocab_size", "n_heads", "n_layers"))
    ff = int(cfg.get("d_ff") or 4 * d)  # GPT-2's n_inner: None means 4 d
    forward = BATCH * seq_len * (2 * vocab + 4 * ff + 8 * d) + BATCH * heads * seq_len * seq_len
    states = (layers + 1) * windows * seq_len * d
    return 4 * (params + forward + states)


def check_memory(cfg: Mapping[str, Any], label: str, params: int, seq_len: int, calib_windows: int,
                 eval_windows_count: int, max_memory: int) -> None:
    """Refuse, before anything is loaded, a run whose :func:`memory_estimate` exceeds ``max_memory`` bytes.

    Raises:
        GeodriftError: naming the options that set the size and ``--max-memory``.
    """
    need = memory_estimate(cfg, params, seq_len, max(calib_windows, eval_windows_count))
    if need > max_memory:
        raise GeodriftError(
            f"--seq-len {seq_len}, --calib-windows {calib_windows}, --eval-windows {eval_windows_count}: "
            f"{label} would need about {format_size(need)}, above --max-memory {format_size(max_memory)}; "
            "lower them or raise --max-memory")


def load_setup(path: str | Path | None, corpus: str | Path | None = None, *, seq_len: int = 128,
               calib_windows: int = 8, eval_windows_count: int = 16, max_memory: int | None = None,
               on_stage: Callable[[str], None] | None = None) -> Setup[LlamaLM | HFCausalLM]:
    """Load the model once and cut the calibration and evaluation windows.

    Args:
        path: checkpoint (None: the embedded SmolLM2-135M-Instruct).
        corpus: ``--corpus`` (None: the embedded stdlib-docs corpus).
        seq_len: tokens per window.
        calib_windows, eval_windows_count: how many windows of each.
        max_memory: refuse (before loading anything) a run whose :func:`memory_estimate` exceeds it.
        on_stage: told ``"loading the model"`` once every input has been checked (a status line that
            never precedes an error about the inputs).

    Raises:
        GeodriftError: an architecture neither geodrift's Llama nor transformers runs (transformers
            missing: names ``pip install 'geodrift[hf]'``), a config that does not match its tensors, a run
            above ``max_memory``, missing tokenizer, or a text too short for one window.
    """
    ckpt = open_model(path)
    if max_memory is not None:
        check_memory(ckpt.config, ckpt.label, model_parameters(ckpt), seq_len, calib_windows, eval_windows_count,
                     max_memory)
    tokenizer = tokenizer_for(path)
    text = load_corpus(corpus)
    if not text.train.strip() or not text.valid.strip():
        raise GeodriftError(f"--corpus {corpus}: empty training or held-out split; pass a text with content")
    calib = _windows(_encode_prefix(tokenizer, text.train, seq_len * calib_windows + 1), seq_len, calib_windows,
                     "--calib-windows", corpus)
    evaluation = _windows(_encode_prefix(tokenizer, text.valid, seq_len * eval_windows_count + 1), seq_len,
                          eval_windows_count, "--eval-windows", corpus)
    model_parameters(ckpt)  # a Llama config's sizes, checked against the tensors
    if tokenizer.vocab_size > int(ckpt.config["vocab_size"]):
        raise GeodriftError(f"MODEL {ckpt.label}: tokenizer has {tokenizer.vocab_size} ids but the model "
                            f"{ckpt.config['vocab_size']}; use the model's own tokenizer.json")
    if on_stage is not None:
        on_stage("loading the model")
    model = model_from_checkpoint(ckpt)
    if isinstance(model, HFCausalLM):
        model.check(evaluation[:1, :-1])  # layer by layer = the model's own forward, or refused
    return Setup(model, ckpt.label, dict(ckpt.config), calib, evaluation,
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
def nll_from_hidden(model: LayerStack, h: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean next-token NLL per window ``(B,)`` from final hidden states ``h (B, T, d)`` and ``targets (B, T)``.

    The log-softmax runs over the contiguous vocabulary axis of ``(B T, vocab)`` logits: faster on CPU
    than over the strided axis of ``(B, vocab, T)`` (benchmarks/RESULTS_share_speed.md), and closer to
    the float64 value (``tests/test_compress.py`` checks it on the embedded model).
    """
    logits = model.logits(h).float()  # (B, T, vocab)
    loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="none")  # (B T,)
    return loss.view(targets.shape).mean(1)


@torch.no_grad()
def window_nll(model: LayerStack, windows: torch.Tensor, removed: Iterable[int] = (),
               prefix: torch.Tensor | None = None) -> torch.Tensor:
    """Mean NLL (nats/token) of each window ``(W, T + 1)`` with the layers ``removed`` skipped: ``(W,)``.

    The model is not copied: the forward simply runs the kept layer indices. ``prefix`` (the full
    model's layer inputs on these windows, :func:`layer_states`) lets the forward start at the first
    removed layer, since everything before it is unchanged.
    """
    n_layers = model.n_layers
    gone = sorted(set(removed))
    first = gone[0] if gone and prefix is not None else 0
    layers = [i for i in kept_layers(n_layers, gone) if i >= first]
    out = []
    for i in range(0, windows.shape[0], BATCH):
        chunk = windows[i: i + BATCH]
        h = prefix[first, i: i + BATCH] if prefix is not None else model.embed(chunk[:, :-1])
        out.append(nll_from_hidden(model, model.run_layers(h, layers), chunk[:, 1:]))
    return torch.cat(out)


@torch.no_grad()
def layer_states(model: LayerStack, windows: torch.Tensor) -> torch.Tensor:
    """Residual-stream states entering each layer and leaving the last: ``(L + 1, W, T, d)``."""
    n_layers = model.n_layers
    per_layer: dict[int, list[torch.Tensor]] = {i: [] for i in range(n_layers + 1)}

    def record(i: int, x: torch.Tensor) -> None:
        per_layer[i].append(x)

    for i in range(0, windows.shape[0], BATCH):
        h = model.run_layers(model.embed(windows[i: i + BATCH, :-1]), range(n_layers), record=record)
        per_layer[n_layers].append(h)
    return torch.stack([torch.cat(per_layer[j]) for j in range(n_layers + 1)])


def perplexity_of(nll: torch.Tensor) -> float:
    """``exp(mean NLL)`` over windows (equal-length windows: the token-weighted perplexity)."""
    return math.exp(min(float(nll.mean()), 700.0))


def spread(nll: torch.Tensor) -> float:
    """Standard error of the mean window NLL (``std / sqrt(W)``; 0 for one window)."""
    return float(nll.std() / math.sqrt(nll.numel())) if nll.numel() > 1 else 0.0
