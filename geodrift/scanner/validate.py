"""Validate what a checkpoint says about itself before any tensor is read.

Every value read from a header or a config (config.json, the shard index json, GGUF metadata and
tensor infos) is checked against the shapes it must explain. Each failure is one
:class:`GeodriftError` line naming the file, the key or tensor, what was expected and what was found.

- :func:`check_file` refuses a FIFO, device, socket or folder where a file is expected - by
  ``os.stat``, before anything opens it (opening a FIFO blocks forever);
- :func:`read_weight_map` checks an index json's ``weight_map`` (a mapping of names to shard files
  inside the folder);
- :func:`check_tensor_names` refuses tensor names that are not text (a corrupt header, not a
  name-mapping problem);
- :func:`check_config` checks layer/head counts (positive integers, heads divisible by kv heads)
  and their agreement with the Q, K, V and O shapes; projections with a zero-sized dimension are
  refused.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from geodrift.errors import GeodriftError
from geodrift.io.checks import check_file
from geodrift.weights import MOE_ROLES, split_expert_role

__all__ = ["check_file", "read_weight_map", "check_tensor_names", "check_counts", "check_shapes",
           "check_projections", "check_checkpoint"]

_INTEGER_KEYS = ("n_layers", "d_model", "n_heads", "n_kv_heads", "head_dim", "d_ff")
_PROJECTIONS = ("attn_q", "attn_k", "attn_v", "attn_o", "mlp_gate", "mlp_up", "mlp_down")


def read_weight_map(index: Path, folder: Path) -> dict[str, str]:
    """The ``weight_map`` of a shard index json: tensor name -> shard file name in ``folder``.

    Raises:
        GeodriftError: not JSON, no ``weight_map``, a ``weight_map`` that is not a mapping of names to
            file names, or a shard name that leaves the folder.
    """
    check_file(index, "shard index json")
    try:
        payload = json.loads(index.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise GeodriftError(f"{index}: not a valid shard index ({exc}); re-download it") from None
    weight_map = payload.get("weight_map") if isinstance(payload, dict) else None
    if not isinstance(weight_map, dict):
        found = "no weight_map" if weight_map is None else f"a {type(weight_map).__name__}"
        raise GeodriftError(
            f"{index}: weight_map must be a mapping of tensor name -> shard file, found {found}; re-download it"
        )
    for name, shard in weight_map.items():
        if not isinstance(shard, str) or not shard:
            raise GeodriftError(
                f"{index}: weight_map[{name!r}] must be a shard file name, found {shard!r}; re-download it"
            )
        if Path(shard).is_absolute() or ".." in Path(shard).parts:
            raise GeodriftError(
                f"{index}: weight_map[{name!r}] = {shard!r} points outside {folder}; shards must sit in the model folder"
            )
    return weight_map


def check_tensor_names(label: str, names: list[str]) -> None:
    """Refuse tensor names that are not printable text, or that occur twice: the header is corrupt (not a
    --names problem). A duplicated name is never resolved by picking one of the copies in silence.

    Raises:
        GeodriftError: naming the first such name (and, for a duplicate, the positions of both copies).
    """
    seen: dict[str, int] = {}
    for index, name in enumerate(names):
        if not name or "\ufffd" in name or not name.isprintable():
            raise GeodriftError(
                f"{label}: tensor name {name!r} is not text; the header is corrupt - re-download or re-convert the file"
            )
        if name in seen:
            raise GeodriftError(
                f"{label}: tensor name {name!r} occurs twice (tensors #{seen[name]} and #{index} of the header); "
                "which copy is meant is unknown - re-convert the file")
        seen[name] = index


def check_counts(label: str, config: dict[str, Any], sources: dict[str, str]) -> None:
    """Check that the layer/width/head counts a config states are positive integers, heads divisible by kv heads.

    Runs before the counts are used (the fused-qkv split, head_dim = d_model / n_heads).

    Args:
        label: the checkpoint, as messages name it.
        config: normalised hyperparameters (``Checkpoint.config``).
        sources: normalised key -> where it was read (``"config.json num_key_value_heads"``,
            ``"llama.attention.head_count_kv"``), for the messages.

    Raises:
        GeodriftError: naming the key, what was expected and what was found.
    """
    for key in _INTEGER_KEYS:
        value = config.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise GeodriftError(
                f"{label}: {sources.get(key, key)} must be a positive integer, found {value!r}; fix the config"
            )
    n_heads, n_kv = config.get("n_heads"), config.get("n_kv_heads")
    if n_heads is not None and n_kv is not None and n_heads % n_kv:
        raise GeodriftError(
            f"{label}: {sources.get('n_heads', 'n_heads')} = {n_heads} is not a multiple of "
            f"{sources.get('n_kv_heads', 'n_kv_heads')} = {n_kv}; fix the config"
        )


def check_head_width(label: str, config: dict[str, Any], sources: dict[str, str]) -> None:
    """Derive ``head_dim`` from a width found in the tensors (a config without ``hidden_size``), refusing a head
    count that does not divide it; the CLI's config.json and the Python API's ``config=`` both pass here.

    Raises:
        GeodriftError: naming the key, the head count and the width.

    Example:
        >>> check_head_width("m", {"n_heads": 3, "d_model": 32}, {"n_heads": "config num_attention_heads"})
        Traceback (most recent call last):
        geodrift.errors.GeodriftError: m: config num_attention_heads = 3 does not divide the width 32 (hidden size of \
the tensors); fix the config
    """
    n_heads, d_model = config.get("n_heads"), config.get("d_model")
    if "head_dim" in config or not isinstance(n_heads, int) or not isinstance(d_model, int) or n_heads < 1:
        return
    if d_model % n_heads:
        raise GeodriftError(f"{label}: {sources.get('n_heads', 'n_heads')} = {n_heads} does not divide the width "
                            f"{d_model} (hidden size of the tensors); fix the config")
    config["head_dim"] = d_model // n_heads


def check_shapes(label: str, config: dict[str, Any], shapes: dict[tuple[str, int], tuple[int, ...]],
                 sources: dict[str, str], tensors: dict[tuple[str, int], str]) -> None:
    """Check the projection shapes: non-empty 2-D, and explained by the head counts.

    Args:
        label: the checkpoint, as messages name it.
        config: normalised hyperparameters, already through :func:`check_counts`.
        shapes: canonical ``(role, layer)`` -> shape (HF layout, ``(d_out, d_in)``), headers only.
        sources: as for :func:`check_counts`.
        tensors: canonical key -> file tensor name, for the messages.

    Raises:
        GeodriftError: a projection with a zero-sized dimension, or a Q/K/V/O shape the counts do
            not explain (naming the tensor, the expected and the found size).
    """
    for (role, layer), shape in shapes.items():
        if role in _PROJECTIONS and (len(shape) != 2 or 0 in shape):
            raise GeodriftError(
                f"{label}:{tensors.get((role, layer), role)}: a projection must be a non-empty 2-D matrix, "
                f"found shape {tuple(shape)}; the file is corrupt or was exported without weights"
            )
    n_heads, n_kv, head_dim = config.get("n_heads"), config.get("n_kv_heads"), config.get("head_dim")
    if n_heads is None or head_dim is None:
        return
    heads_name = sources.get("n_heads", "n_heads")
    kv_name = sources.get("n_kv_heads", f"{heads_name} (no kv head count given)")
    expected = {"attn_q": (n_heads * head_dim, 0, heads_name), "attn_o": (n_heads * head_dim, 1, heads_name)}
    if n_kv is not None:
        expected.update({"attn_k": (n_kv * head_dim, 0, kv_name), "attn_v": (n_kv * head_dim, 0, kv_name)})
    for (role, layer), shape in sorted(shapes.items(), key=lambda item: (item[0][1], item[0][0])):
        if role not in expected or len(shape) != 2:
            continue
        size, axis, count_name = expected[role]
        if shape[axis] != size:
            side = "rows" if axis == 0 else "columns"
            raise GeodriftError(
                f"{label}:{tensors.get((role, layer), role)}: expected {size} {side} "
                f"({count_name} x head_dim {head_dim}), found shape {tuple(shape)}; the head counts in the "
                "config do not match the tensors - fix them"
            )


def check_projections(ckpt: Any) -> None:
    """Refuse projections that are not non-empty 2-D matrices, right after the plan is built.

    Raises:
        GeodriftError: naming the tensor and its shape.
    """
    for key, part in ckpt.plan.items():
        if (key[0] in _PROJECTIONS or key[0] in MOE_ROLES or split_expert_role(key[0])) and key[1] is not None:
            shape = ckpt.canonical_shape(key)
            if len(shape) != 2 or 0 in shape:
                raise GeodriftError(
                    f"{ckpt.label}:{part.name}: a projection must be a non-empty 2-D matrix, found shape "
                    f"{tuple(shape)}; the file is corrupt or was exported without weights"
                )


def check_checkpoint(ckpt: Any, sources: dict[str, str]) -> None:
    """:func:`check_shapes` for an opened Checkpoint (its plan built, no tensor read)."""
    keys = [key for key in ckpt.plan if key[0] in _PROJECTIONS and key[1] is not None]
    shapes = {key: ckpt.canonical_shape(key) for key in keys}
    tensors = {key: ckpt.plan[key].name for key in keys}
    check_shapes(ckpt.label, ckpt.config, shapes, sources, tensors)
