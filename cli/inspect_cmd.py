"""`geodrift inspect [MODEL]`: list a checkpoint's tensors and the role each maps to, before scanning.

A command of its own rather than a ``scan`` flag: it reads headers only, takes none of the scan's
measurement options, and is what one runs first on an unknown checkpoint to write ``--names``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from geodrift.cli.options import Wide

app = typer.Typer()


@app.command("inspect", short_help="Each tensor of a checkpoint and what the scan reads it as.")
def inspect_command(
    model: Annotated[str | None, typer.Argument(help="A .gguf file, a .safetensors file or a Hugging Face model "
                                                "folder. Default: the embedded SmolLM2-135M-Instruct (Q4_1 GGUF).")] = None,
    names: Annotated[Path | None, typer.Option("--names", help="JSON mapping of tensor-name regex -> role (named "
                                               "as in scan --roles) to try (tensors it leaves out are listed as "
                                               "unmapped).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the inventory as JSON on stdout.")] = False,
    full: Annotated[bool, typer.Option("--full", help="One row per tensor (default: one row per role and layer "
                                       "range, the summary first).")] = False,
    wide: Wide = False,
) -> None:
    """List every tensor of a checkpoint with the projection it is scanned as, or why it is not scanned."""
    from geodrift.jobs.inspect import InspectRequest, run_inspect
    from geodrift.render.results import show_inventory

    show_inventory(run_inspect(InspectRequest(model, names)), as_json=as_json, wide=wide, full=full)
