"""Find the state dict inside what training code saves or holds (a wrapper dict, an ``nn.Module``).

Training code rarely saves a bare ``{name: tensor}``: ``torch.save({"model": sd, "optimizer": ...,
"epoch": 3})``, Lightning's ``{"state_dict": ...}``, DDP's ``module.`` prefix. :func:`unwrap_state_dict`
finds the tensors in all of these, for pickles read from disk (``PytorchCheckpoint``) and for objects
passed to ``geodrift.scan`` alike; ``geodrift.scanner.safetensors_reader.StateDictCheckpoint`` then maps
them through the same Hugging Face name tables as a file.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from geodrift.errors import GeodriftError

# Keys under which training loops store the model's state dict, tried in this order.
WRAPPER_KEYS = ("state_dict", "model_state_dict", "model", "module", "net", "network", "weights", "params")
# Prefixes that wrappers add to every name: DDP/DataParallel, torch.compile, Lightning modules.
STRIPPED_PREFIXES = ("module.", "_orig_mod.")


def unwrap_state_dict(obj: Any, label: str) -> dict[str, torch.Tensor]:
    """The ``{name: tensor}`` inside ``obj``: a bare state dict or a training-checkpoint wrapper.

    Wrappers: a dict whose own tensors are none and that holds one of :data:`WRAPPER_KEYS`
    (``{"model": sd, "optimizer": ..., "epoch": 3}``) or a single dict value; nested once more if
    needed. A prefix every name shares (``module.``, ``_orig_mod.``) is removed.

    Args:
        obj: what ``torch.load`` returned, or a state dict passed in memory.
        label: names the source in errors (a path, ``"state dict"``).

    Returns:
        Tensor names -> tensors (non-tensor entries dropped).

    Raises:
        GeodriftError: when no tensors are found, naming the keys that were there.

    Example:
        >>> sd = {"model": {"w": torch.ones(2)}, "epoch": 3}
        >>> list(unwrap_state_dict(sd, "ckpt.pt"))
        ['w']
    """
    state = obj
    for _ in range(3):  # {"checkpoint": {"model": {...}}} at most
        if not isinstance(state, Mapping):
            raise GeodriftError(f"{label}: expected a state dict (name -> tensor), got {type(state).__name__}; "
                                "pass model.state_dict() or an nn.Module")
        if any(isinstance(v, torch.Tensor) for v in state.values()):
            break
        inner = next((state[k] for k in WRAPPER_KEYS if isinstance(state.get(k), Mapping)), None)
        if inner is None:
            dicts = [v for v in state.values() if isinstance(v, Mapping)]
            inner = dicts[0] if len(dicts) == 1 else None
        if inner is None:
            break
        state = inner
    tensors = {str(k): v for k, v in state.items() if isinstance(v, torch.Tensor)} if isinstance(state, Mapping) else {}
    if not tensors:
        keys = ", ".join(map(str, list(obj)[:8])) if isinstance(obj, Mapping) else type(obj).__name__
        raise GeodriftError(
            f"{label}: the state dict holds no tensors (top-level keys: {keys or 'none'}); save "
            f"model.state_dict(), or one of {', '.join(WRAPPER_KEYS[:3])} holding it"
        )
    for prefix in STRIPPED_PREFIXES:
        if all(name.startswith(prefix) for name in tensors):
            tensors = {name[len(prefix):]: t for name, t in tensors.items()}
    return tensors


def module_config(model: Any) -> dict[str, Any]:
    """A Hugging Face model's ``config`` as a config.json dict (``{}`` for other modules)."""
    config = getattr(model, "config", None)
    to_dict = getattr(config, "to_dict", None)
    if callable(to_dict):
        raw = to_dict()
        return raw if isinstance(raw, dict) else {}
    return {}
