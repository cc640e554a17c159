"""The one door from checkpoints to models: the bridge between the scanner and the language model.

This module imports both ``geodrift.scanner`` (readers, name tables, the embedded SmolLM2-135M-Instruct
GGUF) and ``geodrift.lm`` (the Llama, the tokenizers, perplexity); ``lm`` imports neither ``scan``
nor ``sim``, and ``scan`` imports neither ``lm`` nor ``sim``. ``geodrift.compress`` reaches
checkpoints only through here.

- :func:`open_llama`: open a checkpoint and check it is a Llama-family model geodrift can run
  (:data:`SUPPORTED_ARCHITECTURES`);
- :func:`open_model`, :func:`model_from_checkpoint`: what ``compress prune`` runs - geodrift's Llama for
  llama/mistral (the fast path), any other Hugging Face folder through ``transformers``
  (:class:`~geodrift.lm.hf_causal.HFCausalLM`);
- :func:`llama_from_checkpoint`: a Llama-family checkpoint's weights in a ``LlamaLM``
  (its logits match ``transformers.LlamaForCausalLM``; a test checks it);
- :func:`tokenizer_for`: the tokenizer that goes with a checkpoint (a GGUF's own, or the
  ``tokenizer.json`` beside a Hugging Face folder);
- :func:`smollm2_tokenizer`: the embedded model's own tokenizer, built from the GGUF metadata
  (``tokenizer.ggml.tokens``/``merges``/``pre``/``token_type``) with SmolLM2's pre-tokenizer;
- :func:`smollm2_perplexity`: its held-out perplexity on a text;
- :func:`smollm2_reference`: its scan report (the same table as ``geodrift scan --view raw``, the paper's metric), cached;
- :func:`llama_state_dict`, :func:`llama_heads`, :func:`tokenizer_vocabulary`: what ``geodrift merge`` reads
  (a whole Llama-family state dict, its head counts, its tokenizer's tokens and merges).
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from geodrift.architectures import ARCHITECTURES as REGISTRY
from geodrift.continuity import MeasureSpec, Report
from geodrift.errors import GeodriftError
from geodrift.io.atomic import document, write_json
from geodrift.lm.hf_causal import HFCausalLM, load_hf_causal
from geodrift.lm.llama import LlamaLM
from geodrift.lm.text import eval_windows, perplexity
from geodrift.lm.tokenizer import Tokenizer, gguf_bpe_tokenizer
from geodrift.scanner.aligned import check_alignable, checkpoint_state_dict
from geodrift.scanner.checkpoint import Checkpoint
from geodrift.scanner.embedded import embedded_model_path
from geodrift.scanner.gguf_header import read_gguf_header
from geodrift.scanner.readers import canonical_keys, load_canonical, open_checkpoint, weightset
from geodrift.scanner.scan import load_weights, scan
from geodrift.weights import TRANSFORMER_ROLES

SUPPORTED_ARCHITECTURES = tuple(name for name, row in REGISTRY.items() if row.forward == "geodrift")  # the table's
# Why compress share (which rewrites the projections of geodrift's own Llama) cannot run each causal LM that
# transformers runs: what its forward has that a Llama's does not. Others get NOT_A_LLAMA.
NOT_LLAMA_BECAUSE = {
    "qwen2": "its Q, K and V projections carry biases",
    "qwen2_moe": "it is a mixture of experts, and its Q, K and V projections carry biases",
    "qwen3": "it normalises each head's queries and keys (q_norm, k_norm)",
    "gemma": "it scales the embeddings by sqrt(hidden size), its RMSNorm weights are offset by one and its MLP is "
             "GeLU",
    "gemma2": "it soft-caps attention and output logits, normalises after each block and alternates "
              "sliding-window layers",
    "gemma3": "it normalises each head's queries and keys, normalises after each block and alternates "
              "sliding-window layers with two rotary bases",
    "gpt2": "Q, K and V are one fused Conv1D (c_attn) with biases, positions are learned and its norms are LayerNorm",
    "phi3": "Q, K and V are one fused matrix (qkv_proj), as are Gate and Up (gate_up_proj)",
    "mixtral": "it is a mixture of experts (a router and per-expert MLPs)",
}
NOT_A_LLAMA = "its forward is not a Llama's"
_TOKENIZER_KEYS = frozenset({"tokenizer.ggml.tokens", "tokenizer.ggml.merges", "tokenizer.ggml.token_type"})


def open_llama(path: str | Path | None) -> Checkpoint:
    """Open ``path`` (None: the embedded SmolLM2) and check it is a Llama-family model geodrift can run.

    Args:
        path: a GGUF or ``.safetensors`` file or a Hugging Face folder; None: the embedded model.

    Returns:
        The open checkpoint (its ``label``, ``architecture`` and ``config`` say what it is).

    Raises:
        GeodriftError: for another architecture, naming the supported ones (and the reader's errors).

    Example:
        >>> open_llama(None).architecture
        'llama'
    """
    ckpt = open_checkpoint(path)
    # A mixture of experts converted to GGUF says "llama" (llama.cpp runs Mixtral as llama with experts).
    moe = any(kind == "router" for kind, _ in ckpt.plan)
    if ckpt.architecture not in SUPPORTED_ARCHITECTURES or moe:
        why = NOT_LLAMA_BECAUSE["mixtral"] if moe else NOT_LLAMA_BECAUSE.get(ckpt.architecture, NOT_A_LLAMA)
        raise GeodriftError(
            f"MODEL {ckpt.label}: compress share cannot run architecture {ckpt.architecture!r}"
            f"{' (a mixture of experts)' if moe else ''}: {why}, and it "
            f"rewrites the projections of geodrift's own Llama ({', '.join(SUPPORTED_ARCHITECTURES)} checkpoints: "
            "GGUF, safetensors or HF folder); compress prune runs other architectures' Hugging Face folders through "
            "transformers")
    return ckpt


def open_model(path: str | Path | None) -> Checkpoint:
    """Open ``path`` for ``compress prune``: a Llama-family checkpoint (geodrift's own Llama, the fast
    path) or a Hugging Face folder of any other architecture (run through ``transformers``).

    Raises:
        GeodriftError: another architecture outside a Hugging Face folder (GGUF or a bare
            ``.safetensors``: transformers needs the folder's ``config.json``), a mixture of experts
            (untested here), and the reader's errors.

    Example:
        >>> runs_in_geodrift(open_model(None))
        True
    """
    ckpt = open_checkpoint(path)
    if runs_in_geodrift(ckpt):
        return ckpt
    moe = any(kind == "router" for kind, _ in ckpt.plan)
    if not moe and path is not None and Path(path).is_dir() and (Path(path) / "config.json").is_file():
        return ckpt
    return open_llama(path)  # its error names the architecture (or the mixture of experts) and the formats


def runs_in_geodrift(ckpt: Checkpoint) -> bool:
    """Whether geodrift's own Llama runs this checkpoint (llama/mistral, not a mixture of experts)."""
    return ckpt.architecture in SUPPORTED_ARCHITECTURES and not any(kind == "router" for kind, _ in ckpt.plan)


def model_from_checkpoint(ckpt: Checkpoint, *, via_transformers: bool = False) -> LlamaLM | HFCausalLM:
    """The checkpoint's model: a :class:`LlamaLM` for llama/mistral (:func:`llama_from_checkpoint`), else
    the Hugging Face folder loaded by ``transformers`` (:class:`~geodrift.lm.hf_causal.HFCausalLM`).

    Args:
        ckpt: from :func:`open_model`.
        via_transformers: load a llama/mistral Hugging Face folder through transformers too (the
            parity check of the two paths).

    Raises:
        GeodriftError: transformers missing (names ``pip install 'geodrift[hf]'``) or the folder's weights
            incomplete.
    """
    if runs_in_geodrift(ckpt) and not via_transformers:
        return llama_from_checkpoint(ckpt)
    weights = weightset(ckpt, "raw")
    roles = [r for r in TRANSFORMER_ROLES if r in weights.roles()]
    return load_hf_causal(ckpt.path, weights.select(roles), f"{ckpt.label} ({ckpt.architecture})")


def model_parameters(ckpt: Checkpoint) -> int:
    """Parameters of the model :func:`model_from_checkpoint` builds (headers only; Llama sizes checked)."""
    if runs_in_geodrift(ckpt):
        return llama_parameters(ckpt)
    return sum(math.prod(ckpt.shape(name)) for name in ckpt.tensor_names())


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

    layers = sorted({layer for _, layer in ckpt.plan if layer is not None})  # never the config's claim (1e9 layers)
    projections = kinds([(role, layer) for role in TRANSFORMER_ROLES for layer in layers])
    embedding = kinds([("embed", None)])
    quantized = any(q in projections + embedding for q in _BITS)
    return (f"{projections} projections, {embedding} embedding, "
            f"{'dequantized to' if quantized else 'read as'} float32")


def llama_from_checkpoint(ckpt: Checkpoint) -> LlamaLM:
    """A :class:`~geodrift.lm.llama.LlamaLM` holding a pretrained Llama-architecture checkpoint's weights.

    Args:
        ckpt: an open checkpoint (e.g. ``open_checkpoint(None)``, the embedded SmolLM2-135M-Instruct
            GGUF); its ``config`` gives the shape.

    Returns:
        The model in eval mode, float32 (quantised GGUF tensors arrive dequantised).

    Raises:
        GeodriftError: when the checkpoint is not a Llama-family model or misses a tensor.

    Example:
        >>> model = llama_from_checkpoint(open_checkpoint(None))  # doctest: +SKIP
    """
    if ckpt.architecture not in SUPPORTED_ARCHITECTURES:
        raise GeodriftError(f"{ckpt.label}: architecture {ckpt.architecture!r} is not Llama-style; the simulator's "
                            "model loads llama/mistral checkpoints only")
    tie = bool(ckpt.config.get("tie_embeddings", False)) or ("lm_head", None) not in set(canonical_keys(ckpt))
    model = llama_shell(ckpt, tie)
    with torch.no_grad():
        model.model.embed_tokens.weight.copy_(load_canonical(ckpt, ("embed", None)))
        if not tie:
            model.lm_head.weight.copy_(load_canonical(ckpt, ("lm_head", None)))
        model.model.norm.weight.copy_(load_canonical(ckpt, ("norm_final", None)))  # type: ignore[operator]
        for layer_idx, layer in enumerate(model.model.layers):
            layer.input_layernorm.weight.copy_(load_canonical(ckpt, ("norm_attn", layer_idx)))  # type: ignore[union-attr,operator]
            layer.post_attention_layernorm.weight.copy_(load_canonical(ckpt, ("norm_mlp", layer_idx)))  # type: ignore[union-attr,operator]
            for role in TRANSFORMER_ROLES:
                model.projection(role, layer_idx).weight.copy_(load_canonical(ckpt, (role, layer_idx)))
    return model.eval()


def llama_shell(ckpt: Checkpoint, tie: bool) -> LlamaLM:
    """A :class:`LlamaLM` of the checkpoint's shape and config (RoPE base, norm epsilon), weights zero, to be filled.

    Raises:
        GeodriftError: as :func:`llama_parameters` (the config's sizes checked against the tensors first).
    """
    if ckpt.architecture not in SUPPORTED_ARCHITECTURES:
        raise GeodriftError(f"{ckpt.label}: architecture {ckpt.architecture!r} is not Llama-style; the simulator's "
                            "model loads llama/mistral checkpoints only")
    cfg = ckpt.config
    llama_parameters(ckpt)  # the config's sizes against the tensors, before anything is allocated
    return LlamaLM(cfg["vocab_size"], cfg["d_model"], cfg["n_layers"], cfg["n_heads"], cfg["d_ff"],
                   n_kv_heads=cfg.get("n_kv_heads") or cfg["n_heads"], rope_theta=float(cfg.get("rope_theta", 1e4)),
                   norm_eps=float(cfg.get("norm_eps", 1e-5)), tie_embeddings=tie, init_std=0.0)


def llama_parameters(ckpt: Checkpoint) -> int:
    """The parameter count of the ``LlamaLM`` that :func:`llama_from_checkpoint` would build, after
    checking every size the config gives against the checkpoint's tensor shapes (headers only).

    A config that claims 1e9 layers, or a width its tensors do not have, is refused here, before
    any allocation.

    Raises:
        GeodriftError: not a Llama-family checkpoint; a config size that is missing, not a positive
            integer, or disagrees with a tensor (named, with both shapes); a missing tensor.
    """
    if ckpt.architecture not in ("llama", "mistral"):
        raise GeodriftError(f"{ckpt.label}: architecture {ckpt.architecture!r} is not Llama-style; the simulator's "
                            "model loads llama/mistral checkpoints only")
    cfg = ckpt.config
    size = {}
    for key in ("vocab_size", "d_model", "n_layers", "n_heads", "d_ff"):
        value = cfg.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise GeodriftError(f"{ckpt.label}: config {key} must be a positive integer, found {value!r}")
        size[key] = value
    d, heads = size["d_model"], size["n_heads"]
    kv = cfg.get("n_kv_heads") or heads
    head_dim = cfg.get("head_dim") or d // heads
    if not all(isinstance(v, int) and v > 0 for v in (kv, head_dim)) or head_dim * heads != d:
        raise GeodriftError(f"{ckpt.label}: head_dim {head_dim!r} x {heads} heads != d_model {d}; check the config")
    present = sorted({layer for _, layer in ckpt.plan if layer is not None})
    if len(present) != size["n_layers"] or present != list(range(len(present))):
        found = f"layers {present[0]}..{present[-1]} ({len(present)})" if present else "no layers"
        where = (f"{ckpt.path / 'config.json'} num_hidden_layers" if (ckpt.path / "config.json").is_file()
                 else f"{ckpt.label}: block_count" if ckpt.format == "gguf" else f"{ckpt.label}: num_hidden_layers")
        raise GeodriftError(f"{where} = {size['n_layers']} layers, but the tensors hold {found}; fix the config")
    q, kvr, ff = heads * head_dim, kv * head_dim, size["d_ff"]
    per_layer = {"attn_q": (q, d), "attn_k": (kvr, d), "attn_v": (kvr, d), "attn_o": (d, q),
                 "mlp_gate": (ff, d), "mlp_up": (ff, d), "mlp_down": (d, ff), "norm_attn": (d,), "norm_mlp": (d,)}
    expected: dict[tuple[str, int | None], tuple[int, ...]] = {
        ("embed", None): (size["vocab_size"], d), ("norm_final", None): (d,),
        **{(kind, layer): shape for layer in present for kind, shape in per_layer.items()}}
    if ("lm_head", None) in ckpt.plan:
        expected[("lm_head", None)] = (size["vocab_size"], d)
    for canonical, wanted in expected.items():
        if canonical not in ckpt.plan:
            where = "" if canonical[1] is None else f" of layer {canonical[1]}"
            raise GeodriftError(f"{ckpt.label}: no tensor for {canonical[0]}{where}; a Llama checkpoint needs every "
                                "projection, norm and the embedding")
        actual = tuple(ckpt.canonical_shape(canonical))
        if actual != wanted:
            raise GeodriftError(f"{ckpt.label}:{ckpt.plan[canonical].name}: shape {actual} but the config gives {wanted} "
                                "(d_model, heads, d_ff, vocab); the config does not describe these tensors")
    return sum(math.prod(shape) for shape in expected.values())


def gguf_tokenizer(path: str | Path) -> Tokenizer:
    """The BPE tokenizer stored in a GGUF file's metadata, with the pre-tokenizer its ``pre`` names.

    Raises:
        GeodriftError: when the file has no GPT-2-style (byte-level BPE) tokenizer.
    """
    path = Path(path)
    meta: dict[str, Any] = read_gguf_header(path, arrays=_TOKENIZER_KEYS).metadata
    if meta.get("tokenizer.ggml.model") != "gpt2" or not isinstance(meta.get("tokenizer.ggml.merges"), list):
        raise GeodriftError(f"{path}: no byte-level BPE tokenizer (tokenizer.ggml.model = gpt2 with merges) in the "
                            "GGUF metadata; pass a GGUF converted with its tokenizer")
    return gguf_bpe_tokenizer(meta["tokenizer.ggml.tokens"], meta["tokenizer.ggml.merges"],
                              str(meta.get("tokenizer.ggml.pre", "default")), meta.get("tokenizer.ggml.token_type"))


# What a Hugging Face folder's tokenizer is made of (AutoTokenizer reads these); a saved model keeps those it had.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
                   "vocab.json", "merges.txt", "tokenizer.model", "chat_template.jinja", "chat_template.json")


def keep_tokenizer(path: str | Path | None, folder: str | Path) -> list[str]:
    """Put the checkpoint's tokenizer into ``folder`` (a model written from it), so the folder is usable alone.

    A Hugging Face folder's (or a ``.safetensors`` file's folder's) :data:`TOKENIZER_FILES` are copied
    byte for byte; a GGUF file (and the embedded default, ``path=None``) gets its own BPE written as
    ``tokenizer.json``.

    Args:
        path: the checkpoint the model was loaded from (as given to :func:`tokenizer_for`).
        folder: the folder being written (an existing file of the same name is never replaced).

    Returns:
        The names of the files written, in :data:`TOKENIZER_FILES` order.

    Example:
        >>> import tempfile
        >>> keep_tokenizer(None, tempfile.mkdtemp())
        ['tokenizer.json']
    """
    import shutil
    from functools import partial

    from geodrift.io.atomic import write_with

    folder = Path(folder)
    if path is None or Path(path).suffix.lower() == ".gguf":
        backend = tokenizer_for(path).backend
        if backend is None or (folder / "tokenizer.json").exists():
            return []
        write_with(folder / "tokenizer.json", lambda tmp: backend.save(str(tmp)))
        return ["tokenizer.json"]
    source = Path(path) if Path(path).is_dir() else Path(path).parent
    written = []
    for name in TOKENIZER_FILES:
        if (source / name).is_file() and not (folder / name).exists():
            write_with(folder / name, partial(shutil.copyfile, source / name))
            written.append(name)
    return written


def tokenizer_for(path: str | Path | None) -> Tokenizer:
    """The tokenizer that goes with a checkpoint.

    A GGUF file (and the embedded default, ``path=None``) carries its own BPE; a Hugging Face folder
    or a ``.safetensors`` file needs a ``tokenizer.json`` beside it (the folder's, or the file's folder's).

    Raises:
        GeodriftError: when no tokenizer is found (names the file to add).

    Example:
        >>> tokenizer_for(None).vocab_size
        49152
    """
    if path is None:
        return smollm2_tokenizer()
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


def smollm2_tokenizer() -> Tokenizer:
    """The embedded SmolLM2-135M-Instruct's own tokenizer (SmolLM2's pre-tokenizer: digits split one by one)."""
    return gguf_tokenizer(embedded_model_path())


def smollm2_perplexity(text: str, seq_len: int = 128, max_windows: int = 32) -> dict[str, float]:
    """Held-out perplexity of the embedded SmolLM2-135M-Instruct on ``text`` with its own tokenizer.

    Args:
        text: held-out text (e.g. the simulator corpus's validation split).
        seq_len: tokens per window (context); windows are consecutive.
        max_windows: cap on the number of windows (CPU time).

    Returns:
        ``perplexity()``'s dict (``nll``, ``ppl``, ``tokens``, ``bits_per_byte``).
    """
    tokenizer = smollm2_tokenizer()
    ids = torch.tensor(tokenizer.encode(text), dtype=torch.int64)
    model = llama_from_checkpoint(open_checkpoint(None))
    return perplexity(model, eval_windows(ids, seq_len, max_windows), tokenizer.token_bytes(), batch=8)


def smollm2_reference(out: str | Path | None, spec: MeasureSpec,
                      progress: Callable[[int, int, str], None] | None = None) -> Report:
    """The embedded SmolLM2-135M-Instruct's scan (the same table as ``geodrift scan --view raw``, the paper's metric), cached in ``out``.

    Args:
        out: folder of the cache file ``smollm2-135m_scan_k{k}_n{null_draws}_s{seed}.json``; None: scan in
            memory and write nothing (``geodrift simulate transformer`` without ``--out``).
        spec: what to measure.
        progress: called with ``(done, total, "role[layer]")`` after each matrix when it has to scan.
    """
    path = None if out is None else Path(out) / f"smollm2-135m_scan_k{spec.k}_n{spec.null_draws}_s{spec.seed}.json"
    if path is not None and path.exists():
        try:
            return Report.from_dict(json.loads(path.read_text(encoding="utf-8")))
        except (json.JSONDecodeError, GeodriftError):
            pass  # a stale cache from another version: scan again
    weights, heads = load_weights(None, "raw")  # the paper's metric, whatever the scan's default view
    done = [0]

    def step(label: str) -> None:
        done[0] += 1
        if progress is not None:
            progress(done[0], len(weights), label)

    report = scan(weights, spec, heads=heads, progress=step)
    if path is not None:
        write_json(path, document("continuity_report", report.to_dict()))
    return report


def llama_state_dict(ckpt: Checkpoint) -> dict[str, torch.Tensor]:
    """Every tensor of a llama-family checkpoint, Hugging Face-named, float32, checked finite (a tied head left out).

    Example:
        >>> sorted(llama_state_dict(open_checkpoint(None)))[:1]  # doctest: +SKIP
        ['model.embed_tokens.weight']
    """
    return checkpoint_state_dict(ckpt)


def llama_heads(ckpt: Checkpoint, option: str) -> tuple[int, int]:
    """``(n_heads, n_kv_heads)`` of a checkpoint whose gauge group geodrift aligns (llama/mistral, no biases, no
    q/k or post norms, no experts).

    Raises:
        GeodriftError: one line naming the model, ``option`` and what is not handled.

    Example:
        >>> llama_heads(open_checkpoint(None), "merge")
        (9, 3)
    """
    return check_alignable(ckpt, option)


def tokenizer_vocabulary(path: str | Path | None) -> tuple[list[str], list[str]] | None:
    """A checkpoint's tokenizer as ``(tokens by id, merges as "a b")``, or None where it has none.

    A GGUF file (and the embedded default, ``path=None``) is read from its metadata; a Hugging Face folder
    (or a ``.safetensors`` file's folder) from its ``tokenizer.json`` (``model.vocab``, ``model.merges`` and
    the added tokens). Two checkpoints tokenize alike when both lists are equal.

    Raises:
        GeodriftError: a ``tokenizer.json`` that is not JSON or has no ``model.vocab``.

    Example:
        >>> tokens, merges = tokenizer_vocabulary(None)
        >>> len(tokens), tokens[0]
        (49152, '<|endoftext|>')
    """
    source = embedded_model_path() if path is None else Path(path)
    if source.suffix.lower() == ".gguf":
        meta: dict[str, Any] = read_gguf_header(source, arrays=_TOKENIZER_KEYS).metadata
        tokens = meta.get("tokenizer.ggml.tokens")
        if not isinstance(tokens, list):
            return None
        merges = meta.get("tokenizer.ggml.merges")
        return [str(t) for t in tokens], [str(m) for m in merges] if isinstance(merges, list) else []
    folder = source if source.is_dir() else source.parent
    file = folder / "tokenizer.json"
    if not file.is_file():
        return None
    try:
        payload = json.loads(file.read_text(encoding="utf-8"))
        vocab = dict(payload["model"]["vocab"])
    except (ValueError, KeyError, TypeError, UnicodeDecodeError):
        raise GeodriftError(f"{file}: not a tokenizer.json with a model.vocab; fix or remove it") from None
    for added in payload.get("added_tokens") or []:
        if isinstance(added, dict) and "content" in added and "id" in added:
            vocab.setdefault(str(added["content"]), int(added["id"]))
    by_id = sorted(vocab.items(), key=lambda item: item[1])
    merges = [m if isinstance(m, str) else " ".join(map(str, m)) for m in payload["model"].get("merges") or []]
    return [token for token, _ in by_id], merges
