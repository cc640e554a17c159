"""The symbolic claims: verdicts, certificates, agreement with torch, the CLI, the sympy-only import, and
the premises (sympy predicates that the derivations use through refine / ask and the report prints)."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from types import ModuleType

import pytest
import sympy as sp
import torch
from prove_report import full_report
from typer.testing import CliRunner

from geodrift.errors import GeodriftError
from geodrift.proofs import breaking, commutants, equivariance, gauge, noether
from geodrift.proofs.activations import ELEMENTWISE
from geodrift.proofs.breaking import witness
from geodrift.proofs.claim import Assumption, Derivation, conjunction, is_zero, refine_under
from geodrift.proofs.interval import certify_nonzero, enclose
from geodrift.proofs.registry import CLAIMS
from geodrift.prove.runner import select
from geodrift.prove.symmetry import ELEMENTWISE as TORCH_ACTS
from geodrift.prove.symmetry import witness_tensors


def test_importing_proofs_does_not_import_torch() -> None:
    for code in ("import geodrift.proofs, sys; assert 'torch' not in sys.modules",
                 "import sys, geodrift.proofs.registry; assert 'torch' not in sys.modules, 'torch imported'"):
        subprocess.run([sys.executable, "-c", code], check=True)


@pytest.fixture(scope="module")
def report():  # type: ignore[no-untyped-def]
    return full_report()


@pytest.mark.heavy  # every numeric twin (the embedded model under gauges) and the Jacobian of every architecture: past the default run's 3 GiB
def test_every_claim_is_verified_symbolically_and_numerically(report) -> None:  # type: ignore[no-untyped-def]
    assert [r.name for r in report.results] == [c.name for c in CLAIMS]
    for r in report.results:
        assert r.verdict == "verified", r.reason
        assert r.numeric_passed is True, r.numeric_summary
        assert r.status == "verified"


def test_interval_enclosure_contains_the_high_precision_value() -> None:
    for expr in (sp.erf(sp.Rational(7, 5)), sp.tanh(1) - sp.Rational(3, 4), sp.log(1 + sp.exp(-2)) * sp.sqrt(3)):
        lo, hi = enclose(expr)
        value = float(expr.evalf(40))
        assert lo <= value <= hi and hi - lo < 1e-12


def test_zero_is_never_certified_nonzero() -> None:
    assert certify_nonzero(sp.tanh(1) - sp.tanh(1) + sp.Integer(0))[0] is None
    assert certify_nonzero(sp.erf(sp.Rational(1, 3)) - sp.erf(sp.Rational(1, 3)))[0] is None


def test_undecided_steps_make_a_claim_unproven_not_verified() -> None:
    out = Derivation()
    out.check("a step sympy decided", True)
    out.check("a step sympy could not decide", is_zero(sp.Function("f")(sp.Symbol("x"))))
    assert out.verdict == "unproven" and "could not decide" in out.reason


@pytest.mark.parametrize("name", sorted(ELEMENTWISE))
def test_symbolic_witness_matches_torch(name: str) -> None:
    finite, _ = witness(name)
    x, r = witness_tensors()
    act = TORCH_ACTS[name]
    numeric = act(r @ x) - r @ act(x)
    for sym, num in zip(finite, numeric, strict=False):
        lo, hi = enclose(sp.sympify(sym))
        assert lo - 1e-12 <= float(num) <= hi + 1e-12


def test_numeric_check_disagrees_with_a_wrong_symbolic_fact() -> None:
    from geodrift.prove.symmetry import check_commutants

    claim = next(c for c in CLAIMS if c.name == "commutants")
    facts = claim.derive().facts
    facts["table"]["relu"]["sign_flip"] = True  # a false claim: ReLU is not odd
    assert not check_commutants(facts, torch.Generator().manual_seed(0)).passed


def test_unknown_claim_is_a_geodrift_error() -> None:
    with pytest.raises(GeodriftError, match="unknown claim"):
        select(["rotations"])


def test_prove_cli_writes_json_and_markdown(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from geodrift.cli.main import app

    md = tmp_path / "proofs.md"
    res = CliRunner().invoke(app, ["prove", "breaking", "--json", "--markdown", str(md)])
    assert res.exit_code == 0, res.output
    payload = json.loads(res.stdout)  # stderr carries the progress and "wrote ..." notes
    assert [r["name"] for r in payload["results"]] == ["breaking"]
    assert payload["results"][0]["status"] == "verified"
    text = md.read_text()
    assert "## 1. Element-wise activations break" in text and "$" in text
    assert payload["results"][0]["assumptions"] == list(breaking.CLAIM.assumptions)
    assert f"${sp.latex(breaking.DIM.predicate)}$" in text


def test_printed_assumptions_are_generated_from_the_predicates() -> None:
    for claim in CLAIMS:
        assert claim.premises and all(isinstance(a, Assumption) for a in claim.premises)
        assert claim.assumptions == tuple(a.text for a in claim.premises)
        for a, text in zip(claim.premises, claim.assumptions, strict=True):
            assert text.startswith(f"${sp.latex(a.predicate)}$")
        assert claim.predicate == sp.And(*(a.predicate for a in claim.premises))
    orth = gauge.ORTHOGONAL
    assert r"\operatorname{Q}_{\text{orthogonal}}(R)" in orth.text
    changed = dataclasses.replace(orth, predicate=sp.Q.symmetric(gauge.R))
    assert r"\text{symmetric}" in changed.text and "orthogonal}" not in changed.text.split("$")[1]
    assert dataclasses.replace(breaking.DIM, predicate=sp.Q.integer(breaking.d) & (breaking.d >= 3)).text.startswith(
        r"$\operatorname{Q}_{\text{integer}}(d) \wedge d \geq 3$")


def test_refine_with_orthogonality_is_what_gives_the_identity() -> None:
    d = sp.Symbol("d")
    R, x = sp.MatrixSymbol("R", d, d), sp.MatrixSymbol("x", d, 1)
    assert sp.refine(R.T * R, sp.Q.orthogonal(R)).doit() == sp.Identity(d)
    assert sp.refine(R.T * R).doit() == R.T * R  # no premise: nothing to refine with
    with sp.assuming(sp.Q.orthogonal(R)):
        assert sp.refine(R * R.T).doit() == sp.Identity(d)
    f = sp.Function("f")
    diff = f(sp.Trace(x.T * R.T * R * x)) - f(sp.Trace(x.T * x))
    assert is_zero(refine_under(diff, sp.Q.orthogonal(R))) is True
    assert is_zero(refine_under(diff, sp.Q.symmetric(R))) is None  # a different predicate does not help
    assert is_zero(refine_under(diff, sp.true)) is None


# (module, premise, a fragment of the step that uses it): without the premise that step is undecided.
USED = [
    (equivariance, "ORTHOGONAL", "`refine` under the premises"),
    (equivariance, "SKEW", "The scalar $q"),
    (gauge, "ORTHOGONAL", "Linear block A"),
    (commutants, "POSITIVE", "Positive rescaling"),
    (noether, "FLOW", "Orbit momentum"),
    (noether, "INVERTIBLE", "Linear residual nets"),
    (breaking, "DIM", "Dimension"),
]


@pytest.mark.parametrize(("module", "premise", "step"), USED,
                         ids=[f"{m.__name__.rsplit('.', 1)[1]}-{p}" for m, p, _ in USED])
def test_dropping_a_premise_unproves_the_step_that_uses_it(module: ModuleType, premise: str, step: str) -> None:
    dropped = getattr(module, premise)
    rest = conjunction(tuple(a for a in module.PREMISES if a is not dropped))
    out = module.derive(rest)
    assert out.verdict == "unproven" and "could not decide" in out.reason
    assert step in out.reason, out.reason


def test_a_premise_sympy_cannot_use_is_declared_and_changes_nothing() -> None:
    assert "cannot use this predicate" in breaking.SMOOTH.gloss
    rest = conjunction(tuple(a for a in breaking.PREMISES if a is not breaking.SMOOTH))
    assert breaking.derive(rest).verdict == "verified"
    assert sp.ask(breaking.SMOOTH.predicate) is None  # an uninterpreted predicate: sympy cannot decide it


@pytest.mark.heavy  # reads the whole prove report (above)
def test_markdown_and_json_print_the_predicates(report, tmp_path) -> None:  # type: ignore[no-untyped-def]
    from geodrift.render.proofs import proofs_markdown

    for r, claim in zip(report.results, CLAIMS, strict=True):
        assert r.assumptions == list(claim.assumptions)
    json.dumps(report.to_dict())
    text = proofs_markdown(report)
    for claim in CLAIMS:
        for a in claim.premises:
            assert sp.latex(a.predicate) in text
