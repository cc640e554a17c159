"""The gauge group of each architecture family, with its proofs and the outcome of its numeric twins.

Joins the table :mod:`geodrift.gauge.groups` (what was derived) with a :class:`ProveReport` (which
claims verified, which twin maps agreed) for ``geodrift prove``'s table, Markdown and JSON.
"""

from __future__ import annotations

from typing import Any

from geodrift.gauge.groups import FAMILIES, NOT_DERIVED, SIM_MLP_GROUPS, Group

# Short labels for the terminal table (the full meaning is groups.KINDS[kind]).
SHORT: dict[str, str] = {
    "orthogonal": "O(d)", "orthogonal_fixing_ones": "O(d), R1=±1; +1 shifts", "signed_permutation": "signed perm.",
    "gl_per_kv_head": "GL(d_head)", "gl_qk_per_head": "GL(d_head): A, A^-T", "rope_commutant": "rR(φ) per pair",
    "qk_norm_pair_signs": "±1 per pair", "nonzero_scaling_permutation": "scale≠0 × perm.",
    "positive_scaling_permutation": "scale>0 × perm.", "signed_unit_permutation": "signed perm.",
    "permutation": "perm.", "expert_permutation_shift": "perm. + shift", "residual_commutant": "commutant",
    "none": "none", "unknown": "—",
}
# (column, role, side) of the family table.
COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("Q/K", "attn_q", "rows"), ("V/O", "attn_v", "rows"), ("Gate", "mlp_gate", "rows"), ("Up/Down", "mlp_up", "rows"),
    ("router", "router", "rows"),
)


def _twin_outcomes(report: Any) -> tuple[dict[str, bool], dict[str, str]]:
    """Every twin map measured in ``report`` -> agreed?, and claim name -> status."""
    agree: dict[str, bool] = {}
    status: dict[str, str] = {}
    for r in report.results:
        status[r.name] = r.status
        agree.update(r.numeric_metrics.get("agree", {}) if isinstance(r.numeric_metrics, dict) else {})
    return agree, status


def _group_entry(group: Group, agree: dict[str, bool], status: dict[str, str]) -> dict[str, Any]:
    twins = {t: ("agrees" if agree[t] else "disagrees") if t in agree else "not run" for t in group.twins}
    return {"kind": group.kind, "text": group.text, "derived": group.derived, "invariant": group.invariant,
            "proofs": {c: status.get(c, "not run") for c in group.claims}, "twins": twins}


def gauge_groups(report: Any) -> dict[str, Any]:
    """The families' groups with each proof's status and each twin's outcome in ``report`` (JSON-able).

    Returns:
        ``{"families": {name: {"architectures", "note", "residual", "roles": {role: {"rows", "cols"}}}},
        "not_derived": {...}, "sim_mlp": {...}}``; each group entry has ``kind``, ``text``, ``derived``,
        ``invariant``, ``proofs`` (claim -> status) and ``twins`` (map -> agrees / disagrees / not run).
    """
    agree, status = _twin_outcomes(report)
    families = {}
    for name, fam in FAMILIES.items():
        families[name] = {
            "architectures": list(fam.architectures), "note": fam.note,
            "residual": _group_entry(fam.residual, agree, status),
            "roles": {role: {"derived": g.derived, "rows": _group_entry(g.rows, agree, status),
                             "cols": _group_entry(g.cols, agree, status)} for role, g in fam.roles.items()},
        }
    return {"families": families, "not_derived": dict(NOT_DERIVED), "sim_mlp": dict(SIM_MLP_GROUPS)}


def family_rows(groups: dict[str, Any]) -> list[list[str]]:
    """One row per family: name (architectures), residual, Q/K, V/O, Gate, Up/Down, router, and
    ``"<proofs verified>/<proofs>, <twins agreeing>/<twins>"``."""
    rows = []
    for name, fam in groups["families"].items():
        entries = [fam["residual"]] + [fam["roles"][role][side] if role in fam["roles"] else None
                                       for _, role, side in COLUMNS]
        cells = [SHORT[e["kind"]] if e else "—" for e in entries]
        proofs: dict[str, str] = {}
        twins: dict[str, str] = {}
        for e in [fam["residual"]] + [g[s] for g in fam["roles"].values() for s in ("rows", "cols")]:
            proofs.update(e["proofs"])
            twins.update(e["twins"])
        ok_proofs = sum(v == "verified" for v in proofs.values())
        ok_twins = sum(v == "agrees" for v in twins.values())
        rows.append([f"{name}: {', '.join(fam['architectures'])}", *cells,
                     f"{ok_proofs}/{len(proofs)}, {ok_twins}/{len(twins)}"])
    return rows


def groups_markdown(groups: dict[str, Any]) -> list[str]:
    """The Markdown section: one table per family (side, group, invariant, proofs, numeric twins)."""
    lines = ["", '<a id="gauge-groups"></a>', "", "## Gauge groups by architecture family", "",
             "What the claims above derive for each family the scanner reads (``geodrift.gauge.groups``). A "
             "weight $W$ (rows: what it writes, columns: what it reads) moves as $W\\mapsto G_{\\text{rows}}WG_"
             "{\\text{cols}}^{-1}$. *Twins*: the maps measured on real models by the claims' numeric cross-checks "
             "(a map of the group preserves the logits within float tolerance).", ""]
    for name, fam in groups["families"].items():
        lines += [f"### {name} ({', '.join(fam['architectures'])})", "", fam["note"] + ".", "",
                  "| where | group | invariant | proofs | numeric twins |", "|---|---|---|---|---|"]
        entries = [("residual stream", fam["residual"])]
        seen: set[str] = set()
        for role, g in fam["roles"].items():
            for side in ("rows", "cols"):
                e = g[side]
                if e["kind"] in ("orthogonal", "orthogonal_fixing_ones", "signed_permutation") or \
                        f"{role}:{e['kind']}" in seen:
                    continue
                seen.add(f"{role}:{e['kind']}")
                entries.append((f"{role} {side}", e))
        for where, e in entries:
            proofs = ", ".join(f"[{c}](#{c}) ({s})" for c, s in e["proofs"].items()) or "—"
            twins = ", ".join(f"`{t}` {s}" for t, s in e["twins"].items()) or "—"
            lines.append(f"| {where} | {e['text']} | {e['invariant'] or '—'} | {proofs} | {twins} |")
        lines.append("")
    lines += ["Not derived (``derived: false`` in the table): "
              + "; ".join(f"{a} ({why.split(':')[0]})" for a, why in groups["not_derived"].items()) + ".", "",
              "The simulators' residual MLP $h\\to h+\\sigma(Wh)$: the stream's group is the commutant of "
              "$\\sigma$ (claims [mlp](#mlp), [gauge](#gauge), [commutants](#commutants)): "
              + "; ".join(f"{a}: {g}" for a, g in groups["sim_mlp"].items()) + ". The simulator Llama is the "
              "llama family (default switches).", ""]
    return lines
