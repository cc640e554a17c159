"""The gauge group of each architecture family: the sympy claims (residual, attention, mlp, experts), their
numeric twins on real models, the table the scan consults (geodrift.gauge.groups) and how `geodrift prove`
lists it (table, JSON, Markdown)."""

from __future__ import annotations

import json

import pytest
import sympy as sp
import torch
from prove_report import full_report
from typer.testing import CliRunner

from geodrift.gauge import groups
from geodrift.proofs import attention, experts, mlp, norms
from geodrift.proofs.claim import conjunction
from geodrift.proofs.registry import claim_names
from geodrift.prove.groups_report import family_rows, gauge_groups, groups_markdown
from geodrift.prove.twins import Twin, has_transformers, proof_label
from geodrift.scanner.names import ARCHITECTURES

NEW = (norms, attention, mlp, experts)


@pytest.mark.parametrize("module", NEW, ids=[m.CLAIM.name for m in NEW])
def test_each_gauge_claim_is_verified_by_sympy_alone(module) -> None:  # type: ignore[no-untyped-def]
    out = module.derive()
    assert out.verdict == "verified", out.reason
    assert out.facts["exact"] or module is mlp


@pytest.mark.parametrize(("module", "premise", "step"), [(norms, "ORTHOGONAL", "Folded gains"),
                                                         (mlp, "NONZERO", "Up rows"), (mlp, "POSITIVE", "ReLU")])
def test_dropping_a_premise_unproves_the_step_that_uses_it(module, premise: str, step: str) -> None:  # type: ignore[no-untyped-def]
    dropped = getattr(module, premise)
    out = module.derive(conjunction(tuple(a for a in module.PREMISES if a is not dropped)))
    assert out.verdict == "unproven" and step in out.reason, out.reason


def test_silu_scale_equation_has_the_single_real_root_one() -> None:
    s, t = sp.Symbol("s", real=True), sp.Symbol("t", real=True)
    assert sp.solveset(sp.exp(-s * t) - sp.exp(-t), s, domain=sp.S.Reals) == sp.FiniteSet(1)
    step = next(x for x in mlp.derive().steps if "Gate rows cannot scale" in x.text)
    assert step.ok is True and "\\left\\{1\\right\\}" in step.text


def test_every_scanner_architecture_is_derived_or_says_why_not() -> None:
    for arch in ARCHITECTURES:
        fam = groups.family_of(arch)
        assert fam is not None or arch in groups.NOT_DERIVED, arch
        if fam is None:
            assert not groups.gauge_of(arch, "attn_q").derived
            assert arch in groups.unknown_reason(arch, "attn_q")


def test_table_names_only_existing_claims_and_kinds() -> None:
    for fam in groups.FAMILIES.values():
        for g in [fam.residual] + [side for rg in fam.roles.values() for side in (rg.rows, rg.cols)]:
            assert g.kind in groups.KINDS
            assert set(g.claims) <= set(claim_names()), g.claims
            assert g.derived == (g.kind != "unknown")
    assert groups.gauge_of("llama", "expert_up.3").rows.kind == "unknown"  # no experts in a dense Llama
    assert groups.gauge_of("mixtral", "expert_up.3").rows.kind == "nonzero_scaling_permutation"
    assert groups.gauge_of("gpt2", "attn_q").rows.kind == "gl_qk_per_head"
    json.dumps(groups.table())


def test_simulator_mlp_groups_agree_with_the_mlp_proofs_table() -> None:
    table = mlp.derive().facts["table"]
    for act, row in table.items():
        expected = groups.sim_mlp_group(act)
        plain = row["plain_hidden"]
        assert ("positive" in plain) == ("positive" in expected), act
        assert ("signed" in plain) == ("signed" in expected), act


def test_simulator_llama_groups_follow_the_proofs_per_switch() -> None:
    table = mlp.derive().facts["table"]
    assert groups.sim_llama_family().roles["attn_q"] == groups.FAMILIES["llama"].roles["attn_q"]
    for act in ("silu", "relu", "gelu"):
        gate = groups.sim_llama_family(activation=act).roles["mlp_gate"].rows.kind
        assert ("positive" in gate) == ("positive" in table[act]["gated_gate"]), act
    for act in ("relu", "tanh", "silu", "gelu"):
        v = groups.sim_llama_family(v_activation=act).roles["attn_v"].rows.kind
        assert ("positive" in v) == ("positive" in table[act]["plain_hidden"]), act
        assert ("signed" in v) == ("signed" in table[act]["plain_hidden"]), act
    assert groups.sim_llama_family(v_activation="radial").roles["attn_o"].cols.kind == "orthogonal_per_kv_head"
    assert not groups.sim_llama_family(residual=False).roles["attn_q"].derived  # its stream group is unknown


def test_proof_label_reads_activation_tables_and_lists() -> None:
    facts = mlp.derive().facts
    assert proof_label(facts, "gpt2:mlp.relu.positive_scaling") == "exact"
    assert proof_label(facts, "gpt2:mlp.gelu_new.positive_scaling") == "broken"
    assert proof_label(facts, "gpt2:mlp.tanh.sign_flip") == "exact"
    assert proof_label(facts, "smollm2:mlp.silu.gate_scaling") == "broken"
    assert proof_label(facts, "sim_llama:mlp.relu.gate_scaling") == "exact"
    assert proof_label(norms.derive().facts, "gpt2:residual.layernorm_generic_rotation") == "broken"
    assert proof_label(norms.derive().facts, "x:residual.not_named") is None


def test_a_map_that_moves_no_weight_makes_its_twin_fail() -> None:
    model = torch.nn.Linear(3, 2).double()
    x = torch.ones(1, 3, dtype=torch.float64)
    twin = Twin()
    twin.run("identity", "exact", model, model.state_dict(), x)
    assert not twin.result("toy").passed  # a vacuous map proves nothing


@pytest.mark.skipif(not has_transformers(), reason="the Mixtral twin needs transformers")
def test_the_twin_disagrees_when_the_proof_says_otherwise() -> None:
    from geodrift.prove.gauge_twins import check_experts

    facts = experts.derive().facts
    assert check_experts(facts, torch.Generator().manual_seed(0)).passed
    facts["exact"].remove("router_shift")
    facts["broken"].append("router_shift")  # a false claim: the router shift is exact
    res = check_experts(facts, torch.Generator().manual_seed(0))
    assert not res.passed and "router_shift" in res.summary


def test_every_twin_the_table_names_was_measured_on_a_real_model_and_agreed() -> None:
    report = full_report()
    names = {r.name: r for r in report.results}
    for claim in ("residual", "attention", "mlp", "experts"):
        assert names[claim].status == "verified", names[claim].numeric_summary
    measured = {k: v for r in report.results for k, v in r.numeric_metrics.get("agree", {}).items()}
    expected = {k: v for r in report.results for k, v in r.numeric_metrics.get("expected", {}).items()}
    assert any(k.startswith("smollm2:") for k in measured)  # the embedded model's real weights
    assert {"exact", "broken"} <= set(expected.values())
    table = gauge_groups(report)
    for fam in table["families"]:
        entries = [fam["residual"]] + [g[s] for g in fam["roles"] for s in ("rows", "cols")]
        for e in entries:
            for item in e["twins"]:
                twin, outcome = item["map"], item["outcome"]
                skipped = not has_transformers() and not twin.startswith("smollm2:")
                assert outcome == ("not run" if skipped else "agrees"), twin
                if not skipped:
                    assert expected[twin] == "exact" and measured[twin]
    rows = family_rows(table)
    assert [r[0].split(":")[0] for r in rows] == list(groups.FAMILIES)
    text = "\n".join(groups_markdown(table))
    assert "## Gauge groups by architecture family" in text and "gpt2" in text


def test_prove_json_lists_the_gauge_groups(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from geodrift.cli.main import app

    md = tmp_path / "proofs.md"
    res = CliRunner().invoke(app, ["prove", "experts", "--json", "--markdown", str(md)])
    assert res.exit_code == 0, res.output
    payload = json.loads(res.stdout)
    fams = {f["family"]: f for f in payload["gauge_groups"]["families"]}
    assert set(fams) == set(groups.FAMILIES)
    router = next(g for g in fams["mixtral"]["roles"] if g["role"] == "router")["rows"]
    assert router["kind"] == "expert_permutation_shift" and router["proofs"] == [{"claim": "experts",
                                                                                "status": "verified"}]
    assert {"claim": "residual", "status": "not run"} in fams["llama"]["residual"]["proofs"]
    assert "Gauge groups by architecture family" in md.read_text()
