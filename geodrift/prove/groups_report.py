"""The gauge group of each architecture family, with its proofs and the outcome of its numeric twins.

Joins the table :mod:`geodrift.gauge.groups` (what was derived) with a :class:`ProveReport` (which
claims verified, which twin maps agreed) for ``geodrift prove``'s table, Markdown and JSON.
"""

from __future__ import annotations

import json
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
    twins = [{"map": t, "outcome": ("agrees" if agree[t] else "disagrees") if t in agree else "not run"}
             for t in group.twins]
    return {"kind": group.kind, "text": group.text, "derived": group.derived, "invariant": group.invariant,
            "proofs": [{"claim": c, "status": status.get(c, "not run")} for c in group.claims], "twins": twins}


def gauge_groups(report: Any) -> dict[str, Any]:
    """The families' groups with each proof's status and each twin's outcome in ``report`` (JSON-able).

    Returns:
        ``{"families": [{"family", "architectures", "note", "residual", "roles": [{"role", "derived",
        "rows", "cols"}]}], "not_derived": [{"architecture", "reason"}], "sim_mlp": [{"activation",
        "group"}]}``; each group has ``kind``, ``text``, ``derived``, ``invariant``, ``proofs``
        (``[{"claim", "status"}]``) and ``twins`` (``[{"map", "outcome"}]``: agrees / disagrees / not run).
    """
    agree, status = _twin_outcomes(report)
    families = []
    for name, fam in FAMILIES.items():
        families.append({
            "family": name, "architectures": list(fam.architectures), "note": fam.note,
            "residual": _group_entry(fam.residual, agree, status),
            "roles": [{"role": role, "derived": g.derived, "rows": _group_entry(g.rows, agree, status),
                       "cols": _group_entry(g.cols, agree, status)} for role, g in fam.roles.items()],
        })
    return {"families": families,
            "not_derived": [{"architecture": a, "reason": why} for a, why in NOT_DERIVED.items()],
            "sim_mlp": [{"activation": a, "group": g} for a, g in SIM_MLP_GROUPS.items()]}


def _entries(fam: dict[str, Any]) -> list[dict[str, Any]]:
    return [fam["residual"]] + [g[s] for g in fam["roles"] for s in ("rows", "cols")]


def family_rows(groups: dict[str, Any]) -> list[list[str]]:
    """One row per family: name (architectures), residual, Q/K, V/O, Gate, Up/Down, router, and
    ``"<proofs verified>/<proofs>, <twins agreeing>/<twins>"``."""
    rows = []
    for fam in groups["families"]:
        roles = {g["role"]: g for g in fam["roles"]}
        entries = [fam["residual"]] + [roles[role][side] if role in roles else None for _, role, side in COLUMNS]
        cells = [SHORT[e["kind"]] if e else "—" for e in entries]
        proofs: dict[str, str] = {}
        twins: dict[str, str] = {}
        for e in _entries(fam):
            proofs.update({p["claim"]: p["status"] for p in e["proofs"]})
            twins.update({t["map"]: t["outcome"] for t in e["twins"]})
        name = fam["family"]
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
    for fam in groups["families"]:
        lines += [f"### {fam['family']} ({', '.join(fam['architectures'])})", "", fam["note"] + ".", "",
                  "| where | group | invariant | proofs | numeric twins |", "|---|---|---|---|---|"]
        entries: list[tuple[str, dict[str, Any]]] = [("residual stream", fam["residual"])]
        merged: dict[str, list[str]] = {}
        first: dict[str, dict[str, Any]] = {}
        for g in fam["roles"]:
            for side in ("rows", "cols"):
                e = g[side]
                if e["kind"] in ("orthogonal", "orthogonal_fixing_ones", "signed_permutation"):
                    continue  # the residual stream's group, shown once above
                key = json.dumps([e["kind"], e["twins"]])
                merged.setdefault(key, []).append(f"{g['role']} {side}")
                first.setdefault(key, e)
        entries += [(", ".join(where), first[key]) for key, where in merged.items()]
        for where, e in entries:
            proofs = ", ".join(f"[{p['claim']}](#{p['claim']}) ({p['status']})" for p in e["proofs"]) or "—"
            twins = ", ".join(f"`{t['map']}` {t['outcome']}" for t in e["twins"]) or "—"
            lines.append(f"| {where} | {e['text']} | {e['invariant'] or '—'} | {proofs} | {twins} |")
        lines.append("")
    lines += ["Not derived (``derived: false`` in the table): "
              + "; ".join(f"{n['architecture']} ({n['reason'].split(':')[0]})" for n in groups["not_derived"]) + ".", "",
              "The simulators' residual MLP $h\\to h+\\sigma(Wh)$: the stream's group is the commutant of "
              "$\\sigma$ (claims [mlp](#mlp), [gauge](#gauge), [commutants](#commutants)): "
              + "; ".join(f"{m['activation']}: {m['group']}" for m in groups["sim_mlp"]) + ". The simulator Llama is the "
              "llama family with its default switches; ``geodrift.gauge.groups.sim_llama_family`` gives its "
              "groups under the ablation switches (V nonlinearity, Gate activation).", ""]
    return lines
