"""The Python API: ``geodrift.scan(model_or_path, ...) -> ScanReport``, for notebooks and scripts.

``geodrift.scan`` is this package made callable (see ``geodrift/scan/__init__.py``): it takes what a
researcher holds - a path (GGUF, safetensors, a Hugging Face folder, a PyTorch pickle), an
``nn.Module`` (its ``state_dict()``; a Hugging Face model's ``config`` gives the head counts for the
OV composite) or a state dict, bare or wrapped (``{"model": ...}``, ``{"state_dict": ...}``) - and
runs the same scan as ``geodrift scan``. ``report.to_frame()`` gives the tidy pandas DataFrame.

Example::

    import geodrift
    report = geodrift.scan("path/to/model", layers="0-9")
    frame = report.to_frame()
    frame.groupby(["projection", "space"]).abs_cos.mean()
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from geodrift.continuity import MeasureSpec, Report
from geodrift.errors import GeodriftError
from geodrift.scan.checkpoint import Checkpoint
from geodrift.scan.mapping import NameRule, load_name_mapping
from geodrift.scan.readers import open_checkpoint, weightset
from geodrift.scan.safetensors_reader import StateDictCheckpoint
from geodrift.scan.scan import heads_of, parse_layers, parse_roles
from geodrift.scan.scan import scan as scan_weights
from geodrift.scan.state_dict import module_config, unwrap_state_dict

# What geodrift.scan returns: the continuity Report (tables, JSON, CSV and to_frame()).
ScanReport = Report


def open_model(model: Any = None, names: str | Path | list[NameRule] | None = None,
               architecture: str | None = None, config: dict[str, Any] | None = None) -> Checkpoint:
    """Open anything :func:`scan` accepts as a Checkpoint (headers only for files; no copy for tensors).

    Args:
        model: None (the embedded SmolLM2-135M), a path, an ``nn.Module`` or a (wrapped) state dict.
        names: a ``--names`` JSON mapping (path or rules) for unknown tensor names.
        architecture: override the detected architecture (e.g. ``"gemma"``).
        config: for an in-memory state dict or module, config.json-style hyperparameters (e.g.
            ``json.load(open("config.json"))``): the head counts enable the OV composite.

    Returns:
        The Checkpoint.

    Raises:
        GeodriftError: an unreadable path, an object that is none of these, a state dict without tensors.
    """
    rules = load_name_mapping(names) if isinstance(names, (str, Path)) else names
    if model is None or isinstance(model, (str, Path)):
        return open_checkpoint(model, names=rules, architecture=architecture)
    import torch

    if isinstance(model, torch.nn.Module):
        label = f"{type(model).__name__} (in memory)"
        return StateDictCheckpoint(unwrap_state_dict(model.state_dict(), label), label,
                                   config if config is not None else module_config(model), rules, architecture)
    if isinstance(model, Mapping):
        label = "state dict (in memory)"
        return StateDictCheckpoint(unwrap_state_dict(model, label), label, config, rules, architecture)
    raise GeodriftError(
        f"geodrift.scan: cannot scan a {type(model).__name__}; pass a path (.gguf, .safetensors, a Hugging Face "
        "folder, a .pt/.bin pickle), an nn.Module or a state dict"
    )


def scan(model: Any = None, *, roles: str | list[str] | None = None, layers: str | list[int] | None = None,
         k: int = 8, null_draws: int = 100, seed: int = 0, view: str = "raw",
         names: str | Path | list[NameRule] | None = None, architecture: str | None = None,
         config: dict[str, Any] | None = None, ov: bool = True, full_spectrum: bool = False,
         progress: Callable[[str], None] | None = None) -> ScanReport:
    """Scan a model: per-projection continuity with noise floors, verdicts and trajectory shape.

    The same measurement as ``geodrift scan`` (one code path): the top-k singular triplets of every
    projection, Eq. 1-3 with the permutation null and the random floor ``sqrt(2/(pi d))``, the
    theory's verdicts with their criteria, and App. A.2's trajectory shape.

    Args:
        model: None (the embedded SmolLM2-135M-Instruct), a path, an ``nn.Module`` or a state dict
            (bare, or wrapped as ``{"model": ...}`` / ``{"state_dict": ...}``).
        roles: ``"q,k,gate"``, ``["q", "attn_k"]``, ``"router,experts"`` (the ``--roles`` names,
            ``geodrift.weights.ROLE_NAMES``, or canonical ones; None = all).
        layers: ``"0-9,20"`` or ``[0, 1, ...]`` (None = all).
        k, null_draws, seed, full_spectrum: as :class:`geodrift.continuity.MeasureSpec`.
        view: ``"raw"`` or ``"folded"`` (norm gains folded into the projections).
        names: a ``--names`` mapping for unknown tensor names; architecture: override the detected one.
        config: config.json-style hyperparameters for an in-memory state dict (head counts for OV).
        ov: also measure the OV composite ``W_O W_V`` (needs the head counts from a config).
        progress: called with ``"role[layer]"`` after each matrix.

    Returns:
        ScanReport (``geodrift.continuity.Report``): ``.roles``, ``.trajectory``, ``.to_dict()``,
        ``.to_frame()``; for a mixture of experts, each expert's roles among ``.roles`` and the
        experts of each layer compared in ``.across_experts`` (docs/models.md).

    Raises:
        GeodriftError: any unreadable input or out-of-range option, checked before the work starts.

    Example:
        >>> import geodrift  # doctest: +SKIP
        >>> k = geodrift.scan(layers="0-3", null_draws=20).role("attn_k")  # doctest: +SKIP
        >>> k.verdict, k.path_verdict  # shared frame; depth path: 4 layers are too few to judge  # doctest: +SKIP
        ('holds', 'n/a')
    """
    spec = MeasureSpec(k=k, null_draws=null_draws, seed=seed, full_spectrum=full_spectrum)
    role_list = parse_roles(roles if isinstance(roles, str) or roles is None else ",".join(roles))
    layer_list = parse_layers(layers) if isinstance(layers, str) else layers
    if view not in ("raw", "folded"):
        raise GeodriftError(f"view: {view!r} is not a view; use raw or folded")
    ckpt = open_model(model, names, architecture, config)
    ws = weightset(ckpt, view=view).select(role_list, layer_list)
    return scan_weights(ws, spec, progress=progress, heads=heads_of(ckpt) if ov else None)
