"""`geodrift reproduce [--quick]`: the whole reproduction through the sweep runner, into one report folder."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Any

import typer

from geodrift.cli import choices
from geodrift.cli.options import Dpi, Force, Quiet
from geodrift.cli.options import SweepAddress as Address
from geodrift.cli.options import SweepBackend as Backend

app = typer.Typer()


@app.command("reproduce")
def reproduce_command(
    quick: Annotated[bool, typer.Option("--quick", help="Shorter runs, one seed (about 30 minutes on a shared "
                                        "2-core CPU); default: the README's full-length commands (hours).")] = False,
    smoke: Annotated[bool, typer.Option("--smoke", help="Seconds per run (tiny presets; for tests).")] = False,
    out: Annotated[Path, typer.Option("--out", help="The report folder: report.md, report.json, figures/, and the "
                                      "run records under runs/ (a checkout's docs/results holds the committed "
                                      "--quick report).")] = Path("reproduction"),
    resume: Annotated[bool, typer.Option("--resume", help="Reuse finished runs in --out, continue interrupted "
                                         "ones.")] = False,
    backend: Backend = None,
    workers: Annotated[int, typer.Option("--workers", help="Runs at a time.")] = 2,
    address: Address = None,
    threads: Annotated[int, typer.Option("--threads", help="torch threads per run.")] = 1,
    force: Force = False, dpi: Dpi = 150, quiet: Quiet = False,
) -> None:
    """Proofs, the embedded scan, the MLP tables, drift, App. F, the data-size experiment, the transformer
    ablations and the compression experiments, every claim with its verdict, criterion and command."""
    from geodrift.errors import GeodriftError
    from geodrift.io.outdir import prepare_out
    from geodrift.render.figures import check_dpi
    from geodrift.render.paper_report import write_report
    from geodrift.render.progress import JobProgress, announce, sweep_reporter
    from geodrift.reproduction import reproduce_paper
    from geodrift.sweep.runner import check_options

    if quick and smoke:
        raise GeodriftError("--quick and --smoke: pass one of them")
    mode = "smoke" if smoke else "quick" if quick else "full"
    backend_name = (backend or choices.Backend.local).value
    check_options(backend_name, workers, threads, 0.0)
    check_dpi(dpi)
    prepare_out(out, resume=resume, reload=False, force=force)
    t0 = time.perf_counter()
    with JobProgress("reproduce", 0, "runs", quiet=quiet) as bar:
        rep = reproduce_paper(mode, out, backend=backend_name, workers=workers, address=address,
                              threads=threads, on_stage=bar.note, on_status=sweep_reporter(bar))
    written = write_report(rep, out, dpi)
    sims = [s for s in rep.sections if s.kind == "sim"]
    announce(f"wrote {written[0]} ({len(written)} files)", quiet=quiet)
    typer.echo(f"geodrift reproduce ({mode}): {_scan_holding(rep.sections)}{_holding(rep.sections, 'sim')} simulator "
               f"claims hold, {_holding(rep.sections, 'compress')} compression claims; {len(sims)} simulator sections in "
               f"{(time.perf_counter() - t0) / 60:.1f} min; report {written[0]}")


def _scan_holding(sections: list[Any]) -> str:
    # The embedded scan's two verdicts per projection: shared frame (Eq. 1) and depth path.
    roles = [r for s in sections if s.kind == "scan" and s.result is not None for r in s.result.roles
             if r.verdict in ("holds", "fails")]
    if not roles:
        return ""
    paths = [r for r in roles if r.path_verdict in ("holds", "fails")]
    # the gauge-invariant verdicts: the views section's canonical column
    cells = [c for s in sections if s.kind == "views" and s.result is not None for row in s.result.rows
             if (c := row.cells.get("canonical")) is not None]
    frames = [c for c in cells if c.verdict in ("holds", "fails")]
    walks = [c for c in cells if c.path_verdict in ("holds", "fails")]
    canonical = (f" (canonical, gauge-invariant: frame {sum(c.verdict == 'holds' for c in frames)}/{len(frames)}, "
                 f"path {sum(c.path_verdict == 'holds' for c in walks)}/{len(walks)})") if cells else ""
    return (f"scan: frame {sum(r.verdict == 'holds' for r in roles)}/{len(roles)}, path "
            f"{sum(r.path_verdict == 'holds' for r in paths)}/{len(paths)} predictions hold{canonical}; ")


def _holding(sections: list[Any], kind: str) -> str:
    verdicts = [v for s in sections if s.kind == kind and s.result is not None for v in s.result.verdicts]
    return f"{sum(v.verdict == 'holds' for v in verdicts)}/{len(verdicts)}"
