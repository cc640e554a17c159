"""The inspect job: every tensor of a checkpoint with the role it is scanned as, or why it is not scanned.

``geodrift inspect`` builds an :class:`InspectRequest` and calls :func:`run_inspect`; it reads headers
only, and lists names nothing recognises (as not scanned, with the reason) instead of refusing them,
since inspect is what one runs to write a ``--names`` mapping.

Example:
    >>> inv = run_inspect(InspectRequest())
    >>> inv.format, inv.tensors[0].name
    ('gguf', 'token_embd.weight')
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from geodrift.jobs import request as checks

if TYPE_CHECKING:  # imported by the CLI before the options are checked: torch loads only once they pass
    from geodrift.scanner.inventory import TensorRow


@dataclass(frozen=True)
class InspectRequest:
    """The options of ``geodrift inspect``: the model (None: the embedded SmolLM2) and a ``--names`` mapping to try."""

    model: str | Path | None = None
    names: str | Path | None = None


@dataclass
class Inventory:
    """What :func:`run_inspect` returns: the checkpoint's label, format and architecture, a summary line, and
    one row per tensor."""

    model: str
    format: str
    architecture: str
    summary: str
    tensors: list[TensorRow]

    def to_dict(self) -> dict[str, Any]:
        """The JSON inventory (kind ``inventory``; docs/output-schema.md)."""
        return {"model": self.model, "format": self.format, "architecture": self.architecture,
                "summary": self.summary, "tensors": [row.to_dict() for row in self.tensors]}


def run_inspect(request: InspectRequest) -> Inventory:
    """Open ``request.model``'s headers and list its tensors.

    Raises:
        GeodriftError: an unreadable model or ``--names`` file.
    """
    checks.check_path("model", request.model, "a checkpoint path")
    checks.existing_model("model", request.model)
    checks.check_names(request.names)  # all before torch is imported
    from geodrift.scanner.checkpoint import LISTING_UNKNOWN
    from geodrift.scanner.inventory import inventory, summary_line
    from geodrift.scanner.readers import open_checkpoint

    listing = LISTING_UNKNOWN.set(True)  # unrecognised names are listed, not refused (as --help promises)
    try:
        ckpt = open_checkpoint(request.model, names=request.names)
    finally:
        LISTING_UNKNOWN.reset(listing)
    with ckpt:
        rows = inventory(ckpt)
        return Inventory(ckpt.label, ckpt.format, ckpt.architecture, summary_line(ckpt, rows), rows)
