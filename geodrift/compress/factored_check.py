"""A factored save checked against its own manifest before a model is built from it.

``geodrift.compress.factorized.load_factored`` reads what ``compress share --save`` wrote:
``config.json`` (a Llama config plus ``geodrift_factored``: ``format``, ``dtype``, ``projections``
``{prefix: {"rank", "first", "second"}}``) and ``model.safetensors``. A damaged folder - a truncated
or foreign ``model.safetensors``, an unknown dtype, a missing or misshapen factor, a projection past
the last layer, a config of another width or an absurd layer count, an entry of the wrong type - is
refused here with one GeodriftError naming the file and the entry, before ``transformers`` is asked
to build anything (which would raise KeyError, AttributeError, TypeError or RuntimeError, or try to
allocate a billion layers).

Example:
    >>> check_spec("m/config.json", {"format": 1, "dtype": "float32", "projections": {}}, 1, ("float32",))
    {}
"""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from geodrift.errors import GeodriftError

# The config.json counts a Llama needs, each a positive integer; more layers than any model has is a damaged file.
_COUNTS = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "vocab_size")
MAX_LAYERS = 100_000
# A factored save's config.json is kilobytes (its projections' spec: ~100 bytes a projection); more is not one.
MAX_CONFIG_BYTES = 16 << 20
_FIX = "the save is damaged - write it again with geodrift compress share --save DIR"
# safetensors' dtype names -> torch's (the types a save can hold).
_STORED = {"F32": "torch.float32", "BF16": "torch.bfloat16", "F16": "torch.float16", "F64": "torch.float64"}

Header = dict[str, tuple[tuple[int, ...], str]]  # tensor name -> (shape, torch dtype name) from the file's header


def folder_path(folder: Any) -> Path:
    """``load_factored``'s argument as a Path: a str, a bytes path or any path-like object (``os.fspath``).

    Raises:
        GeodriftError: for anything else, or a path holding a NUL character.
    """
    try:
        text = os.fsdecode(os.fspath(folder))
    except TypeError:
        text = None
    if text is not None and "\x00" not in text and text:
        return Path(text)
    raise GeodriftError(f"load_factored({_short(folder)}): the folder must be a path (str, bytes or os.PathLike, no NUL "
                        f"character), got a {type(folder).__name__}")


def regular_file(path: Path, what: str, limit: int | None = None) -> int:
    """The size of ``path``, a regular file (never opened here: a FIFO or a device would block a read forever).

    Raises:
        GeodriftError: missing, not a regular file, or larger than ``limit`` bytes - naming the file.
    """
    try:
        info = os.stat(path)
    except OSError as error:
        raise GeodriftError(f"{path.parent}: not a factored geodrift model ({path.name}: "
                            f"{error.strerror or error}); write one with geodrift compress share --save DIR") from None
    if not stat.S_ISREG(info.st_mode):
        raise GeodriftError(f"{path}: {what} must be a regular file, found {_kind(info.st_mode)}; {_FIX}")
    if limit is not None and info.st_size > limit:
        raise GeodriftError(f"{path}: {info.st_size} bytes, more than a factored save's {what} holds (at most "
                            f"{limit}); {_FIX}")
    return info.st_size


def _kind(mode: int) -> str:
    kinds = {stat.S_IFIFO: "a FIFO (named pipe)", stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device",
             stat.S_IFSOCK: "a socket", stat.S_IFDIR: "a folder", stat.S_IFLNK: "a symbolic link"}
    return kinds.get(stat.S_IFMT(mode), "not a regular file")


def read_header(folder: Path) -> Header:
    """Every tensor's name, shape and dtype from model.safetensors' header - nothing of the data is read.

    Raises:
        GeodriftError: not a regular file, or a header safetensors cannot read (truncated, not safetensors).
    """
    from safetensors import safe_open

    path = folder / "model.safetensors"
    regular_file(path, "model.safetensors")
    header: Header = {}
    try:
        with safe_open(str(path), framework="pt") as handle:
            for name in handle.keys():
                part = handle.get_slice(name)
                header[name] = (tuple(int(n) for n in part.get_shape()), _STORED.get(part.get_dtype(),
                                                                                     part.get_dtype()))
    except Exception as error:  # safetensors' own error type, an OSError
        raise unreadable(folder, error) from None
    return header


def read_config(folder: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(config without geodrift_factored, geodrift_factored)`` from ``folder/config.json``, types checked.

    Raises:
        GeodriftError: a missing or unreadable config.json, one that is not a JSON object or has no
            ``geodrift_factored`` object, a count that is not a positive integer (or absurd), heads that
            do not divide the width.
    """
    path = folder / "config.json"
    if not folder.is_dir():
        raise GeodriftError(f"{folder}: not a factored geodrift model (not a folder); write one with geodrift "
                            "compress share --save DIR")
    regular_file(path, "config.json", MAX_CONFIG_BYTES)
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as error:
        raise GeodriftError(f"{folder}: not a factored geodrift model ({path.name}: "
                            f"{getattr(error, 'strerror', None) or error}); write one with "
                            "geodrift compress share --save DIR") from None
    if not isinstance(config, dict) or not isinstance(config.get("geodrift_factored"), dict):
        found = type(config.get("geodrift_factored")).__name__ if isinstance(config, dict) else type(config).__name__
        raise GeodriftError(f"{path}: not a factored geodrift model (geodrift_factored is {found}, not an object); "
                            "write one with geodrift compress share --save DIR")
    spec = config.pop("geodrift_factored")
    for key in _COUNTS:
        value = config.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise GeodriftError(f"{path}: {key} must be a positive integer, found {value!r}; {_FIX}")
    if config["num_hidden_layers"] > MAX_LAYERS:
        raise GeodriftError(f"{path}: num_hidden_layers = {config['num_hidden_layers']} is more than any model has "
                            f"(at most {MAX_LAYERS}); {_FIX}")
    kv = config.get("num_key_value_heads", config["num_attention_heads"])
    if isinstance(kv, bool) or not isinstance(kv, int) or kv < 1 or config["num_attention_heads"] % kv:
        raise GeodriftError(f"{path}: num_key_value_heads = {kv!r} must be a positive integer dividing "
                            f"num_attention_heads = {config['num_attention_heads']}; {_FIX}")
    if config["hidden_size"] % config["num_attention_heads"] and "head_dim" not in config:
        raise GeodriftError(f"{path}: num_attention_heads = {config['num_attention_heads']} does not divide "
                            f"hidden_size = {config['hidden_size']}; {_FIX}")
    return config, spec


def check_spec(path: str | Path, spec: dict[str, Any], version: int, dtypes: tuple[str, ...]) -> dict[str, Any]:
    """The ``projections`` of ``geodrift_factored``, every entry's type checked.

    Returns:
        ``{prefix: {"rank": int, "first": str, "second": str}}``.

    Raises:
        GeodriftError: another format version, an unknown dtype, ``projections`` or an entry of the wrong type,
            naming ``path`` and the entry.
    """
    if spec.get("format") != version:
        raise GeodriftError(f"{path}: geodrift_factored format {spec.get('format')!r}; this geodrift reads format "
                            f"{version} - save it again with this version")
    if spec.get("dtype") not in dtypes:
        raise GeodriftError(f"{path}: geodrift_factored dtype {spec.get('dtype')!r} is not one of "
                            f"{', '.join(dtypes)}; {_FIX}")
    projections = spec.get("projections")
    if not isinstance(projections, dict):
        raise GeodriftError(f"{path}: geodrift_factored projections must be an object {{prefix: entry}}, found "
                            f"{type(projections).__name__}; {_FIX}")
    for prefix, entry in projections.items():
        rank = entry.get("rank") if isinstance(entry, dict) else None
        if (not isinstance(entry, dict) or isinstance(rank, bool) or not isinstance(rank, int) or rank < 1
                or not all(isinstance(entry.get(side), str) for side in ("first", "second"))):
            raise GeodriftError(f"{path}: geodrift_factored projection {prefix!r} must be {{\"rank\": a positive "
                                f"integer, \"first\": a tensor name, \"second\": a tensor name}}, found "
                                f"{_short(entry)}; {_FIX}")
    return projections


def check_layers(path: str | Path, config: dict[str, Any], projections: dict[str, Any],
                 modules: Iterable[str], tensors: Iterable[str]) -> None:
    """Each projection names a module of the model, and the layers stored are the layers the config states -
    checked from the names alone, before a model of ``num_hidden_layers`` layers is laid out.

    Args:
        path: config.json, for the messages.
        config: the Llama config (counts already checked).
        projections: :func:`check_spec`'s entries.
        modules: the projection paths inside a layer (``self_attn.q_proj`` ...).
        tensors: the names of model.safetensors' tensors.

    Raises:
        GeodriftError: a prefix that is not ``model.layers.<i>.<projection>`` of a layer below
            ``num_hidden_layers``; tensors of a layer past it; a layer the config states without tensors.
    """
    n_layers = config["num_hidden_layers"]
    shape = re.compile(r"model\.layers\.(\d+)\.(" + "|".join(re.escape(m) for m in modules) + r")")
    for prefix in projections:
        match = shape.fullmatch(prefix)
        if match is None or int(match.group(1)) >= n_layers:
            where = "past the last layer" if match else "not a projection of a Llama layer"
            raise GeodriftError(f"{path}: geodrift_factored projection {prefix!r} is {where} (num_hidden_layers = "
                                f"{n_layers}); {_FIX}")
    stored = {int(m.group(1)) for m in (re.match(r"model\.layers\.(\d+)\.", name) for name in tensors) if m}
    if stored and max(stored) >= n_layers:
        raise GeodriftError(f"{path}: num_hidden_layers = {n_layers}, but model.safetensors holds layer "
                            f"{max(stored)}; {_FIX}")
    if len(stored) != n_layers:
        held = f"layers {min(stored)}..{max(stored)} ({len(stored)} in all)" if stored else "no layer"
        raise GeodriftError(f"{path}: num_hidden_layers = {n_layers}, but model.safetensors holds {held}; {_FIX}")


def check_widths(folder: Path, config: dict[str, Any], header: Header) -> None:
    """The embedding stored is ``(vocab_size, hidden_size)``, before a model of the config's widths is laid out.

    Raises:
        GeodriftError: naming the tensor, both shapes and the keys.
    """
    name = "model.embed_tokens.weight"
    if name not in header:
        raise missing_tensor(folder, name, "the model (config.json)")
    expected = (config["vocab_size"], config["hidden_size"])
    if header[name][0] != expected:
        raise GeodriftError(f"{folder / 'model.safetensors'}: {name} has shape {header[name][0]}, but config.json's "
                            f"vocab_size x hidden_size is {expected}; {_FIX}")


def check_tensor(folder: Path, name: str, stored: tuple[tuple[int, ...], str], expected: tuple[int, ...], dtype: Any,
                 entry: str) -> None:
    """A tensor of model.safetensors (its header's shape and dtype) has the shape the model needs and the saved dtype.

    Raises:
        GeodriftError: naming model.safetensors, the tensor, the entry that needs it, the shapes.
    """
    shape, stored_dtype = stored
    if tuple(shape) != tuple(expected):
        raise GeodriftError(f"{folder / 'model.safetensors'}: {name} has shape {tuple(shape)}, but {entry} "
                            f"needs {tuple(expected)} (config.json and the tensors disagree); {_FIX}")
    if stored_dtype != str(dtype):
        raise GeodriftError(f"{folder / 'model.safetensors'}: {name} is {stored_dtype}, but geodrift_factored dtype "
                            f"says {dtype}; {_FIX}")


def check_finite(folder: Path, name: str, tensor: Any) -> None:
    """A loaded tensor holds no NaN or Inf (a factored save of NaN factors is damaged, not a model).

    Raises:
        GeodriftError: naming model.safetensors and the tensor.
    """
    from geodrift.weights import all_finite

    if not all_finite(tensor):
        raise GeodriftError(f"{folder / 'model.safetensors'}: {name} holds NaN or Inf values; {_FIX}")


def missing_tensor(folder: Path, name: str, entry: str) -> GeodriftError:
    """The error for a tensor ``entry`` names that model.safetensors lacks."""
    return GeodriftError(f"{folder / 'model.safetensors'}: lacks {name}, which {entry} names; {_FIX}")


def unreadable(folder: Path, error: BaseException) -> GeodriftError:
    """The error for a model.safetensors that cannot be read (truncated, not safetensors, a folder)."""
    reason = str(error).splitlines()[0][:200] if str(error) else type(error).__name__
    return GeodriftError(f"{folder / 'model.safetensors'}: unreadable ({reason}); {_FIX}")


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:60] + "..."
