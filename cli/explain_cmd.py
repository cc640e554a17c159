"""`geodrift explain [TOPIC]`: what the scan's verdicts, views and ``aligned`` mean (the brief scan points here)."""

from __future__ import annotations

from typing import Annotated

import typer

app = typer.Typer()


@app.command("explain", short_help="What the verdicts, the views and 'aligned' mean.")
def explain_command(
    topic: Annotated[str | None, typer.Argument(help="frame, path, v, views or aligned (default: all).")] = None,
) -> None:
    """Explain the verdicts (frame, path, V's none/found), the views and 'aligned', with their criteria."""
    from geodrift.jobs.explain import ExplainRequest, run_explain
    from geodrift.render.explain import render_sections

    render_sections(run_explain(ExplainRequest(topic)))
