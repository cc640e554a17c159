"""The one measurement path: continuity reports on weights with known structure, and on the embedded model."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from geodrift.continuity import MeasureSpec, Report, measure, projection_verdict
from geodrift.errors import GeodriftError
from geodrift.weights import WeightSet

GOLDEN = Path(__file__).parent / "golden" / "smollm2_scan_main.json"  # --view raw, the paper's metric
GOLDEN_CANONICAL = Path(__file__).parent / "golden" / "smollm2_scan_canonical.json"  # the default view


def _measure(ws: WeightSet, **spec: object) -> Report:
    return measure(ws, MeasureSpec(**spec))  # type: ignore[arg-type]


def _shared_frame_weights(L: int = 6, d_out: int = 40, d_in: int = 30, seed: int = 0) -> dict:
    # Every layer shares its top input direction v (plus noise); output directions are independent.
    g = torch.Generator().manual_seed(seed)
    v = torch.randn(d_in, generator=g)
    v /= v.norm()
    out = {}
    for layer in range(L):
        u = torch.randn(d_out, generator=g)
        out[("attn_q", layer)] = 5 * torch.outer(u / u.norm(), v) + 0.05 * torch.randn(d_out, d_in, generator=g)
    return out


def test_a_shared_input_direction_is_reported_continuous_in_v_and_not_in_u():
    report = _measure(WeightSet.from_tensors(_shared_frame_weights()), k=2, null_draws=50)
    (q,) = report.roles
    v1, u1 = q.spaces["v"].vectors[0], q.spaces["u"].vectors[0]
    assert v1.mean > 0.99 and v1.z > 10
    assert u1.z < 3
    assert q.predicted_space == "v" and q.verdict == "holds"


def test_predicting_the_wrong_space_gives_a_failing_verdict():
    weights = {("attn_o", layer): w for (_, layer), w in _shared_frame_weights().items()}
    (o,) = _measure(WeightSet.from_tensors(weights), k=1, null_draws=50).roles
    assert o.predicted_space == "u" and o.verdict == "fails"


def test_report_is_json_serialisable_and_deterministic_given_the_seed():
    ws = WeightSet.from_tensors(_shared_frame_weights())
    a = _measure(ws, k=2, null_draws=20, seed=3).to_dict()
    b = _measure(ws, k=2, null_draws=20, seed=3).to_dict()
    assert json.dumps(a) == json.dumps(b)


def test_full_spectrum_makes_the_sigma2_bounds_meet():
    ws = WeightSet.from_tensors(_shared_frame_weights())
    (q,) = _measure(ws, k=2, null_draws=10, full_spectrum=True).roles
    s = q.spaces["v"]
    assert abs(s.sigma2_wa_upper - s.sigma2_wa) < 1e-5
    (q_top,) = _measure(ws, k=2, null_draws=10).roles
    t = q_top.spaces["v"]
    assert t.sigma2_wa - 1e-5 <= s.sigma2_wa <= t.sigma2_wa_upper + 1e-5


def test_roles_with_a_single_layer_are_skipped_with_a_note():
    weights = _shared_frame_weights(L=3)
    weights[("attn_k", 0)] = torch.randn(10, 30)
    report = _measure(WeightSet.from_tensors(weights), k=1, null_draws=10)
    assert [r.role for r in report.roles] == ["attn_q"]
    assert any("attn_k" in note for note in report.notes)


def test_report_round_trips_through_its_dict():
    report = _measure(WeightSet.from_tensors(_shared_frame_weights()), k=2, null_draws=10)
    again = Report.from_dict(json.loads(json.dumps(report.to_dict())))
    assert again == report


def test_a_payload_that_is_not_a_report_is_a_geodrift_error():
    with pytest.raises(GeodriftError, match="not a geodrift continuity report"):
        Report.from_dict({"origin": "x"})


@pytest.mark.parametrize("field,value,option", [("k", 0, "--k"), ("null_draws", 1, "--null-draws")])
def test_out_of_range_options_name_the_option(field: str, value: int, option: str):
    with pytest.raises(GeodriftError, match=option):
        MeasureSpec(**{field: value})  # type: ignore[arg-type]


def test_exact_and_streamed_routes_agree():
    ws = WeightSet.from_tensors(_shared_frame_weights())
    exact = _measure(ws, k=2, null_draws=20, svd="exact")
    streamed = _measure(ws, k=2, null_draws=20, svd="topk")
    for a, b in zip(exact.roles, streamed.roles, strict=True):
        for space in ("v", "u"):
            for va, vb in zip(a.spaces[space].vectors, b.spaces[space].vectors, strict=True):
                assert va.mean == pytest.approx(vb.mean, abs=1e-4)
                assert va.null_mean == pytest.approx(vb.null_mean, abs=1e-4)
    assert set(exact.roles[0].methods) <= {"exact", "exact-gram"} and sum(exact.roles[0].methods.values()) == 6
    assert set(streamed.roles[0].methods) <= {"lanczos", "exact", "exact-fallback"}


def test_neither_verdict_is_relative_to_the_peers_in_each_space():
    from types import SimpleNamespace as S

    from geodrift.continuity.verdicts import neither_verdict

    quiet = S(mean=0.05, null_mean=0.03, z=2.0)
    loud = S(mean=0.8, null_mean=0.03, z=50.0)
    mild = S(mean=0.13, null_mean=0.03, z=20.0)  # excess 0.10: below 0.3, the old absolute threshold
    assert projection_verdict(None, quiet, quiet)[0] == "holds"
    assert projection_verdict(None, loud, quiet)[0] == "n/a"  # significant, and no peers to compare with
    assert projection_verdict("u", loud, quiet)[0] == "fails"
    strong_peers = {"v": [0.5, 0.4, 0.6, 0.3], "u": [0.4, 0.7]}
    weak_peers = {"v": [0.5, 0.05, 0.6, 0.3], "u": [0.4, 0.7]}  # K's excess 0.05 is below V's 0.10
    assert neither_verdict(mild, quiet, strong_peers)[0] == "holds"
    assert neither_verdict(mild, quiet, weak_peers)[0] == "fails"  # V more continuous than K: not "neither"
    assert neither_verdict(quiet, mild, {"v": [0.5], "u": [0.05]})[0] == "fails"
    assert neither_verdict(loud, quiet, strong_peers)[0] == "fails"


def test_measure_decides_v_against_the_other_projections_of_the_same_report():
    g = torch.Generator().manual_seed(3)
    base = torch.randn(16, generator=g)
    tensors = {}
    for layer in range(5):
        for role in ("attn_q", "attn_v", "mlp_down"):
            shared = torch.outer(torch.randn(16, generator=g), base) if role != "mlp_down" else \
                torch.outer(base, torch.randn(16, generator=g))
            scale = {"attn_q": 6.0, "attn_v": 6.0, "mlp_down": 6.0}[role]
            # Q noisier than V: V's shared input frame is then strictly more continuous than Q's (no tie
            # left to the null draws).
            noise = 0.5 if role == "attn_q" else 0.1
            tensors[(role, layer)] = scale * shared / shared.norm() * 4 + noise * torch.randn(16, 16, generator=g)
    report = _measure(WeightSet.from_tensors(tensors), k=1, null_draws=30)
    v = report.role("attn_v")
    assert v is not None and "peer" in v.criterion
    # V shares Q's input frame and is more continuous than Q there: "neither" fails.
    assert v.verdict == "fails"


def _leaves(x: object, path: str = "") -> list[tuple[str, object]]:
    if isinstance(x, dict):
        return [leaf for k, v in x.items() for leaf in _leaves(v, f"{path}.{k}")]
    if isinstance(x, list):
        return [leaf for i, v in enumerate(x) for leaf in _leaves(v, f"{path}[{i}]")]
    return [(path, x)]


# Every |cos|-scale statistic (the per-pair nulls included: they are means of |cos| of k >= 2 vectors too).
SIMILARITIES = {"per_pair", "mean", "median", "null_mean", "null_std", "per_pair_null_mean", "per_pair_null_std",
                "sigma2_wa", "sigma2_wa_upper", "sigma2_wa_per_pair", "sigma2_null_mean", "sigma2_null_std",
                "subspace_overlap", "max_residual"}


def _assert_matches_golden(now: dict, golden: Path, skip: Callable[[str], bool] = lambda path: False) -> None:
    # Every leaf of the golden report in ``now``: similarities to 1e-4, z to 1e-2, the rest to a relative 1e-5
    # (see the raw golden test for why); strings and verdicts exactly. ``skip``: leaves not compared.
    before = json.loads(golden.read_text(encoding="utf-8"))
    now_leaves, before_leaves = dict(_leaves(now)), _leaves(before)
    for path, old in before_leaves:
        if skip(path):
            continue
        new = now_leaves[path]
        if isinstance(old, float):
            leaf = path.rsplit(".", 1)[-1].split("[")[0]
            abs_tol = 1e-2 if leaf == "z" else 1e-4 if leaf in SIMILARITIES else 1e-6
            assert isinstance(new, float) and math.isclose(new, old, rel_tol=1e-5, abs_tol=abs_tol), path
        else:
            assert new == old, path


def test_scan_of_the_embedded_model_matches_the_golden_report():
    # tests/golden/smollm2_scan_main.json is `geodrift scan --view raw --json` (the paper's metric; the raw view
    # was the default until issue 31) without its `schema_version` and `kind`
    # (the Report's to_dict), written on branch issue13 when the permutation generator became one torch.randperm per draw and pair (same
    # uniform distribution, a different stream): against the previous golden (commit a7790c9, before the
    # continuity package existed) every null mean and std moved by at most 0.42 of its null std, every
    # observed similarity by at most 4.4e-5, and the OV composite's effective-rank bounds by 1.8e-5 relative
    # (its ||W||_F^2 now comes from the factors in float64: 2e-7 from a float64 reference instead of 6e-6).
    # The one measurement path must give the same numbers up to the top-k SVD's accuracy: Lanczos accepts a relative residual of 1e-4, so a k >= 2 vector can move by ~1e-4
    # in |cos| when the float32 summation order changes (seen: 4e-5 per pair, 3e-6 on a mean); z moves
    # with it (seen: 8e-4). Every similarity must agree to 1e-4 (finer than the 3 decimals shown), z to
    # 1e-2 (1 decimal shown), every other number to a relative 1e-5.
    # Issue 13 replaced V's absolute 0.3 criterion by a relative one: the roles' "verdict" and "criterion"
    # fields were copied into the golden file from `geodrift scan --json` at that change (only V's
    # criterion text differed; every verdict and every number is still the a7790c9 output).
    from geodrift.scanner.scan import load_weights, scan

    ws, heads = load_weights(None, "raw")
    _assert_matches_golden(json.loads(json.dumps(scan(ws, MeasureSpec(), heads=heads).to_dict())), GOLDEN)


def test_the_default_scan_of_the_embedded_model_is_canonical_and_matches_its_golden_report():
    # The default view (issue 31): canonical, as geodrift has derived SmolLM2's gauge group (llama).
    # tests/golden/smollm2_scan_canonical.json is the default scan of issue 38's branch `continuity` (before: commit
    # 93c617d). Issue 38 changed it on purpose: the residual side is judged against the rotation null (analytic,
    # basis-free: z moved, e.g. Q v1 120.8 -> 106.9, Down u1 151.8 -> 161.1; every mean the same) and no residual
    # basis is computed (the V/O and Q/K factors are signed against the token embedding's mean, which moved the
    # unjudged head-side numbers of Q, K, V and O); every verdict is unchanged. Written by
    #   OMP_NUM_THREADS=1 .venv/bin/geodrift scan --json --quiet | .venv/bin/python -c "import json, sys;
    #   d = json.load(sys.stdin); print(json.dumps({k: d[k] for k in ('origin', 'view', 'k', 'null_draws',
    #   'seed', 'roles', 'notes')}))"
    # (the raw golden's fields). The same tolerances as the raw golden. Head/hidden-side spaces (gauge
    # "aligned": not shown, not judged) are left out: hidden units whose sort keys tie within float32 rounding
    # may swap there (tests/_gauge.py), so only their gauge label and the verdicts are compared.
    from geodrift.scanner.scan import load_weights, scan

    ws, heads = load_weights(None)
    assert ws.view == "canonical" and ws.notes == ()
    now = json.loads(json.dumps(scan(ws, MeasureSpec(), heads=heads).to_dict()))
    golden = json.loads(GOLDEN_CANONICAL.read_text(encoding="utf-8"))
    aligned = [f".roles[{i}].spaces.{x}." for i, r in enumerate(golden["roles"]) for x, space in r["spaces"].items()
               if space["gauge"] == "aligned"]
    assert len(aligned) == 7  # Q, K, V, Gate, Up u; O, Down v
    _assert_matches_golden(now, GOLDEN_CANONICAL,
                           skip=lambda path: any(path.startswith(a) and not path.endswith(".gauge") for a in aligned))
    assert [(r["label"], r["verdict"], r["path_verdict"]) for r in now["roles"]] == [
        (r["label"], r["verdict"], r["path_verdict"]) for r in golden["roles"]]
