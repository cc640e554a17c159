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

from geodrift.architectures import ARCHITECTURES
from geodrift.gauge import groups
from geodrift.proofs import attention, dimension, experts, mlp, norms
from geodrift.proofs.claim import conjunction
from geodrift.proofs.registry import claim_names
from geodrift.prove.groups_report import family_rows, gauge_groups, groups_markdown
from geodrift.prove.twins import Twin, has_transformers, proof_label
from geodrift.scanner.names import ARCHITECTURES as ARCHITECTURES_SCANNED

NEW = (norms, attention, mlp, experts, dimension)


@pytest.mark.parametrize("module", NEW, ids=[m.CLAIM.name for m in NEW])
def test_each_gauge_claim_is_verified_by_sympy_alone(module) -> None:  # type: ignore[no-untyped-def]
    out = module.derive()
    assert out.verdict == "verified", out.reason
    assert out.facts.get("exact") or module in (mlp, dimension)


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


def test_every_scanner_architecture_has_a_row_and_every_generator_an_action() -> None:
    from geodrift.architectures import ARCHITECTURES, GENERATORS
    from geodrift.gauge.generator_actions import ACTIONS

    assert set(ARCHITECTURES) >= set(ARCHITECTURES_SCANNED)
    for arch, row in ARCHITECTURES.items():
        assert set(row.group) <= set(GENERATORS), arch
        if row.forward != "simulator" or arch == "sim_llama":
            assert set(row.group) <= set(ACTIONS), (arch, set(row.group) - set(ACTIONS))
        for g in row.group:
            assert GENERATORS[g].claim in claim_names(), g
    assert groups.unknown_reason("custom") and not groups.unknown_reason("gemma3")
    json.dumps(groups.table())


def test_simulator_mlp_groups_agree_with_the_mlp_proofs_table() -> None:
    table = mlp.derive().facts["table"]
    for act, row in table.items():
        expected = groups.sim_mlp_group(act)
        plain = row["plain_hidden"]
        assert ("positive" in plain) == ("positive" in expected), act
        assert ("signed" in plain) == ("signed" in expected), act


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


@pytest.mark.heavy  # a Jacobian per architecture; the default run measures qwen3 in tests/test_architectures.py
def test_prove_measures_every_architecture_and_each_agrees_with_its_table_row() -> None:
    report = full_report()
    names = {r.name: r for r in report.results}
    for claim in ("residual", "attention", "mlp", "experts", "dimension"):
        assert names[claim].status == "verified", names[claim].numeric_summary
    measured = names["dimension"].numeric_metrics["architectures"]
    if has_transformers():
        assert {a for a, row in ARCHITECTURES.items() if row.probe is not None} <= set(measured)
    for arch, m in measured.items():
        assert m["agrees"] and m["measured"] == m["derived"] == m["tangent_rank"], arch
        # the kept and null spectra two decades or more on either side of the threshold: the small singular values
        # are recomputed from J itself (jacobian.singular_values), so a null one reads ~1e-13, not the Gram's ~1e-8,
        # and the weakest kept ones (1.5e-6 for olmo2, 2.8e-6 gemma3 at d = 16) stand far above the threshold
        assert m["last_kept"] > 100 * m["threshold"] and m["threshold"] > 100 * m["first_null"], arch
    table = gauge_groups(report)
    rows = family_rows(table)
    assert [r[0].split(" ")[0] for r in rows] == list(ARCHITECTURES)
    qwen3 = next(r for r in rows if r[0].startswith("qwen3 "))
    assert "qk_head_scale 12" in qwen3[1] and qwen3[3] == f"{measured['qwen3']['measured']} / 297"
    text = "\n".join(groups_markdown(table))
    assert "## Gauge groups by architecture" in text and "`qk_head_scale`" in text


def test_prove_json_lists_the_gauge_groups(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from geodrift.cli.main import app

    md = tmp_path / "proofs.md"
    res = CliRunner().invoke(app, ["prove", "experts", "--json", "--markdown", str(md)])
    assert res.exit_code == 0, res.output
    payload = json.loads(res.stdout)
    archs = {a["architecture"]: a for a in payload["gauge_groups"]["architectures"]}
    assert set(archs) == set(ARCHITECTURES)
    shift = next(g for g in archs["mixtral"]["generators"] if g["name"] == "router_shift")
    assert shift["claim"] == "experts" and shift["status"] == "verified" and shift["dimension"] == "L*d"
    assert archs["mixtral"]["measurement"] is None  # claim dimension not run
    assert "Gauge groups by architecture" in md.read_text()
