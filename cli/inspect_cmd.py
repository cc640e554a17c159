"""`geodrift inspect [MODEL]`: list a checkpoint's tensors and the role each maps to, before scanning.

A command of its own rather than a ``scan`` flag: it reads headers only, takes none of the scan's
measurement options, and is what one runs first on an unknown checkpoint to write ``--names``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from geodrift.cli.options import Wide

app = typer.Typer()


@app.command("inspect")
def inspect_command(
    model: Annotated[str | None, typer.Argument(help="A .gguf file, a .safetensors file or a Hugging Face model "
                                                "folder. Default: the embedded SmolLM2-135M-Instruct (Q4_1 GGUF).")] = None,
    names: Annotated[Path | None, typer.Option("--names", help="JSON mapping of tensor-name regex -> role (named "
                                               "as in scan --roles) to try (tensors it leaves out are listed as "
                                               "unmapped).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the inventory as JSON on stdout.")] = False,
    wide: Wide = False,
) -> None:
    """List every tensor of a checkpoint with the projection it is scanned as, or why it is not scanned."""
    from geodrift.io.atomic import document, to_json
    from geodrift.render.inspect import render_inventory
    from geodrift.scanner.checkpoint import LISTING_UNKNOWN
    from geodrift.scanner.inventory import inventory, summary_line
    from geodrift.scanner.readers import open_checkpoint

    listing = LISTING_UNKNOWN.set(True)  # unrecognised names are listed, not refused (as --help promises)
    try:
        ckpt = open_checkpoint(model, names=names)
    finally:
        LISTING_UNKNOWN.reset(listing)
    with ckpt:
        rows = inventory(ckpt)
        summary = summary_line(ckpt, rows)
        if as_json:
            payload = {"model": ckpt.label, "format": ckpt.format, "architecture": ckpt.architecture,
                       "summary": summary, "tensors": [r.to_dict() for r in rows]}
            sys.stdout.write(to_json(document("inventory", payload)) + "\n")
        else:
            render_inventory(f"Tensors of {ckpt.label} ({ckpt.format}, {ckpt.architecture})", rows, summary, wide=wide)
