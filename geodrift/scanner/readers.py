"""Open a checkpoint of any supported format and read it as canonical tensors or a WeightSet.

Formats: a Hugging Face model folder (``config.json`` + ``model.safetensors`` or shards with
``model.safetensors.index.json``; ``pytorch_model*.bin`` as a fallback), a single
``.safetensors`` file, a ``.gguf`` file (any type ``gguf.quants`` dequantizes, mixed types in one
file), a PyTorch pickle (``weights_only=True`` only), and - for ``path=None`` - the embedded
SmolLM2-135M-Instruct GGUF. Tensors are streamed: each ``load`` maps and reads one tensor.

Public API::

    ckpt = open_checkpoint(path, names=None, architecture=None)   # Checkpoint
    ckpt.tensor_names(); ckpt.shape(name); ckpt.load(name)        # file tensors, float32, HF layout
    canonical_tensors(ckpt)    # file name -> canonical key, e.g. "blk.3.attn_q.weight" -> ("attn_q", 3)
    canonical_keys(ckpt)       # every key load_canonical accepts (fused tensors split)
    load_canonical(ckpt, key)  # one canonical tensor, Hugging Face transformers' layout
    canonical_shape(ckpt, key) # its shape, from headers only
    all_finite(tensor)         # the cheap NaN/Inf check every load runs
    norm_gain(ckpt, key)       # a norm's effective multiplicative gain (gemma: 1 + w)
    weightset(ckpt, view)      # WeightSet of the projections (7 per layer; MoE: router, experts), raw, folded or canonical
    validate_for_continuity(ws)  # >= 2 layers per role; the scan calls it after --roles/--layers

Canonical keys are listed in ``geodrift.scanner.names``. ``load_canonical`` is what a model
implementation calls (``geodrift.pretrained.llama_from_checkpoint``): projections come as ``nn.Linear.weight``
``(d_out, d_in)`` with Q/K rows in Hugging Face's rotary order (llama.cpp's permutation undone),
fused qkv/gate_up split, stacked experts sliced, gpt2's Conv1D transposed; norms as Hugging Face
stores them; and
``("lm_head", None)`` falls back to the embedding when the embeddings are tied.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from pathlib import Path

import torch

from geodrift.architectures import ARCHITECTURES as REGISTRY
from geodrift.errors import GeodriftError
from geodrift.io.checks import VIEWS as CHECKED_VIEWS
from geodrift.io.checks import missing_model
from geodrift.scanner.canonical_view import canonical_weightset, check_canonical, resolve_view
from geodrift.scanner.checkpoint import Checkpoint, Part
from geodrift.scanner.embedded import EMBEDDED_LABEL, embedded_model_path
from geodrift.scanner.fold import INPUT_SIDE, folded_loader
from geodrift.scanner.gguf_reader import GGUFCheckpoint
from geodrift.scanner.mapping import NameRule, load_name_mapping
from geodrift.scanner.names import GEMMA_FAMILY, CanonicalKey
from geodrift.scanner.safetensors_reader import PytorchCheckpoint, SafetensorsCheckpoint
from geodrift.scanner.validate import check_file, read_weight_map
from geodrift.weights import (
    MOE_ROLES,
    TRANSFORMER_ROLES,
    BadTensor,
    WeightEntry,
    WeightSet,
    all_finite,
    base_role,
    split_expert_role,
)

__all__ = [
    "Checkpoint", "open_checkpoint", "canonical_tensors", "canonical_keys", "canonical_shape", "load_canonical",
    "norm_gain", "weightset", "validate_for_continuity", "load_name_mapping", "all_finite",
]

# What --view accepts (cli/choices.py View mirrors it); defined with the option checks, which run before torch loads.
VIEWS = CHECKED_VIEWS
_PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt")
# Roles a checkpoint holds (besides each expert's: "expert_gate.3" ...).
_CHECKPOINT_ROLES = frozenset(TRANSFORMER_ROLES + MOE_ROLES)


def open_checkpoint(path: str | Path | None, names: str | Path | list[NameRule] | None = None,
                    architecture: str | None = None) -> Checkpoint:
    """Open a checkpoint; reads headers only.

    Args:
        path: a ``.gguf``, ``.safetensors`` or pickle file, a Hugging Face folder, or None for
            the embedded SmolLM2-135M-Instruct GGUF.
        names: a ``--names`` JSON path (or rules from :func:`load_name_mapping`), tried before
            the built-in tables.
        architecture: override the detected architecture (e.g. ``"gemma"`` for a bare
            safetensors file, whose names are llama's).

    Returns:
        A Checkpoint with ``format``, ``architecture``, ``config`` and a canonical plan.

    Raises:
        GeodriftError: missing path, unknown format, corrupt header, unknown tensor names.

    Example:
        >>> ckpt = open_checkpoint(None)  # the embedded SmolLM2-135M: headers only
        >>> ckpt.architecture, ckpt.config["n_layers"]
        ('llama', 30)
    """
    rules = load_name_mapping(names) if isinstance(names, (str, Path)) else names
    if path is None:
        return GGUFCheckpoint(embedded_model_path(), rules, EMBEDDED_LABEL, architecture)
    path = Path(path).expanduser()
    try:
        exists = path.exists()
    except OSError as error:  # a name too long, a loop of links: not a path the OS can look up
        raise GeodriftError(f"{path}: not a usable path ({error.strerror}); pass a .gguf/.safetensors file or a "
                            "model folder") from None
    if not exists:
        raise missing_model(path)
    if path.is_dir():
        return _open_folder(path, rules, architecture)
    check_file(path)  # a FIFO or device would block the magic sniff below forever
    config = path.parent / "config.json"
    config_path = config if config.exists() else None
    suffix = path.suffix.lower()
    if suffix == ".gguf" or _has_magic(path, b"GGUF"):
        return GGUFCheckpoint(path, rules, None, architecture)
    if suffix == ".safetensors":
        return SafetensorsCheckpoint(path, [path], config_path, rules, architecture)
    if suffix in _PICKLE_SUFFIXES:
        return PytorchCheckpoint(path, [path], config_path, rules, architecture)
    raise GeodriftError(
        f"{path}: unknown checkpoint format {suffix or '(no suffix)'}; use a .gguf, .safetensors, "
        ".bin/.pt pickle or a Hugging Face model folder"
    )


def _has_magic(path: Path, magic: bytes) -> bool:
    with path.open("rb") as handle:
        return handle.read(len(magic)) == magic


def _open_folder(path: Path, rules: list[NameRule] | None, architecture: str | None) -> Checkpoint:
    config = path / "config.json"
    config_path = config if config.exists() else None
    for index_name, cls in (("model.safetensors.index.json", SafetensorsCheckpoint),
                            ("pytorch_model.bin.index.json", PytorchCheckpoint)):
        index = path / index_name
        if index.exists():
            weight_map = read_weight_map(index, path)
            files = sorted({path / str(f) for f in weight_map.values()})
            if cls is SafetensorsCheckpoint:
                return SafetensorsCheckpoint(path, files, config_path, rules, architecture, weight_map)
            return PytorchCheckpoint(path, files, config_path, rules, architecture)
    shards = sorted(path.glob("*.safetensors"))
    if shards:
        return SafetensorsCheckpoint(path, shards, config_path, rules, architecture)
    pickles = sorted(p for p in path.iterdir() if p.suffix in _PICKLE_SUFFIXES and p.name.startswith("pytorch_model"))
    if pickles:
        return PytorchCheckpoint(path, pickles, config_path, rules, architecture)
    ggufs = sorted(path.glob("*.gguf"))
    if len(ggufs) == 1:
        return GGUFCheckpoint(ggufs[0], rules, None, architecture)
    raise GeodriftError(
        f"{path}: no model.safetensors, *.safetensors shards, pytorch_model.bin or single .gguf in this "
        "folder; point geodrift at the model file or its Hugging Face folder"
    )


def canonical_tensors(ckpt: Checkpoint) -> dict[str, CanonicalKey]:
    """Every mapped file tensor name -> its canonical key (fused tensors -> ``attn_qkv``/``mlp_gate_up``).

    Example:
        >>> canonical_tensors(open_checkpoint(None))["blk.3.attn_q.weight"]
        ('attn_q', 3)
    """
    return dict(ckpt.kinds_by_name)


def canonical_keys(ckpt: Checkpoint) -> list[CanonicalKey]:
    """Every key :func:`load_canonical` accepts, fused tensors split into their roles."""
    keys = list(ckpt.plan)
    if ckpt.config.get("tie_embeddings") and ("lm_head", None) not in ckpt.plan and ("embed", None) in ckpt.plan:
        keys.append(("lm_head", None))
    return sorted(keys, key=lambda k: (k[1] if k[1] is not None else -1, k[0]))


def _part(ckpt: Checkpoint, key: CanonicalKey) -> Part:
    if key in ckpt.plan:
        return ckpt.plan[key]
    if key == ("lm_head", None) and ("embed", None) in ckpt.plan:
        return ckpt.plan[("embed", None)]  # tied embeddings
    raise GeodriftError(
        f"{ckpt.label}: no tensor for {key[0]}"
        + (f" in layer {key[1]}" if key[1] is not None else "")
        + f" ({ckpt.architecture}); `geodrift inspect MODEL` lists the tensors it has"
    )


def canonical_shape(ckpt: Checkpoint, key: CanonicalKey) -> tuple[int, ...]:
    """The shape :func:`load_canonical` returns for ``key``, from headers only.

    Raises:
        GeodriftError: when the checkpoint has no tensor for ``key``.
    """
    _part(ckpt, key)  # raises for an absent key
    return ckpt.canonical_shape(key if key in ckpt.plan else ("embed", None))  # tied lm_head


def load_canonical(ckpt: Checkpoint, key: CanonicalKey) -> torch.Tensor:
    """One canonical tensor in Hugging Face transformers' layout, float32, checked to be finite.

    Args:
        ckpt: an open checkpoint.
        key: e.g. ``("attn_q", 0)``, ``("norm_mlp", 3)``, ``("embed", None)``.

    Returns:
        Projections ``(d_out, d_in)``; biases and norms ``(d,)``; embeddings ``(vocab, d_model)``.

    Raises:
        GeodriftError: the key is absent; BadTensor (a GeodriftError): the tensor holds NaN/Inf.

    Example:
        >>> load_canonical(open_checkpoint(None), ("attn_k", 0)).shape
        torch.Size([192, 576])
    """
    part = _part(ckpt, key)
    tensor = ckpt.load(part.name) if part.expert is None else ckpt.load_expert(part.name, part.expert)
    if part.transpose:
        tensor = tensor.T
    if part.rows is not None:
        tensor = tensor[part.rows[0]:part.rows[1]]
    tensor = tensor.contiguous()
    if not all_finite(tensor):  # BadTensor: what --skip-nonfinite skips (WeightSet.without_bad_tensors)
        raise BadTensor(
            f"{ckpt.label}:{part.name}: tensor contains NaN or Inf values; the checkpoint is corrupt or was "
            "saved mid-divergence - re-export it, exclude this projection with --roles/--layers, or skip it with "
            "--skip-nonfinite"
        )
    return tensor


def _layer_norm_gain(ckpt: Checkpoint, layer: int, kind: str) -> torch.Tensor:
    return norm_gain(ckpt, (kind, layer))


def norm_gain(ckpt: Checkpoint, key: CanonicalKey) -> torch.Tensor:
    """A norm's effective multiplicative gain: the stored weight, or ``1 + w`` for the gemma family.

    Args:
        ckpt: an open checkpoint.
        key: a norm key, e.g. ``("norm_attn", 0)``.

    Returns:
        ``(d,)`` float32.
    """
    gain = load_canonical(ckpt, key)
    return gain + 1.0 if ckpt.architecture in GEMMA_FAMILY else gain


def weightset(ckpt: Checkpoint, view: str | None = "raw") -> WeightSet:
    """The checkpoint's projections as a lazy WeightSet: Q, K, V, O, Gate, Up, Down per layer and, in a
    mixture-of-experts model, the router, each expert's Gate/Up/Down and the shared expert's.

    Args:
        ckpt: an open checkpoint.
        view: ``"raw"`` (stored weights), ``"folded"`` (norm gains folded in, see
            ``geodrift.scanner.fold``) or ``"canonical"`` (folded, then each layer at the canonical point of
            its gauge orbit, see ``geodrift.scanner.canonical_view``); None: the scan's default,
            ``canonical`` where geodrift has derived the model's gauge group, else ``raw`` with a note
            (:func:`geodrift.scanner.canonical_view.resolve_view`).

    Returns:
        A WeightSet with ``view`` set (and, where the default fell back to ``raw``, its note in ``notes``); each entry's loader reads one tensor, whose shape and
        finiteness ``WeightSet.__getitem__`` checks.

    Raises:
        GeodriftError: unknown view, no projections found, fewer than 2 layers, or shapes that
            differ across layers of one role.

    Example:
        >>> ws = weightset(open_checkpoint(None), "folded")
        >>> ws.shape("attn_k")
        (192, 576)
    """
    if view is not None and view not in VIEWS:
        raise GeodriftError(f"--view: unknown view {view!r}; use raw, folded or canonical")
    view, note = resolve_view(ckpt, view)
    if note is not None:
        return dataclasses.replace(weightset(ckpt, view), notes=(note,))
    if view == "canonical":
        check_canonical(ckpt)  # refuse an underived group before anything is read
        return canonical_weightset(ckpt, weightset(ckpt, "folded"), load_whole=functools.partial(load_canonical, ckpt))
    entries: dict[tuple[str, int], WeightEntry] = {}
    for (role, layer), part in ckpt.plan.items():
        if layer is None or (role not in _CHECKPOINT_ROLES and split_expert_role(role) is None):
            continue
        shape = ckpt.canonical_shape((role, layer))
        ckpt.check_readable(part.name)
        check_weight_dtype(ckpt.label, part.name, ckpt.dtype(part.name))
        if len(shape) != 2:
            raise GeodriftError(f"{ckpt.label}:{part.name}: expected a 2-D weight matrix, got shape {shape}")
        source = (f"{ckpt.label}:{part.name}" + (f"[expert {part.expert}]" if part.expert is not None else "")
                  + (f"[rows {part.rows[0]}:{part.rows[1]}]" if part.rows else ""))
        if view == "folded":
            _check_foldable(ckpt, role, layer)
            loader = folded_loader(ckpt, role, layer, _raw_loader(ckpt, role, layer),
                                   functools.partial(_layer_norm_gain, ckpt, layer))
        else:
            loader = _raw_loader(ckpt, role, layer)
        entries[(role, layer)] = WeightEntry((shape[0], shape[1]), source, loader,
                                             functools.partial(ckpt.warm, part.name) if part.expert is None else None)
    if not entries:
        sample = ", ".join(ckpt.tensor_names()[:6])
        raise GeodriftError(
            f"{ckpt.label}: no attention/MLP projections found (tensors: {sample}); pass --names "
            'mapping.json ({"regex with (\\\\d+)": "attn_q", ...}) to name them'
        )
    ws = WeightSet(entries, origin=ckpt.label, view=view, architecture=ckpt.architecture)
    validate_for_continuity(ws)
    return ws


def validate_for_continuity(ws: WeightSet) -> None:
    """Check that every role has at least 2 layers (continuity compares adjacent layers).

    ``weightset`` calls it; the scan calls it again after ``--roles``/``--layers`` selection.

    Raises:
        GeodriftError: naming the role, the layers present and the fix.
    """
    for role in ws.roles():
        layers = ws.layers(role)
        if len(layers) < 2:
            raise GeodriftError(
                f"{ws.origin}: {role} has {len(layers)} layer(s) ({layers}); continuity compares adjacent "
                "layers and needs at least 2 - select more layers (--layers) or a deeper model"
            )


def _check_foldable(ckpt: Checkpoint, role: str, layer: int) -> None:
    # A reading projection without its input norm would be "folded" with nothing: refuse rather than
    # label raw weights as folded (a --names mapping may leave the norms unmapped).
    kind = INPUT_SIDE.get(base_role(role))
    row = REGISTRY.get(ckpt.architecture)
    if row is not None and kind is not None and kind not in row.pre_norms:
        return  # the architecture reads the raw stream here (post-norms only): nothing to fold
    if kind is not None and (kind, layer) not in ckpt.plan:
        raise GeodriftError(
            f"{ckpt.label}: --view folded needs the {kind} gain of layer {layer} for {role}, but no tensor maps to it; "
            f"map the norms in --names (kinds {', '.join(sorted(set(INPUT_SIDE.values())))}) or use --view raw"
        )


def _raw_loader(ckpt: Checkpoint, role: str, layer: int) -> Callable[[], torch.Tensor]:
    return lambda: load_canonical(ckpt, (role, layer))


# Stored types that are not weights: integers and booleans (a GGUF's quantised Q*/IQ* blocks are weights).
_NOT_WEIGHTS = frozenset({"bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
                          "i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64"})


def check_weight_dtype(label: str, name: str, dtype: str) -> None:
    """Refuse a projection stored as integers or booleans (masks, indices, an unknown quantisation's raw codes):
    measured as numbers they would give a report about something that is not the weights.

    Raises:
        GeodriftError: naming the tensor and its dtype.

    Example:
        >>> check_weight_dtype("m.safetensors", "w", "BF16")
        >>> check_weight_dtype("m.safetensors", "w", "I64")
        Traceback (most recent call last):
        geodrift.errors.GeodriftError: m.safetensors:w: stored as I64 (integers or booleans), not as weights; geodrift \
scans floating-point or GGUF-quantised (Q4_0, Q8_0 ...) projections - convert the checkpoint, or map another tensor \
with --names
    """
    if dtype.lower().removeprefix("torch.") in _NOT_WEIGHTS:
        raise GeodriftError(f"{label}:{name}: stored as {dtype} (integers or booleans), not as weights; geodrift "
                            "scans floating-point or GGUF-quantised (Q4_0, Q8_0 ...) projections - convert the "
                            "checkpoint, or map another tensor with --names")
