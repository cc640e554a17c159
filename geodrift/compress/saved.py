"""What ``--save`` wrote: one typed record for ``compress prune`` and ``compress share``.

The result of each command carries it (``PruneResult.saved``, ``ShareResult.saved``; None when nothing
was saved); the terminal line and the JSON are read from it. The JSON keys are those of the command
(:meth:`Saved.to_dict`): prune's ``folder, method, n, removed, kept, tokenizer``; share's
``folder, method, ratio, format, dtype, bytes, dense_bytes``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# How each kind of saved folder is loaded (the factored folder's config names a model type transformers refuses).
LOAD_FACTORED = "geodrift.compress.factorized.load_factored({folder!r})"
LOAD_HF = "transformers.AutoModelForCausalLM.from_pretrained({folder!r})"
PRUNED, SHARED = "prune", "share"


@dataclass(frozen=True)
class Saved:
    """One saved model folder.

    Attributes:
        folder: where it was written.
        command: ``prune`` or ``share`` (which JSON keys :meth:`to_dict` writes).
        method: the method (prune: the ranking) whose model was written.
        files: every file written, name -> bytes.
        load: the Python call that loads it.
        n, removed, kept, tokenizer: prune: layers removed (input indices), those kept (renumbered 0..),
            the tokenizer files copied from the input.
        ratio, format, dtype, dense_bytes: share: the ratio, ``factored`` or ``dense``, the tensors' dtype, and
            the dense model's size in float32.

    Example:
        >>> saved = Saved("small", PRUNED, "x", {"model.safetensors": 10}, n=1, removed=(3,), kept=(0, 1, 2))
        >>> saved.to_dict()["removed"], saved.load
        ([3], "transformers.AutoModelForCausalLM.from_pretrained('small')")
    """

    folder: str
    command: str
    method: str
    files: dict[str, int] = field(default_factory=dict)
    n: int | None = None
    removed: tuple[int, ...] = ()
    kept: tuple[int, ...] = ()
    tokenizer: tuple[str, ...] = ()
    ratio: float | None = None
    format: str | None = None
    dtype: str | None = None
    dense_bytes: int | None = None

    @property
    def load(self) -> str:
        """The call that loads the folder (a factored save through geodrift, any other through transformers)."""
        return (LOAD_FACTORED if self.format == "factored" else LOAD_HF).format(folder=self.folder)

    def to_dict(self) -> dict[str, Any]:
        """The JSON of the command's ``saved`` key (the keys listed in the module docstring)."""
        if self.command == PRUNED:
            return {"folder": self.folder, "method": self.method, "n": self.n, "removed": list(self.removed),
                    "kept": list(self.kept), "tokenizer": list(self.tokenizer)}
        return {"folder": self.folder, "method": self.method, "ratio": self.ratio, "format": self.format,
                "dtype": self.dtype, "bytes": dict(self.files), "dense_bytes": self.dense_bytes}


def file_sizes(folder: str | Path) -> dict[str, int]:
    """``{name: bytes}`` of the files directly in ``folder``, by name.

    Example:
        >>> file_sizes(Path("/nonexistent-geodrift-folder"))
        {}
    """
    path = Path(folder)
    return {f.name: f.stat().st_size for f in sorted(path.iterdir()) if f.is_file()} if path.is_dir() else {}


def saved_dict(saved: Saved | None) -> dict[str, Any]:
    """``saved``'s JSON, ``{}`` when nothing was saved (as the results wrote before the record was typed)."""
    return saved.to_dict() if saved is not None else {}


def saved_from_dict(command: str, payload: Any) -> Saved | None:
    """The :class:`Saved` a command's JSON ``saved`` key describes (``{}``: nothing was saved), the inverse of
    :meth:`Saved.to_dict` for ``command`` (``prune`` or ``share``).

    Example:
        >>> saved_from_dict(PRUNED, {"folder": "small", "method": "x", "n": 1, "removed": [3], "kept": [0, 1, 2],
        ...                          "tokenizer": []}).removed
        (3,)
    """
    if not isinstance(payload, dict) or not payload:
        return None
    if command == PRUNED:
        return Saved(str(payload["folder"]), PRUNED, str(payload["method"]), n=payload.get("n"),
                     removed=tuple(payload.get("removed", ())), kept=tuple(payload.get("kept", ())),
                     tokenizer=tuple(payload.get("tokenizer", ())))
    return Saved(str(payload["folder"]), SHARED, str(payload["method"]), dict(payload.get("bytes", {})),
                 ratio=payload.get("ratio"), format=payload.get("format"), dtype=payload.get("dtype"),
                 dense_bytes=payload.get("dense_bytes"))
