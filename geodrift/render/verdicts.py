"""The claims table shared by every face that judges claims (simulators, compression): one row per
``Verdict`` with its criterion, what geodrift measured, and the outcome."""

from __future__ import annotations

from collections.abc import Iterable

from geodrift.continuity.report import RoleReport
from geodrift.continuity.verdicts import Verdict
from geodrift.render import lit
from geodrift.render.layout import Col, Grid

VERDICT_STYLE = {"holds": "[green]holds[/green]", "fails": "[red]fails[/red]", "tie": "[yellow]tie[/yellow]",
                 "n/a": "[dim]n/a[/dim]"}


def verdict_grid(verdicts: Iterable[Verdict], title: str) -> Grid:
    """One row per claim: claim, criterion, measurement, verdict (prose columns wrap between words)."""
    grid = Grid(title, [Col("claim", "left", prose=True), Col("criterion", "left", prose=True),
                        Col("geodrift measured", "left", prose=True), Col("verdict", "center")], lines=True)
    for v in verdicts:
        grid.add(lit(v.claim), lit(v.criterion), lit(v.measured), VERDICT_STYLE.get(v.verdict, lit(v.verdict)))
    return grid


def found_words(role: RoleReport) -> tuple[str, str]:
    """A projection's frame and path verdicts as what was found (:meth:`RoleReport.said`): V's ``none``/``found``.

    Example:
        >>> from types import SimpleNamespace as S
        >>> found_words(S(predicted_space=None, verdict="holds", path_verdict="fails"))
        ('none', 'found')
        >>> found_words(S(predicted_space="v", verdict="holds", path_verdict="n/a"))
        ('holds', 'n/a')
    """
    return RoleReport.said(role)  # type: ignore[arg-type]  # any object with the three fields


def found_phrase(role: RoleReport) -> str:
    """:func:`found_words` as a phrase: ``frame holds, path fails``; for V ``no frame, no path, as predicted``.

    Example:
        >>> from types import SimpleNamespace as S
        >>> found_phrase(S(predicted_space=None, verdict="holds", path_verdict="holds"))
        'no frame, no path, as predicted'
        >>> found_phrase(S(predicted_space=None, verdict="fails", path_verdict="holds"))
        'a frame (not predicted), no path'
        >>> found_phrase(S(predicted_space="u", verdict="holds", path_verdict="fails"))
        'frame holds, path fails'
    """
    if role.predicted_space is not None:
        return f"frame {role.verdict}, path {role.path_verdict}"
    said = {"holds": "no {}", "fails": "a {} (not predicted)"}
    parts = [said.get(v, "{} " + v).format(name) for name, v in (("frame", role.verdict), ("path", role.path_verdict))]
    as_predicted = role.verdict == role.path_verdict == "holds"
    return ", ".join(parts) + (", as predicted" if as_predicted else "")
