"""The gauge group of every architecture, with its proofs and its measured continuous dimension.

Joins the table :data:`geodrift.architectures.ARCHITECTURES` (every generator, its dimension, the claim
that derives it) with a :class:`ProveReport` (which claims verified; what claim ``dimension`` measured:
the Jacobian's null space beside the derived dimension, every generator's map checked) for
``geodrift prove``'s table, Markdown and JSON.
"""

from __future__ import annotations

from typing import Any

from geodrift.architectures import ARCHITECTURES, GENERATORS, dimension
from geodrift.gauge.groups import SIM_MLP_GROUPS

# the architectures' terminal columns
COLUMNS: tuple[str, ...] = ("continuous generators (dimension at the probe's sizes)", "discrete", "measured / derived",
                            "default view")


def _measured(report: Any) -> tuple[dict[str, dict[str, Any]], dict[str, Any], dict[str, str]]:
    """Claim ``dimension``'s measurements per architecture, its sizes, and every claim's status."""
    status = {r.name: r.status for r in report.results}
    metrics: dict[str, Any] = next((r.numeric_metrics for r in report.results if r.name == "dimension"), {}) or {}
    return metrics.get("architectures", {}), metrics.get("sizes", {}), status


def gauge_groups(report: Any) -> dict[str, Any]:
    """Every architecture's group with each generator's claim status and the measured dimension (JSON-able).

    Returns:
        ``{"architectures": [{"architecture", "family", "forward", "view", "note", "derived": formula,
        "generators": [{"name", "continuous", "dimension", "exact", "claim", "status", "text"}],
        "measurement": {...} | None}], "sim_mlp": [{"activation", "group", "measurement"}]}``; a measurement
        (claim ``dimension``) holds ``measured``, ``derived``, ``agrees``, ``tangent_rank``, ``last_kept``,
        ``first_null``, ``threshold``, ``discrete`` and ``draws`` (each map's relative logit change).
    """
    measured, sizes, status = _measured(report)
    out = []
    for name, row in ARCHITECTURES.items():
        gens = [{"name": g, "continuous": GENERATORS[g].continuous, "dimension": row.group[g],
                 "at_sizes": dimension(row.group[g], sizes) if sizes and GENERATORS[g].continuous else None,
                 "exact": GENERATORS[g].exact or "exact", "claim": GENERATORS[g].claim,
                 "status": status.get(GENERATORS[g].claim, "not run"), "text": GENERATORS[g].text}
                for g in row.group]
        out.append({"architecture": name, "family": row.family, "forward": row.forward, "view": row.view,
                    "note": row.note, "derived": " + ".join(row.group[g] for g in row.continuous()) or "0",
                    "generators": gens, "measurement": measured.get(name)})
    sims = [{"activation": a, "group": g, "measurement": measured.get(f"sim_mlp:{a}")} for a, g in SIM_MLP_GROUPS.items()]
    return {"architectures": out, "sim_mlp": sims, "sizes": sizes}


def family_rows(groups: dict[str, Any]) -> list[list[str]]:
    """One row per architecture: name (family), continuous generators, discrete ones, measured / derived, view."""
    rows = []
    for arch in groups["architectures"]:
        cont = [g for g in arch["generators"] if g["continuous"]]
        shown = ", ".join(f"{g['name']} {g['at_sizes']}" if g["at_sizes"] is not None else g["name"] for g in cont)
        m = arch["measurement"]
        dims = "not measured" if m is None else \
            f"{m['measured']} / {m['derived']}" + ("" if m["agrees"] else " DISAGREE")
        rows.append([f"{arch['architecture']} ({arch['family']})", shown,
                     ", ".join(g["name"] for g in arch["generators"] if not g["continuous"]), dims, arch["view"]])
    return rows


def groups_markdown(groups: dict[str, Any]) -> list[str]:
    """The Markdown section: per architecture its generators (dimension, exactness, claim) and measurement."""
    sizes = ", ".join(f"{k} = {v}" for k, v in groups.get("sizes", {}).items())
    lines = ["", '<a id="gauge-groups"></a>', "", "## Gauge groups by architecture", "",
             "Every architecture of ``geodrift.architectures`` (one table: names, forward pass, gauge group, views). "
             "*Measured*: claim [dimension](#dimension) computes the null space of the Jacobian of the logits in the "
             f"parameters of a random model ({sizes or 'not run'}; norms' epsilon 0) and compares its dimension with "
             "the sum of the continuous generators'; every generator's map is applied and the logits compared.", ""]
    for arch in groups["architectures"]:
        m = arch["measurement"]
        got = "not measured" if m is None else (
            f"measured **{m['measured']}**, derived {m['derived']} ({'agree' if m['agrees'] else 'DISAGREE'}; "
            f"tangents' rank {m['tangent_rank']}, singular values kept >= {m['last_kept']:.1e}, null <= "
            f"{m['first_null']:.1e}, threshold {m['threshold']:g})")
        lines += [f"### {arch['architecture']} ({arch['family']}; default view {arch['view']})", "",
                  f"{arch['note']}. Continuous dimension {arch['derived']}: {got}.", "",
                  "| generator | continuous | dimension | exact | claim | map checked |", "|---|---|---|---|---|---|"]
        for g in arch["generators"]:
            checked = "—" if m is None else f"{({**m['discrete'], **m['draws']}).get(g['name'], float('nan')):.0e}"
            lines.append(f"| `{g['name']}`: {g['text']} | {'yes' if g['continuous'] else 'no'} | {g['dimension']} | "
                         f"{g['exact']} | [{g['claim']}](#{g['claim']}) ({g['status']}) | {checked} |")
        lines.append("")
    lines += ["The simulators' residual MLP $h\\to h+\\sigma(Wh)$: the stream's group is the commutant of $\\sigma$: "
              + "; ".join(f"{s['activation']}: {s['group']}" + (f" (measured {s['measurement']['measured']})"
                                                              if s["measurement"] else "")
                          for s in groups["sim_mlp"]) + ".", ""]
    return lines
