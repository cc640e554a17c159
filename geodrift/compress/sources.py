"""Where ``compress share`` calibrates and evaluates.

Text (``split``):

- ``sources`` (the default, embedded corpus only): calibration from the standard library's
  *docstrings*, evaluation on the *pydoc help topics* (the language reference) - two different
  sources of the shipped text, so that no held-out window is a paragraph of a topic the
  calibration saw. The two sets of paragraphs are disjoint (the corpus drops repeated paragraphs).
- ``interleaved``: the corpus's own training / held-out split (every tenth paragraph held out; a
  WikiText folder's train / valid files), as ``compress prune`` uses; required with ``--corpus``.

Evaluation windows are the first ``eval_windows`` consecutive windows of the evaluation text.
Calibration draw ``d`` is the ``d``-th block of ``calib_windows`` consecutive windows of the
calibration text (windows ``d Wc .. (d + 1) Wc - 1``): the draws are disjoint and deterministic.
(With the interleaved split, draw 0 - the start of the training text - shares its topics with the
first held-out windows; see benchmarks/RESULTS_compress.md.)
"""

from __future__ import annotations

import hashlib
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from geodrift.compress.model import Setup, _encode_prefix, check_memory
from geodrift.errors import GeodriftError
from geodrift.lm.llama import LlamaLM
from geodrift.lm.text import eval_windows, load_corpus, stdlib_documents
from geodrift.pretrained import (
    llama_from_checkpoint,
    llama_parameters,
    open_llama,
    tokenizer_for,
    weights_label,
)

SPLITS = ("sources", "interleaved")
def stdlib_sources() -> tuple[str, str]:
    """The embedded corpus's two sources: ``(docstrings text, pydoc topics text)``, paragraphs joined by blank lines."""
    try:
        from pydoc_data.topics import topics  # type: ignore[import-not-found]
    except ImportError:  # pragma: no cover - some minimal Pythons strip pydoc_data
        raise GeodriftError("--split sources: this Python has no pydoc_data (the help topics); use --split "
                            "interleaved") from None
    topic_paragraphs = {p.strip() for key in topics for p in re.split(r"\n\s*\n", topics[key]) if p.strip()}
    docs = stdlib_documents()
    return ("\n\n".join(d for d in docs if d not in topic_paragraphs),
            "\n\n".join(d for d in docs if d in topic_paragraphs))


@dataclass
class Texts:
    """Calibration draws and held-out windows.

    Attributes:
        draws: one ``(Wc, T + 1)`` tensor per calibration draw.
        evaluation: ``(We, T + 1)`` held-out windows.
        corpus: name, source, sha256, ``split``, ``calibration`` and ``evaluation`` (human-readable).
    """

    draws: list[torch.Tensor]
    evaluation: torch.Tensor
    corpus: dict[str, str]


def load_texts(tokenizer: object, corpus: str | Path | None, split: str, seq_len: int, calib_windows: int,
               eval_count: int, draws: int) -> Texts:
    """Cut the calibration draws and the evaluation windows (see the module docstring).

    Raises:
        GeodriftError: an unknown split, ``sources`` with ``--corpus``, or too little text.
    """
    if split not in SPLITS:
        raise GeodriftError(f"--split: unknown {split!r}; choose from {', '.join(SPLITS)}")
    if split == "sources":
        if corpus is not None:
            raise GeodriftError("--split sources: only the embedded corpus has two sources; with --corpus use "
                                "--split interleaved")
        calib_text, eval_text = stdlib_sources()
        name, source = "stdlib-docs", f"python {sys.version.split()[0]} stdlib docstrings + pydoc topics"
        described = ("stdlib docstrings", "pydoc help topics")
    else:
        text = load_corpus(corpus)
        calib_text, eval_text, name, source = text.train, text.valid, text.name, text.source
        described = (f"{name} training split", f"{name} held-out split")
    need = draws * calib_windows
    ids = _encode_prefix(tokenizer, calib_text, seq_len * need + 1)  # type: ignore[arg-type]
    available = (ids.numel() - 1) // seq_len
    if available < need:
        raise GeodriftError(f"--calib-windows {calib_windows}: the calibration text gives {available} windows of "
                            f"{seq_len} tokens, fewer than {draws} draw(s) of {calib_windows}; lower --calib-windows, "
                            "--calib-draws or --seq-len")
    windows = eval_windows(ids, seq_len, need)
    held = _encode_prefix(tokenizer, eval_text, seq_len * eval_count + 1)  # type: ignore[arg-type]
    if held.numel() < seq_len * eval_count + 1:
        raise GeodriftError(f"--eval-windows {eval_count}: the evaluation text gives {held.numel()} tokens, fewer "
                            f"than {eval_count} windows of {seq_len}; lower --eval-windows or --seq-len")
    digest = hashlib.sha256((calib_text + "\0" + eval_text).encode("utf-8")).hexdigest()
    info = {"name": name, "source": source, "sha256": digest, "split": split,
            "calibration": f"{described[0]}: draw d = its windows d*{calib_windows}..(d+1)*{calib_windows}-1",
            "evaluation": f"{described[1]}: its first {eval_count} windows"}
    blocks = [windows[d * calib_windows:(d + 1) * calib_windows] for d in range(draws)]
    return Texts(blocks, eval_windows(held, seq_len, eval_count), info)


def load_compress_setup(path: str | Path | None, corpus: str | Path | None = None, *, split: str = "sources",
                        seq_len: int = 128, calib_windows: int = 24, eval_count: int = 64,
                        draws: int = 1, max_memory: int | None = None,
                        on_stage: Callable[[str], None] | None = None) -> tuple[Setup[LlamaLM], Texts]:
    """Load the model once and cut its texts; ``setup.calib`` is the first draw.

    Args:
        max_memory: refuse (before loading the model) a run whose
            :func:`geodrift.compress.model.memory_estimate` exceeds it.
        on_stage: told ``"loading the model"`` once every input has been checked.

    Raises:
        GeodriftError: unsupported architecture, a config that does not match its tensors, a run above
            ``max_memory``, missing tokenizer, unknown split or too little text.
    """
    ckpt = open_llama(path)
    params = llama_parameters(ckpt)  # the config's sizes, checked against the tensors
    if max_memory is not None:
        check_memory(ckpt.config, ckpt.label, params, seq_len, calib_windows, eval_count, max_memory)
    tokenizer = tokenizer_for(path)
    texts = load_texts(tokenizer, corpus, split, seq_len, calib_windows, eval_count, draws)
    if tokenizer.vocab_size > int(ckpt.config["vocab_size"]):
        raise GeodriftError(f"MODEL {ckpt.label}: tokenizer has {tokenizer.vocab_size} ids but the model "
                            f"{ckpt.config['vocab_size']}; use the model's own tokenizer.json")
    if on_stage is not None:
        on_stage("loading the model")
    model = llama_from_checkpoint(ckpt)
    setup = Setup(model, ckpt.label, dict(ckpt.config), texts.draws[0], texts.evaluation, texts.corpus,
                  tokenizer.token_bytes(), weights_label(ckpt))
    return setup, texts
