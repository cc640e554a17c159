"""Safetensors (single file, or a Hugging Face folder with shards) and PyTorch pickle readers.

Safetensors: headers are validated once at open with ``safetensors.safe_open``. ``load(name)``
re-opens the tensor's shard with ``safe_open(...).get_slice(name)`` and reads it in row chunks of
a few MB, converting each chunk to float32 (bf16/f16/f8 included) straight into the output tensor:
no second full-size copy in the stored dtype is ever allocated. The library memory-maps the shard;
the pages of the tensor being read stay mapped until ``load`` returns (at most that one tensor in
its stored dtype), so a multi-GB checkpoint streams in about 1.5x the float32 size of its largest
tensor (benchmarks/RESULTS_memory.md compares this with reading byte ranges by hand).

PyTorch pickles are read only with ``torch.load(weights_only=True, mmap=True)``; a pickle that
needs arbitrary code to load is refused.
"""

from __future__ import annotations

import json
import math
import pickle
import struct
from pathlib import Path
from typing import Any

import torch

from geodrift.errors import GeodriftError
from geodrift.scanner.checkpoint import Checkpoint, check_expert, infer_config_from_shapes, warm_range
from geodrift.scanner.mapping import NameRule
from geodrift.scanner.names import (
    HF_IGNORED,
    LIBRARY_ARCH,
    guess_hf_architecture,
    hf_table,
    normalise_model_type,
)
from geodrift.scanner.state_dict import unwrap_state_dict
from geodrift.scanner.validate import (
    check_checkpoint,
    check_counts,
    check_file,
    check_head_width,
    check_projections,
    check_tensor_names,
)

_CHUNK_BYTES = 8 << 20  # float32 bytes per read/convert chunk
_MAX_HEADER_BYTES = 100 << 20  # safetensors' own limit on a header


def read_hf_config(path: Path) -> dict[str, Any]:
    """Read ``config.json``; multimodal configs are flattened onto their ``text_config``.

    Raises:
        GeodriftError: when the file is not a regular file or not valid JSON.
    """
    check_file(path, "config.json")
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise GeodriftError(f"{path}: not a readable config.json ({exc}); fix or remove the file") from None
    if not isinstance(raw, dict):
        raise GeodriftError(f"{path}: config.json must hold a JSON object")
    if isinstance(raw.get("text_config"), dict):
        merged = dict(raw)
        merged.update(raw["text_config"])
        raw = merged
    return raw


# normalised key -> config.json keys, first present wins (llama-style, then gpt2-style).
HF_CONFIG_KEYS = {
    "n_layers": ("num_hidden_layers", "n_layer"), "d_model": ("hidden_size", "n_embd"),
    "n_heads": ("num_attention_heads", "n_head"), "n_kv_heads": ("num_key_value_heads",),
    "head_dim": ("head_dim",), "d_ff": ("intermediate_size", "n_inner"), "vocab_size": ("vocab_size",),
    "rope_theta": ("rope_theta",), "norm_eps": ("rms_norm_eps", "layer_norm_epsilon", "layer_norm_eps"),
    "tie_embeddings": ("tie_word_embeddings",), "context_length": ("max_position_embeddings", "n_positions"),
    "n_experts": ("num_local_experts", "num_experts"),
}


def hf_config_sources(raw: dict[str, Any], where: str = "config.json") -> dict[str, str]:
    """Normalised key -> ``"config.json <key>"`` it was read from (for validation messages)."""
    sources = {}
    for ours, keys in HF_CONFIG_KEYS.items():
        hit = next((key for key in keys if raw.get(key) is not None), None)
        if hit is not None:
            sources[ours] = f"{where} {hit}"
    if "n_kv_heads" not in sources and "n_heads" in sources:
        sources["n_kv_heads"] = f"{where} num_key_value_heads (missing: defaults to {sources['n_heads'].split()[-1]})"
    return sources


def normalise_hf_config(raw: dict[str, Any]) -> dict[str, Any]:
    """Map config.json keys (llama-style and gpt2-style) onto geodrift's normalised names."""
    config: dict[str, Any] = {"raw": raw}
    for ours, keys in HF_CONFIG_KEYS.items():
        value = next((raw[key] for key in keys if raw.get(key) is not None), None)
        if value is not None:
            config[ours] = value
    n_heads = config.get("n_heads")
    if n_heads is not None:
        config.setdefault("n_kv_heads", n_heads)
        d_model = config.get("d_model")
        # Derived only from valid counts; invalid ones are refused by geodrift.scanner.validate.check_counts.
        if _positive_int(n_heads) and _positive_int(d_model):
            config.setdefault("head_dim", d_model // n_heads)
    return config


def _positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


class SafetensorsCheckpoint(Checkpoint):
    """A single ``.safetensors`` file or a Hugging Face folder of (sharded) safetensors."""

    def __init__(self, path: Path, files: list[Path], config_path: Path | None,
                 rules: list[NameRule] | None = None, architecture: str | None = None,
                 weight_map: dict[str, str] | None = None) -> None:
        self.path = path
        self.format = "hf-folder" if path.is_dir() else "safetensors"
        self.label = str(path)
        self._where: dict[str, Path] = {}
        self._shapes: dict[str, tuple[int, ...]] = {}
        self._dtypes: dict[str, str] = {}
        for file in files:
            self._read_header(file)
        check_tensor_names(self.label, list(self._shapes))
        if weight_map is not None:
            missing = sorted(set(weight_map) - set(self._where))
            if missing:
                raise GeodriftError(
                    f"{path}: model.safetensors.index.json lists {len(missing)} tensor(s) missing from the "
                    f"shards (e.g. {missing[0]!r}); a shard is incomplete - re-download the model"
                )
        _set_architecture_and_config(self, config_path, rules, architecture)

    def _read_header(self, file: Path) -> None:
        from safetensors import safe_open

        check_file(file, "safetensors shard")
        try:
            with safe_open(str(file), framework="pt") as handle:
                for name in handle.keys():
                    if name in self._where:
                        raise GeodriftError(f"{self.label}: tensor {name!r} is in two shards, {self._where[name].name} "
                                            f"and {file.name}; which copy is meant is unknown - re-download the model")
                    view = handle.get_slice(name)
                    self._shapes[name] = tuple(int(d) for d in view.get_shape())
                    self._dtypes[name] = str(view.get_dtype())
                    self._where[name] = file
        except FileNotFoundError:
            raise GeodriftError(f"{file}: shard not found; re-download the model or fix the index json") from None
        except GeodriftError:
            raise
        except Exception as exc:  # SafetensorError: header too large, truncated, invalid JSON ...
            raise GeodriftError(
                f"{file}: not a readable safetensors file ({str(exc).splitlines()[0] if str(exc) else type(exc).__name__}); "
                "the header is corrupt or the file is truncated - re-download or re-save it"
            ) from None

    def tensor_names(self) -> list[str]:
        return list(self._shapes)

    def dtype(self, name: str) -> str:
        self.shape(name)  # raises for an unknown name
        return self._dtypes[name]

    def shape(self, name: str) -> tuple[int, ...]:
        try:
            return self._shapes[name]
        except KeyError:
            raise GeodriftError(f"{self.label}: no tensor named {name!r}") from None

    def warm(self, name: str) -> None:
        """Read ``name``'s byte range through the page cache, keeping nothing (see Checkpoint.warm)."""
        file = self._where.get(name)
        if file is None:
            return
        try:
            with file.open("rb") as handle:
                (length,) = struct.unpack("<Q", handle.read(8))
                if length > _MAX_HEADER_BYTES:
                    return
                begin, end = (int(x) for x in json.loads(handle.read(length))[name]["data_offsets"])
        except (OSError, ValueError, KeyError, TypeError, struct.error):
            return  # load() names the problem
        warm_range(file, 8 + length + begin, end - begin)

    def load(self, name: str) -> torch.Tensor:
        """Read one tensor as float32 (row chunks through ``safe_open(...).get_slice``).

        Args:
            name: a tensor name of the checkpoint.

        Returns:
            A new float32 tensor of the header's shape.

        Raises:
            GeodriftError: an unknown name, or a shard that is gone, truncated, corrupt or replaced
                since open (a one-line message naming the file and tensor).
        """
        return self._read(name, None)

    def load_expert(self, name: str, expert: int) -> torch.Tensor:
        """Expert ``expert`` of a stacked ``(n_experts, d_out, d_in)`` tensor, reading only its rows."""
        check_expert(self.label, name, self.shape(name), expert)
        return self._read(name, expert)

    def load_rows(self, name: str, start: int, stop: int) -> torch.Tensor:
        """Rows ``[start, stop)`` of a 2-D tensor, reading only those rows."""
        return self._read(name, None, (start, stop))

    def _read(self, name: str, expert: int | None, rows: tuple[int, int] | None = None) -> torch.Tensor:
        from safetensors import SafetensorError, safe_open

        file = self._where.get(name)
        if file is None:
            raise GeodriftError(f"{self.label}: no tensor named {name!r}")
        expected = self._shapes[name]
        try:
            with safe_open(str(file), framework="pt") as handle:
                view = handle.get_slice(name)
                shape = tuple(int(d) for d in view.get_shape())
                if shape != expected:
                    raise ValueError(f"shape {shape} is not the {expected} read at open")
                if not shape:
                    return handle.get_tensor(name).to(torch.float32)
                if expert is not None:
                    shape = shape[1:]
                first, last = rows if rows is not None else (0, shape[0])
                last = min(last, shape[0])
                out = torch.empty((max(last - first, 0), *shape[1:]), dtype=torch.float32)
                step = max(1, _CHUNK_BYTES // (4 * max(1, math.prod(shape[1:]))))
                for start in range(first, last, step):
                    stop = min(start + step, last)
                    # stored dtype -> float32, one chunk at a time
                    out[start - first:stop - first] = view[start:stop] if expert is None else view[expert, start:stop]
        except FileNotFoundError:
            raise GeodriftError(f"{file}: shard not found (removed since open); re-download the model") from None
        except (SafetensorError, OSError, ValueError, RuntimeError, TypeError) as exc:
            reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise GeodriftError(
                f"{file}:{name}: cannot read the tensor data ({reason}); the file is truncated or corrupt - "
                "re-download or re-save it"
            ) from None
        return out


class StateDictCheckpoint(Checkpoint):
    """Tensors held in memory, named like a Hugging Face state dict (an ``nn.Module``'s, a loaded pickle's).

    Args:
        tensors: name -> tensor (any dtype or device; ``load`` returns a float32 CPU copy).
        label: how reports and errors name it.
        raw_config: config.json-style hyperparameters (``model.config.to_dict()``), or None.
        rules: ``--names`` rules tried before the built-in tables.
        architecture: override the architecture (else from ``model_type``, else guessed from the names).

    Raises:
        GeodriftError: unknown tensor names (pass ``names``) or an unknown architecture.
    """

    def __init__(self, tensors: dict[str, torch.Tensor], label: str, raw_config: dict[str, Any] | None = None,
                 rules: list[NameRule] | None = None, architecture: str | None = None,
                 path: Path | None = None, config_path: Path | None = None) -> None:
        self.path = path if path is not None else Path(label)
        self.format = "state-dict"
        self.label = label
        self._tensors = tensors
        _configure(self, dict(raw_config or {}), rules, architecture, config_path)

    def tensor_names(self) -> list[str]:
        return list(self._tensors)

    def shape(self, name: str) -> tuple[int, ...]:
        try:
            return tuple(self._tensors[name].shape)
        except KeyError:
            raise GeodriftError(f"{self.label}: no tensor named {name!r}") from None

    def load(self, name: str) -> torch.Tensor:
        self.shape(name)
        tensor = self._tensors[name].detach()
        where = f"{self.label}:{name}"
        if tensor.is_meta:
            raise GeodriftError(f"{where}: a meta tensor (a shape without data); load the weights before scanning")
        if tensor.layout != torch.strided:
            raise GeodriftError(f"{where}: a {str(tensor.layout).removeprefix('torch.')} tensor; pass .to_dense()")
        if tensor.is_complex() or tensor.dtype == torch.bool:
            raise GeodriftError(f"{where}: dtype {str(tensor.dtype).removeprefix('torch.')} is not a real weight; "
                                "pass real-valued (float or integer) weights")
        if tensor.is_quantized:
            tensor = tensor.dequantize()
        return tensor.to("cpu", torch.float32, copy=True)

    def load_expert(self, name: str, expert: int) -> torch.Tensor:
        check_expert(self.label, name, self.shape(name), expert)
        return self._tensors[name][expert].detach().to("cpu", torch.float32, copy=True)

    def dtype(self, name: str) -> str:
        self.shape(name)
        return str(self._tensors[name].dtype).removeprefix("torch.")

    def close(self) -> None:
        self._tensors = {}


class PytorchCheckpoint(StateDictCheckpoint):
    """A PyTorch pickle (``pytorch_model.bin``, ``*.pt``, ``*.pth``) read with ``weights_only=True``.

    Training checkpoints (``{"model": sd, "optimizer": ...}``, ``{"state_dict": ...}``, DDP's
    ``module.`` prefix) are unwrapped by :func:`geodrift.scanner.state_dict.unwrap_state_dict`.
    """

    def __init__(self, path: Path, files: list[Path], config_path: Path | None,
                 rules: list[NameRule] | None = None, architecture: str | None = None) -> None:
        tensors: dict[str, torch.Tensor] = {}
        for file in files:
            check_file(file, "PyTorch checkpoint")
            tensors.update(_safe_torch_load(file))
        raw = read_hf_config(config_path) if config_path is not None else {}
        super().__init__(tensors, str(path), raw, rules, architecture, path=path, config_path=config_path)
        self.format = "pytorch"


def _safe_torch_load(file: Path) -> dict[str, torch.Tensor]:
    # weights_only=True never runs pickled code; mmap=True needs the zip format (retry without it).
    refuse = (
        f"{file}: refused - this pickle holds more than tensors and would need arbitrary code to load "
        "(torch.load weights_only=True rejected it); convert it to safetensors in a trusted environment"
    )
    try:
        try:
            state = torch.load(str(file), map_location="cpu", weights_only=True, mmap=True)
        except RuntimeError as exc:
            if "mmap" not in str(exc) and "zip" not in str(exc):
                raise
            state = torch.load(str(file), map_location="cpu", weights_only=True)
    except pickle.UnpicklingError:
        raise GeodriftError(refuse) from None
    except Exception as exc:
        if "weights_only" in str(exc) or "Unsupported global" in str(exc):
            raise GeodriftError(refuse) from None
        raise GeodriftError(
            f"{file}: not a readable PyTorch checkpoint ({type(exc).__name__}); the file is truncated or "
            "corrupt - re-save it (safetensors preferred)"
        ) from None
    return unwrap_state_dict(state, str(file))


def _set_architecture_and_config(ckpt: Checkpoint, config_path: Path | None,
                                 rules: list[NameRule] | None, architecture: str | None) -> None:
    _configure(ckpt, read_hf_config(config_path) if config_path is not None else {}, rules, architecture,
               config_path)


def _configure(ckpt: Checkpoint, raw: dict[str, Any], rules: list[NameRule] | None, architecture: str | None,
               config_path: Path | None = None) -> None:
    # Architecture (override > config's model_type > names), normalised config and the canonical plan.
    config = normalise_hf_config(raw)
    sources = hf_config_sources(raw, str(config_path) if config_path is not None else "config")
    check_counts(ckpt.label, config, sources)
    model_type = raw.get("model_type")
    factored = raw.get("geodrift_factored")
    if isinstance(factored, dict) and isinstance(factored.get("base_model_type"), str):
        model_type = factored["base_model_type"]  # geodrift's factored save: its Llama's names, its factors said as such
    if architecture is not None:
        arch = architecture
    elif isinstance(model_type, str):
        arch = model_type if rules and model_type not in LIBRARY_ARCH else normalise_model_type(
            model_type, f"{config_path or ckpt.label} model_type")
    else:
        arch = guess_hf_architecture(ckpt.tensor_names())
    arch = {"gemma3_text": "gemma3"}.get(arch, arch)
    ckpt.architecture = arch
    if arch == "gpt2" or arch in ("gemma", "gemma2", "gemma3"):
        config.setdefault("tie_embeddings", True)  # these configs default to tied embeddings
    ckpt.config = config
    ckpt._build_plan(list(rules or []), hf_table(arch), HF_IGNORED, lenient=bool(rules))
    check_projections(ckpt)
    infer_config_from_shapes(ckpt, config)
    check_head_width(ckpt.label, config, sources)
    if arch == "gpt2" and "d_model" in config:
        config.setdefault("d_ff", 4 * config["d_model"])
    check_checkpoint(ckpt, sources)
