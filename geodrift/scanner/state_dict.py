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

    Wrappers: a dict whose own arrays are none and that holds one of :data:`WRAPPER_KEYS`
    (``{"model": sd, "optimizer": ..., "epoch": 3}``) or a single dict value; nested once more if
    needed. A prefix every name shares (``module.``, ``_orig_mod.``) is removed. Values that are numpy
    arrays, lists or tuples of numbers, or other array-likes (``__array__``) are converted to tensors
    (:func:`as_tensor`), never dropped.

    Args:
        obj: what ``torch.load`` returned, or a state dict passed in memory.
        label: names the source in errors (a path, ``"state dict"``).

    Returns:
        Tensor names -> tensors (entries that are not arrays - a step count, a string - left out).

    Raises:
        GeodriftError: when no tensors are found, naming the keys that were there; an array-like value that is
            not an array of numbers, or a ``.weight``/``.bias`` entry that is not an array, naming the key.

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
        if any(_array_like(v) for v in state.values()):
            break
        inner = next((state[k] for k in WRAPPER_KEYS if isinstance(state.get(k), Mapping)), None)
        if inner is None:
            dicts = [v for v in state.values() if isinstance(v, Mapping)]
            inner = dicts[0] if len(dicts) == 1 else None
        if inner is None:
            break
        state = inner
    tensors: dict[str, torch.Tensor] = {}
    for key, value in state.items() if isinstance(state, Mapping) else ():
        tensor = as_tensor(str(key), value, label)
        if tensor is not None:
            tensors[str(key)] = tensor
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


def _array_like(value: Any) -> bool:
    return isinstance(value, (torch.Tensor, list, tuple)) or hasattr(value, "__array__")


def as_tensor(key: str, value: Any, label: str) -> torch.Tensor | None:
    """A state dict's value as a tensor: a tensor as it is; a numpy array, a list or tuple of numbers (nested, one
    shape) or another array-like (``__array__``: JAX, CuPy on the host) converted; None for a value that is not an
    array (a step count, a numpy scalar, a string), unless its key names a weight or a bias.

    Raises:
        GeodriftError: an array of objects or strings, a ragged or non-numeric list, a weight that is not an array -
            naming ``label`` and the key.

    Example:
        >>> import numpy as np
        >>> as_tensor("w", np.ones((2, 3), dtype=np.float16), "state dict").dtype, as_tensor("step", 3, "sd")
        (torch.float16, None)
    """
    if isinstance(value, torch.Tensor):
        return value
    if isinstance(value, (list, tuple)):
        try:
            return torch.tensor(value)
        except (TypeError, ValueError, RuntimeError, OverflowError):
            raise GeodriftError(f"{label}: {key!r} is a {type(value).__name__} that is not a rectangular array of "
                                "numbers; pass a torch.Tensor or a numpy array (nothing was scanned)") from None
    if hasattr(value, "__array__") and not isinstance(value, (str, bytes)):
        import numpy as np

        try:
            array = np.asarray(value)
        except Exception as error:  # a foreign array type's own error
            raise GeodriftError(f"{label}: {key!r} ({type(value).__name__}) cannot be read as an array "
                                f"({str(error)[:120]}); pass a torch.Tensor (nothing was scanned)") from None
        if array.ndim == 0 and not key.endswith((".weight", ".bias")):
            return None  # a numpy scalar (a step count): not an array of weights
        if array.dtype.kind not in "biufc":
            raise GeodriftError(f"{label}: {key!r} is an array of {array.dtype} values, not numbers; pass weights "
                                "as a torch.Tensor or a numeric numpy array (nothing was scanned)")
        try:
            return torch.from_numpy(np.ascontiguousarray(array))
        except TypeError:  # a numpy dtype torch has no type for (uint32 in older torch): through float64
            return torch.from_numpy(np.ascontiguousarray(array, dtype=np.float64))
    if key.endswith((".weight", ".bias")):
        raise GeodriftError(f"{label}: {key!r} is a {type(value).__name__}, not an array; pass a torch.Tensor or a "
                            "numpy array of its weights (nothing was scanned)")
    return None


def module_config(model: Any) -> dict[str, Any]:
    """A Hugging Face model's ``config`` as a config.json dict (``{}`` for other modules)."""
    config = getattr(model, "config", None)
    to_dict = getattr(config, "to_dict", None)
    if callable(to_dict):
        raw = to_dict()
        return raw if isinstance(raw, dict) else {}
    return {}
