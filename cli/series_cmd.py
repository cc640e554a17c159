"""`geodrift drift CKPT1 CKPT2 ...` (a training series) and `geodrift compare A B` (two models).

``drift`` is its own command rather than ``scan`` with several arguments: its output is a different
report (each checkpoint's continuity plus every layer's rotation from the first checkpoint), with its
own JSON kind, CSV columns and figures, and ``scan``'s one-model table, verdict summary and figure
would change meaning with the number of arguments. The options of both are declared once, in their requests
(:mod:`geodrift.jobs.options`); the commands' signatures are generated from them.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from geodrift.cli.options import REQUIRED, declared_command, request_values
from geodrift.jobs.series import CompareRequest, DriftRequest

app = typer.Typer()
Checkpoints = Annotated[list[str], typer.Argument(help="Two or more checkpoints of one training run, in order "
                                                  "(.gguf, .safetensors, Hugging Face folders, .pt pickles).")]
A = Annotated[str, typer.Argument(help="The first model (e.g. the base).")]
B = Annotated[str, typer.Argument(help="The second model (e.g. its fine-tune or compressed copy).")]


@app.command("drift", short_help="A training series: each layer's rotation from the first.")
@declared_command(DriftRequest, {"checkpoints": (Checkpoints, REQUIRED)})
def drift_command(**given: Any) -> None:
    """A training series: each layer's v1/u1 rotation from the first checkpoint and continuity per checkpoint,
    with noise floors (the paper's Fig. 2 on real checkpoints). Each checkpoint is read once."""
    from geodrift.jobs.series import run_drift
    from geodrift.render.files import write_drift_outputs
    from geodrift.render.progress import ConsoleEvents
    from geodrift.render.results import announce_written, show_drift

    options, shown = request_values(given)
    request = DriftRequest(**options)
    with ConsoleEvents(quiet=shown["quiet"], reserve_stdout=shown["as_json"]) as events:
        rep = run_drift(request, events)
    written = write_drift_outputs(rep, request)
    show_drift(rep, as_json=shown["as_json"], wide=shown["wide"])
    announce_written(written, quiet=shown["quiet"])


@app.command("compare", short_help="Two models: the angles between their top-k subspaces.")
@declared_command(CompareRequest, {"a": (A, REQUIRED), "b": (B, REQUIRED)})
def compare_command(**given: Any) -> None:
    """Two models: per projection, space and layer, the principal angles between their top-k subspaces, with a
    permutation null and the random k/d."""
    from geodrift.jobs.series import run_compare
    from geodrift.render.files import write_compare_outputs
    from geodrift.render.progress import ConsoleEvents
    from geodrift.render.results import announce_written, show_compare

    options, shown = request_values(given)
    request = CompareRequest(**options)
    with ConsoleEvents(quiet=shown["quiet"], reserve_stdout=shown["as_json"]) as events:
        rep = run_compare(request, events)
    written = write_compare_outputs(rep, request)
    show_compare(rep, as_json=shown["as_json"], wide=shown["wide"])
    announce_written(written, quiet=shown["quiet"])
