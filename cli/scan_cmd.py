"""`geodrift scan [MODEL]`: per-projection geometric continuity of a checkpoint.

Its options are declared once, in :class:`geodrift.jobs.scan.ScanRequest` (:mod:`geodrift.jobs.options`): the
command's signature is generated from them (:func:`geodrift.cli.options.declared_command`).
"""

from __future__ import annotations

import shlex
import sys
from typing import Annotated, Any

import typer

from geodrift.cli.options import declared_command, request_values
from geodrift.jobs.scan import ScanRequest

app = typer.Typer()
Model = Annotated[str | None, typer.Argument(help="A .gguf file, a .safetensors file or a Hugging Face model folder. "
                                            "Default: the embedded SmolLM2-135M-Instruct (Q4_1 GGUF).")]


@app.command("scan", short_help="Per-projection continuity of a checkpoint, with its verdicts.")
@declared_command(ScanRequest, {"model": (Model, None)})
def scan_command(**given: Any) -> None:
    """Scan a checkpoint: v1/u1 continuity per projection with noise floors and the theory's verdict."""
    from geodrift.jobs.scan import run_scan
    from geodrift.render.files import write_scan_outputs
    from geodrift.render.progress import ConsoleEvents
    from geodrift.render.results import announce_written, show_scan

    options, shown = request_values(given)
    request = ScanRequest(**options, call="geodrift " + shlex.join(sys.argv[1:]))
    with ConsoleEvents(quiet=shown["quiet"], reserve_stdout=shown["as_json"]) as events:
        result = run_scan(request, events)
    written = write_scan_outputs(result, request)
    show_scan(result, as_json=shown["as_json"], full=request.full, wide=shown["wide"])
    announce_written(written, quiet=shown["quiet"])
