"""Open anything a scan accepts - a path, an ``nn.Module`` or a (wrapped) state dict - as one Checkpoint.

The jobs of both faces (``geodrift scan`` and ``geodrift.scan``, ``drift``, ``compare``) open their models
here; files are read headers first, tensors in memory are not copied.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from geodrift.errors import GeodriftError
from geodrift.scanner.checkpoint import Checkpoint
from geodrift.scanner.mapping import NameRule, load_name_mapping
from geodrift.scanner.readers import open_checkpoint
from geodrift.scanner.safetensors_reader import StateDictCheckpoint
from geodrift.scanner.state_dict import module_config, unwrap_state_dict


def open_model(model: Any = None, names: str | Path | list[NameRule] | None = None,
               architecture: str | None = None, config: Mapping[str, Any] | None = None) -> Checkpoint:
    """Open anything :func:`geodrift.scan` accepts as a Checkpoint (headers only for files; no copy for tensors).

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

    Example:
        >>> open_model(None).architecture
        'llama'
    """
    rules = load_name_mapping(names) if isinstance(names, (str, Path)) else names
    if model is None or isinstance(model, (str, Path)):
        return open_checkpoint(model, names=rules, architecture=architecture)
    import torch

    settings = dict(config) if config is not None else None
    if isinstance(model, torch.nn.Module):
        label = f"{type(model).__name__} (in memory)"
        return StateDictCheckpoint(unwrap_state_dict(model.state_dict(), label), label,
                                   settings if settings is not None else module_config(model), rules, architecture)
    if isinstance(model, Mapping):
        label = "state dict (in memory)"
        return StateDictCheckpoint(unwrap_state_dict(model, label), label, settings, rules, architecture)
    raise GeodriftError(
        f"geodrift.scan: cannot scan a {type(model).__name__}; pass a path (.gguf, .safetensors, a Hugging Face "
        "folder, a .pt/.bin pickle), an nn.Module or a state dict"
    )
