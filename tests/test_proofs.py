"""The symbolic claims: verdicts, certificates, agreement with torch, the CLI, and the sympy-only import."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import sympy as sp
import torch
from typer.testing import CliRunner

from geodrift.errors import GeodriftError
from geodrift.proofs.activations import ELEMENTWISE
from geodrift.proofs.breaking import witness
from geodrift.proofs.claim import Derivation, is_zero
from geodrift.proofs.interval import certify_nonzero, enclose
from geodrift.proofs.registry import CLAIMS
from geodrift.prove import run_claims, select
from geodrift.symmetry_numeric import ELEMENTWISE as TORCH_ACTS
from geodrift.symmetry_numeric import witness_tensors


def test_importing_proofs_does_not_import_torch() -> None:
    code = ("import sys, geodrift.proofs, geodrift.proofs.registry; "
            "assert 'torch' not in sys.modules, 'torch imported'")
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.fixture(scope="module")
def report():  # type: ignore[no-untyped-def]
    return run_claims()


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
    from geodrift.symmetry_numeric import check_commutants

    claim = next(c for c in CLAIMS if c.name == "commutants")
    facts = claim.derive().facts
    facts["table"]["relu"]["sign_flip"] = True  # a false claim: ReLU is not odd
    assert not check_commutants(facts, torch.Generator().manual_seed(0)).passed


def test_unknown_claim_is_a_geodrift_error() -> None:
    with pytest.raises(GeodriftError, match="unknown claim"):
        select(["rotations"])


def test_prove_cli_writes_json_and_markdown(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from geodrift.cli.main import _register, app

    _register()
    md = tmp_path / "proofs.md"
    res = CliRunner().invoke(app, ["prove", "breaking", "--json", "--markdown", str(md)])
    assert res.exit_code == 0, res.output
    payload = json.loads(res.output)
    assert [r["name"] for r in payload["results"]] == ["breaking"]
    assert payload["results"][0]["status"] == "verified"
    text = md.read_text()
    assert "## 1. Element-wise activations break" in text and "$" in text
