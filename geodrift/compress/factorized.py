"""A compressed model: applied to the loaded Llama for evaluation, written small on disk, loaded back.

:class:`Compressed` describes a compression as changes to the one loaded model: low-rank factors
per projection (``W ~ second @ first``; a shared basis is the same tensor object in several
layers), removed layers, and replaced parameters (LaCo merges). :func:`applied` swaps the
projections for :class:`LowRankLinear` modules (the forward then costs ``r (d_in + d_out)`` per
token, not ``d_in d_out``) and puts everything back on exit.

On disk (:func:`save_factored`), a Hugging Face-style folder:

- ``model.safetensors``: every tensor of the model except the compressed projections' weights; for
  each of those, ``<projection>.first.weight (r, d_in)`` and ``<projection>.second.weight (d_out, r)``,
  except that a basis shared by several layers is stored once, as ``geodrift.shared.<k>.weight``;
  removed layers are left out and the rest renumbered 0..L-n-1.
- ``config.json``: the ``LlamaConfig`` plus ``geodrift_factored``: ``format`` (1), ``dtype`` and
  ``projections``: ``{projection name: {"rank", "first", "second"}}`` naming the tensor of each factor,
  except that ``model_type`` and ``architectures`` are :data:`FACTORED_MODEL_TYPE` and
  :data:`FACTORED_ARCHITECTURE` (the Llama's own are kept in ``geodrift_factored`` as ``base_model_type``
  and ``base_architectures``; not ``model_type``, which transformers' ``LlamaConfig.from_pretrained`` would
  take for the config itself): a model type transformers does not know, so
  ``AutoModelForCausalLM.from_pretrained(folder)`` refuses the folder with a message naming
  :func:`load_factored`, instead of loading a Llama whose compressed projections it would draw at random.
  (Asking for ``LlamaForCausalLM`` by name still builds one, under transformers' warning that names the
  model type, and so :func:`load_factored`.)

:func:`load_factored` builds a ``transformers.LlamaForCausalLM`` from it with those projections
replaced by :class:`LowRankLinear` (shared factors are one module, so they stay tied).
:func:`save_dense` writes the plain dense folder instead (factors multiplied out).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from geodrift.compress.model import Setup, kept_layers
from geodrift.errors import GeodriftError
from geodrift.io.atomic import write_json, write_with
from geodrift.lm.hf import hf_config
from geodrift.lm.llama import LlamaLM
from geodrift.weights import HF_LLAMA_PROJECTIONS

FORMAT = 1
# config.json's model_type and architectures: transformers refuses them ("has model type `...` but Transformers does
# not recognize this architecture"), and its message then shows this line.
FACTORED_MODEL_TYPE = "geodrift-factored: load it with geodrift.compress.factorized.load_factored"
FACTORED_ARCHITECTURE = "GeodriftFactoredLlama"
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}

Factors = tuple[torch.Tensor, torch.Tensor]  # (second (d_out, r), first (r, d_in))


class LowRankLinear(nn.Module):
    """``second(first(x))``: a bias-free ``Linear(d_in, d_out)`` of rank r, as two Linears.

    Example:
        >>> m = LowRankLinear(torch.ones(3, 2), torch.ones(2, 4))
        >>> m(torch.ones(1, 4)).tolist()
        [[8.0, 8.0, 8.0]]
    """

    def __init__(self, second: torch.Tensor | nn.Linear, first: torch.Tensor | nn.Linear) -> None:
        super().__init__()
        self.first = first if isinstance(first, nn.Linear) else _linear(first)
        self.second = second if isinstance(second, nn.Linear) else _linear(second)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.second(self.first(x))


def _linear(weight: torch.Tensor) -> nn.Linear:
    # skip_init: the random initialisation a Linear draws would be thrown away (it cost 9 s per compress share run)
    layer = nn.utils.skip_init(nn.Linear, weight.shape[1], weight.shape[0], bias=False)
    layer.weight = nn.Parameter(weight.detach(), requires_grad=False)
    return layer


@dataclass
class Compressed:
    """One compressed configuration of the loaded model.

    Attributes:
        method: its name; ratio: fraction of the projection parameters removed (nominal).
        factors: ``{(role, layer): (second (d_out, r), first (r, d_in))}``.
        removed: layers left out.
        replaced: ``{parameter name: tensor}`` overriding the loaded model's (LaCo merges).
        kept_params, dense_params: projection parameters kept and of the dense model.
        notes: what else a reader should know (rank fallbacks, the groups used).
    """

    method: str
    ratio: float
    factors: dict[tuple[str, int], Factors] = field(default_factory=dict)
    removed: tuple[int, ...] = ()
    replaced: dict[str, torch.Tensor] = field(default_factory=dict)
    kept_params: int = 0
    dense_params: int = 0
    notes: list[str] = field(default_factory=list)


@contextmanager
def applied(model: LlamaLM, compressed: Compressed) -> Iterator[LlamaLM]:
    """The model with ``compressed``'s factors and replaced parameters in place (not its removals:
    pass ``compressed.removed`` to the forward); everything is restored on exit."""
    modules: dict[tuple[str, int], nn.Module] = {}
    params: dict[str, torch.Tensor] = {}
    shared: dict[int, nn.Linear] = {}

    def module(t: torch.Tensor) -> nn.Linear:
        if id(t) not in shared:
            shared[id(t)] = _linear(t)
        return shared[id(t)]

    try:
        for (role, layer), (second, first) in compressed.factors.items():
            parent, name = _parent(model.model.layers[layer], HF_LLAMA_PROJECTIONS[role])
            modules[(role, layer)] = getattr(parent, name)
            setattr(parent, name, LowRankLinear(module(second), module(first)))
        for name, tensor in compressed.replaced.items():
            p = model.get_parameter(name)
            params[name] = p.data
            p.data = tensor
        yield model
    finally:
        for (role, layer), original in modules.items():
            parent, name = _parent(model.model.layers[layer], HF_LLAMA_PROJECTIONS[role])
            setattr(parent, name, original)
        for name, tensor in params.items():
            model.get_parameter(name).data = tensor


def _parent(root: nn.Module, path: str) -> tuple[nn.Module, str]:
    head, _, name = path.rpartition(".")
    return (root.get_submodule(head) if head else root), name


def _state(setup: Setup[LlamaLM], compressed: Compressed) -> tuple[dict[str, torch.Tensor], dict[int, int]]:
    # The loaded model's state with replacements, without removed layers, renumbered.
    keep = kept_layers(setup.n_layers, compressed.removed)
    renumber = {old: new for new, old in enumerate(keep)}
    state: dict[str, torch.Tensor] = {}
    for name, tensor in setup.model.state_dict().items():
        if name == "lm_head.weight" and setup.model.tie_embeddings:
            continue
        tensor = compressed.replaced.get(name, tensor)
        if name.startswith("model.layers."):
            index = int(name.split(".")[2])
            if index not in renumber:
                continue
            name = f"model.layers.{renumber[index]}." + name.split(".", 3)[3]
        state[name] = tensor.detach()
    return state, renumber


def save_factored(setup: Setup[LlamaLM], compressed: Compressed, folder: str | Path, dtype: str = "float32", *,
                  force: bool = False, inputs: Iterable[str | Path | None] = ()) -> Path:
    """Write ``compressed`` as a factored folder (module docstring), atomically (temporary sibling + rename).

    Args:
        force, inputs: as :func:`geodrift.io.outdir.replace_folder` (the output-folder policy).

    Returns:
        The folder.

    Raises:
        GeodriftError: ``folder`` holds a file geodrift did not write, holds geodrift's earlier output
            without ``force``, is an input, or cannot be written.
    """
    state, renumber = _state(setup, compressed)
    shared_names: dict[int, str] = {}
    uses: dict[int, int] = {}
    for second, first in compressed.factors.values():
        for t in (second, first):
            uses[id(t)] = uses.get(id(t), 0) + 1
    spec: dict[str, dict[str, Any]] = {}
    for (role, layer), (second, first) in sorted(compressed.factors.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        if layer not in renumber:
            continue
        prefix = f"model.layers.{renumber[layer]}.{HF_LLAMA_PROJECTIONS[role]}"
        del state[prefix + ".weight"]
        entry: dict[str, Any] = {"rank": int(first.shape[0])}
        for side, t in (("first", first), ("second", second)):
            if uses[id(t)] > 1:
                if id(t) not in shared_names:
                    shared_names[id(t)] = f"geodrift.shared.{len(shared_names)}.weight"
                    state[shared_names[id(t)]] = t
                entry[side] = shared_names[id(t)]
            else:
                entry[side] = f"{prefix}.{side}.weight"
                state[entry[side]] = t
        spec[prefix] = entry
    state = {k: v.to(DTYPES[dtype]).contiguous() for k, v in state.items()}
    config = _config(setup, len(renumber), dtype)
    config["geodrift_factored"] = {"format": FORMAT, "dtype": dtype, "method": compressed.method,
                                   "ratio": compressed.ratio, "base_model_type": config["model_type"],
                                   "base_architectures": config["architectures"], "projections": spec}
    config["model_type"], config["architectures"] = FACTORED_MODEL_TYPE, [FACTORED_ARCHITECTURE]
    return _write_folder(folder, state, config, force, inputs)


def save_dense(setup: Setup[LlamaLM], compressed: Compressed, folder: str | Path, dtype: str = "float32", *,
               force: bool = False, inputs: Iterable[str | Path | None] = ()) -> Path:
    """Write ``compressed`` as a plain dense Hugging Face folder (factors multiplied out), as :func:`save_factored`."""
    state, renumber = _state(setup, compressed)
    for (role, layer), (second, first) in compressed.factors.items():
        if layer in renumber:
            state[f"model.layers.{renumber[layer]}.{HF_LLAMA_PROJECTIONS[role]}.weight"] = second @ first
    state = {k: v.to(DTYPES[dtype]).contiguous() for k, v in state.items()}
    return _write_folder(folder, state, _config(setup, len(renumber), dtype), force, inputs)


def _config(setup: Setup[LlamaLM], n_layers: int, dtype: str) -> dict[str, Any]:
    # The one Llama config writer (geodrift.lm.hf), for the kept layers and the saved dtype.
    config = hf_config(setup.model, n_layers=n_layers, context_length=setup.config.get("context_length"))
    config["torch_dtype"] = dtype
    return config


def _write_folder(folder: str | Path, state: dict[str, torch.Tensor], config: dict[str, Any], force: bool,
                  inputs: Iterable[str | Path | None]) -> Path:
    # model.safetensors + config.json into a temporary sibling, renamed into place (geodrift.io.outdir's policy).
    from safetensors.torch import save_file

    from geodrift.io.outdir import replace_folder

    def write(tmp: Path) -> None:
        write_with(tmp / "model.safetensors", lambda path: save_file(state, str(path), metadata={"format": "pt"}))
        write_json(tmp / "config.json", config)

    return replace_folder(folder, write, force=force, inputs=inputs)


def load_factored(folder: str | bytes | os.PathLike[str] | os.PathLike[bytes]) -> Any:
    """A ``transformers.LlamaForCausalLM`` (eval mode) from a :func:`save_factored` folder.

    The folder is checked against its own manifest first (:mod:`geodrift.compress.factored_check`), with bounded
    work: config.json and model.safetensors regular files (a FIFO is refused, never read), config.json at most
    16 MiB; the format version, the dtype, every entry's type; from model.safetensors' header alone, the layers
    stored against ``num_hidden_layers`` (both ways) and the embedding against the widths - all before a model is
    laid out - then every factor present with the shape its projection needs and every other tensor with the
    shape the config implies (the model laid out on the meta device). Only then are the tensors read (only
    those the model uses), each checked to be finite.

    Args:
        folder: the saved folder: a str, a bytes path or a path-like object.

    Raises:
        GeodriftError: when transformers is missing, or the folder is not a factored geodrift model or is
            damaged - one line naming the file and the entry.
    """
    try:
        from transformers import LlamaConfig, LlamaForCausalLM
    except ImportError:
        raise GeodriftError("loading a factored model needs transformers: pip install 'geodrift[hf]'") from None
    from geodrift.compress import factored_check as check

    folder = check.folder_path(folder)
    config, spec = check.read_config(folder)
    projections = check.check_spec(folder / "config.json", spec, FORMAT, tuple(DTYPES))
    dtype = DTYPES[spec["dtype"]]
    header = check.read_header(folder)
    check.check_layers(folder / "config.json", config, projections, HF_LLAMA_PROJECTIONS.values(), header)
    check.check_widths(folder, config, header)
    # The Llama's own model type (folders written before the factored model type kept "llama" in config.json).
    config["model_type"] = spec.get("base_model_type", config.get("model_type"))
    config["architectures"] = spec.get("base_architectures", config.get("architectures"))
    try:
        llama_config = LlamaConfig(**config)
        with torch.device("meta"):  # the shapes the config implies, without allocating them
            layout = {name: tuple(t.shape) for name, t in LlamaForCausalLM(llama_config).state_dict().items()}
    except Exception as error:  # transformers' own checks of the config (TypeError, ValueError)
        raise GeodriftError(f"{folder / 'config.json'}: not a Llama config transformers accepts "
                            f"({str(error).splitlines()[0][:200] if str(error) else type(error).__name__}); "
                            "the save is damaged - write it again") from None
    for prefix, entry in projections.items():
        d_out, d_in = layout[prefix + ".weight"]
        for side, expected in (("first", (entry["rank"], d_in)), ("second", (d_out, entry["rank"]))):
            if entry[side] not in header:
                raise check.missing_tensor(folder, entry[side], f"projection {prefix!r} ({side})")
            check.check_tensor(folder, entry[side], header[entry[side]], expected, dtype,
                               f"projection {prefix!r} ({side}, rank {entry['rank']})")
    tied = bool(config.get("tie_word_embeddings"))
    dense = {name: shape for name, shape in layout.items()
             if name.rpartition(".")[0] not in projections and not (tied and name == "lm_head.weight")}
    for name, shape in dense.items():
        if name not in header:
            raise check.missing_tensor(folder, name, "the model (config.json)")
        check.check_tensor(folder, name, header[name], shape, dtype, "config.json")
    tensors = _read_tensors(folder, sorted({*dense, *(e[side] for e in projections.values()
                                                       for side in ("first", "second"))}))
    model = LlamaForCausalLM(llama_config)
    model.to(dtype)  # type: ignore[arg-type]
    linears: dict[str, nn.Linear] = {}

    def linear(name: str) -> nn.Linear:
        if name not in linears:
            linears[name] = _linear(tensors[name])
        return linears[name]

    for prefix, entry in projections.items():
        parent, name = _parent(model, prefix)
        setattr(parent, name, LowRankLinear(linear(entry["second"]), linear(entry["first"])))
    full = {name: tensors[name] for name in dense}
    if tied:
        full["lm_head.weight"] = tensors["model.embed_tokens.weight"]
    model.load_state_dict(full, strict=False)
    if tied:
        model.tie_weights()
    return model.eval()


def _read_tensors(folder: Path, names: list[str]) -> dict[str, torch.Tensor]:
    # The tensors the model uses (checked shapes), each read once and checked to be finite.
    from safetensors import safe_open

    from geodrift.compress import factored_check as check

    tensors: dict[str, torch.Tensor] = {}
    try:
        with safe_open(str(folder / "model.safetensors"), framework="pt") as handle:
            for name in names:
                tensors[name] = handle.get_tensor(name)
                check.check_finite(folder, name, tensors[name])
    except GeodriftError:
        raise
    except Exception as error:  # safetensors' own error type, an OSError
        raise check.unreadable(folder, error) from None
    return tensors
