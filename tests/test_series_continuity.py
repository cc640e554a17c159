"""``drift`` and ``compare`` in the default view are exact *and* continuous (issue 38, item 3).

Two properties, on real weights: the embedded SmolLM2-135M (its first layers, written as a Hugging Face
folder) and a simulator Llama (random norm gains, GQA), each perturbed by Gaussian noise of relative size
``eps`` (1e-4 to 1e-2 of each matrix's standard deviation) on every matrix or on the token embedding alone:

- **continuity**: the default view's rotation angles (``drift``) and principal angles (``compare``) move
  like the raw view's: their mean at most :data:`MEAN_RATIO` times the raw mean, every one at most
  :data:`MAX_RATIO` times the raw maximum, each plus :data:`FLOOR_DEG` (the top-k SVD's own accuracy: the raw
  view of two bitwise-equal layers reads up to 0.04 degrees on SmolLM2) and plus the turn of the residual frame
  (:func:`token_frame_deg`: the default view's frame is fixed by the token rows, so noise on them turns it by about
  ``eps sqrt(d / vocab)`` radians, which the raw view does not see; SmolLM2 at 1e-3: 0.007 degrees). Why the
  constants hold: the
  default view aligns each checkpoint to the reference by the nearest point of its orbit, so the aligned
  weight distance never exceeds the distance of the two canonical forms (each step of the alignment is a nearest
  point given the others), and it stays within :data:`BALANCE_LIPSCHITZ` times the raw distance
  (:func:`test_the_aligned_distance_is_the_raw_distance`: 0.99 to 1.02 measured, while the two canonical forms on
  their own are 0.1 to 0.5 apart under 1e-3 noise); a singular vector then turns by at most that distance over
  its spectral gap (Davis-Kahan), the bound the raw view obeys with its own gap. The angle ratios are margins
  over what was measured (SmolLM2 at 1e-2: mean 1.3x, largest 2.7x the raw view's; docs/scan.md).
- **exactness**: an exact gauge ``g`` of the perturbed copy changes no number: ``A`` against ``g (A + eps D)``
  gives the numbers of ``A`` against ``A + eps D`` (to :data:`SAME_COS` in ``|cos|``).

On main before issue 38 (each checkpoint canonicalised on its own) the continuity property failed at once
(SmolLM2, 1e-3 on every matrix: 9.7 degrees against 0.03).
"""

from __future__ import annotations

import json
import math
import shutil
import tempfile
from pathlib import Path

import hypothesis.strategies as st
import pytest
import torch
from hypothesis import HealthCheck, given
from safetensors.torch import load_file, save_file
from strategies import examples

from geodrift.continuity import MeasureSpec
from geodrift.gauge.orbit import GaugeShape, fold_gains, random_gauge
from geodrift.lm.hf import save_hf
from geodrift.lm.llama import LlamaLM
from geodrift.pretrained import llama_from_checkpoint, open_llama
from geodrift.scanner.series import compare, drift

MEAN_RATIO = 2.0  # the default view's mean angle against the raw view's (issue 38's Done-when)
MAX_RATIO = 10.0  # any one angle against the raw view's largest
FLOOR_DEG = 0.1  # degrees: the top-k SVD's accuracy (its residual check: 1e-4 of s1)
SAME_COS = 1e-4  # |cos| of two gauge-equivalent pairs
BALANCE_LIPSCHITZ = 1.5  # the aligned weight distance over the raw one (gains folded), both relative (measured <= 1.02)
EPS = st.floats(-4.0, -2.0).map(lambda x: 10.0 ** x)
SCOPE = st.sampled_from(["all", "embedding"])
SMOLLM2_LAYERS = 4


class Base:
    """A model written once as a Hugging Face folder, and perturbed copies of it written beside."""

    def __init__(self, folder: Path, shape: GaugeShape) -> None:
        self.folder, self.shape = folder, shape
        self.sd = load_file(folder / "model.safetensors")
        self.config = (folder / "config.json").read_text()

    def write(self, sd: dict[str, torch.Tensor], where: Path) -> str:
        where.mkdir(parents=True)
        save_file({k: v.to(torch.float32).contiguous() for k, v in sd.items()}, str(where / "model.safetensors"))
        config = json.loads(self.config)
        config["tie_word_embeddings"] = "lm_head.weight" not in sd
        (where / "config.json").write_text(json.dumps(config))
        return str(where)

    def perturbed(self, eps: float, scope: str, seed: int) -> dict[str, torch.Tensor]:
        """Every matrix (or the token embedding alone) plus Gaussian noise of ``eps`` times its own std."""
        g = torch.Generator().manual_seed(seed)
        out = {}
        for name, value in self.sd.items():
            moved = value.ndim == 2 and (scope == "all" or name == "model.embed_tokens.weight")
            out[name] = value + eps * value.std() * torch.randn(value.shape, generator=g) if moved else value.clone()
        return out


@pytest.fixture(scope="module")
def smollm2(tmp_path_factory: pytest.TempPathFactory) -> Base:
    model = llama_from_checkpoint(open_llama(None))
    folder = save_hf(model, tmp_path_factory.mktemp("smollm2") / "base", layers=list(range(SMOLLM2_LAYERS)))
    return Base(folder, GaugeShape(SMOLLM2_LAYERS, model.n_heads, model.n_kv_heads, model.head_dim))


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Base:
    model = LlamaLM(vocab_size=96, d_model=48, n_layers=4, n_heads=4, n_kv_heads=2, d_ff=80, init_std=0.15,
                    generator=torch.Generator().manual_seed(7))
    with torch.no_grad():  # norm gains away from 1, so that folding them matters
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(torch.rand(p.shape, generator=torch.Generator().manual_seed(len(name))) + 0.5)
    folder = save_hf(model, tmp_path_factory.mktemp("sim") / "base")
    return Base(folder, GaugeShape.from_model(model))


SPEC = MeasureSpec(k=3, null_draws=8)


def _drift_angles(a: str, b: str, view: str | None) -> dict[tuple[str, str, int], float]:
    return {(r.role, r.space, r.layer): r.angle_deg for r in drift([a, b], SPEC, view=view).rotation}


def _compare_angles(a: str, b: str, view: str | None) -> dict[tuple[str, str, int], list[float]]:
    return {(r.role, r.space, r.layer): r.principal_angles_deg for r in compare(a, b, SPEC, view=view).subspaces}


def _moves_like_raw(default: list[float], raw: list[float], frame: float, what: str) -> None:
    mean_default, mean_raw = sum(default) / len(default), sum(raw) / len(raw)
    assert mean_default <= MEAN_RATIO * mean_raw + FLOOR_DEG + frame, (what, mean_default, mean_raw)
    assert max(default) <= MAX_RATIO * max(raw) + FLOOR_DEG + frame, (what, max(default), max(raw))


def token_frame_deg(base: Base, eps: float) -> float:
    """How far (degrees) noise of relative size ``eps`` on the token rows alone turns the default view's residual
    frame, which their Procrustes fixes: about ``eps sqrt(d / vocab)`` radians (the rotation's generator is the skew
    part of ``E^T N``, of entries ``~ eps |E|^2 / sqrt(vocab d)``, over eigenvalues ``~ |E|^2 / d``). The raw view,
    anchored in stored coordinates, does not turn: the whole of it is the default view's."""
    vocab, d = base.sd["model.embed_tokens.weight"].shape
    return math.degrees(eps * math.sqrt(d / vocab))


def _continuity(base: Base, eps: float, scope: str, seed: int) -> None:
    frame = token_frame_deg(base, eps)
    with tempfile.TemporaryDirectory() as tmp:
        other = base.write(base.perturbed(eps, scope, seed), Path(tmp) / "b")
        a = str(base.folder)
        default, raw = _drift_angles(a, other, None), _drift_angles(a, other, "raw")
        _moves_like_raw(list(default.values()), list(raw.values()), frame, f"drift eps={eps:.2e} {scope}")
        default_c, raw_c = _compare_angles(a, other, None), _compare_angles(a, other, "raw")
        _moves_like_raw([x for v in default_c.values() for x in v], [x for v in raw_c.values() for x in v], frame,
                        f"compare eps={eps:.2e} {scope}")


@examples(2, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(eps=EPS, scope=SCOPE, seed=st.integers(0, 2**31 - 1))
def test_default_drift_and_compare_of_smollm2_move_like_the_raw_view(smollm2: Base, eps: float, scope: str,
                                                                      seed: int) -> None:
    _continuity(smollm2, eps, scope, seed)


@examples(6, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(eps=EPS, scope=SCOPE, seed=st.integers(0, 2**31 - 1))
def test_default_drift_and_compare_of_a_simulator_llama_move_like_the_raw_view(sim: Base, eps: float, scope: str,
                                                                                seed: int) -> None:
    _continuity(sim, eps, scope, seed)


def _numbers(a: str, b: str) -> dict[tuple[str, ...], float]:
    out: dict[tuple[str, ...], float] = {}
    for r in drift([a, b], SPEC).rotation:
        out[("drift", r.role, r.space, str(r.layer))] = r.abs_cos
    for s in compare(a, b, SPEC).subspaces:
        for i, angle in enumerate(s.principal_angles_deg):
            out[("compare", s.role, s.space, str(s.layer), str(i))] = math.cos(math.radians(angle))
        out[("overlap", s.role, s.space, str(s.layer))] = s.overlap
    return out


def _exactness(base: Base, eps: float, seed: int, gauge_seed: int) -> None:
    moved = base.perturbed(eps, "all", seed)
    gauged = random_gauge({k: v.double() for k, v in moved.items()}, base.shape,
                          torch.Generator().manual_seed(gauge_seed), condition=100.0, sigma=1.0)
    tmp = Path(tempfile.mkdtemp())
    try:
        plain = _numbers(str(base.folder), base.write(moved, tmp / "b"))
        other = _numbers(str(base.folder), base.write(gauged, tmp / "gb"))
    finally:
        shutil.rmtree(tmp)
    assert plain.keys() == other.keys()
    worst = max(plain, key=lambda key: abs(plain[key] - other[key]))
    assert abs(plain[worst] - other[worst]) <= SAME_COS, (worst, plain[worst], other[worst])


@examples(4, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(eps=EPS, seed=st.integers(0, 2**31 - 1), gauge_seed=st.integers(0, 2**31 - 1))
def test_an_exact_gauge_of_a_perturbed_simulator_llama_changes_no_default_number(sim: Base, eps: float, seed: int,
                                                                                  gauge_seed: int) -> None:
    _exactness(sim, eps, seed, gauge_seed)


@pytest.mark.heavy  # SmolLM2 draws; the default run keeps the simulator Llama's
@examples(1, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(eps=EPS, seed=st.integers(0, 2**31 - 1), gauge_seed=st.integers(0, 2**31 - 1))
def test_an_exact_gauge_of_a_perturbed_smollm2_changes_no_default_number(smollm2: Base, eps: float, seed: int,
                                                                          gauge_seed: int) -> None:
    _exactness(smollm2, eps, seed, gauge_seed)


@pytest.mark.heavy  # many aligned pairs; the default run keeps the continuity and exactness properties
@examples(6, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(eps=EPS, scope=SCOPE, seed=st.integers(0, 2**31 - 1))
def test_the_aligned_distance_is_the_raw_distance(sim: Base, eps: float, scope: str, seed: int) -> None:
    """The guarantee behind the constants: the default view hands the scan each checkpoint's weights aligned to the
    reference's canonical ones, and they are as far apart as their raw weights (gains folded), while the two canonical
    forms on their own can be far apart (the tie-breaks)."""
    from geodrift.scanner.open import open_model
    from geodrift.scanner.series_gauge import aligned_weightset, reference_weightset

    moved = sim.perturbed(eps, scope, seed)
    raw = [fold_gains({k: v.double() for k, v in sd.items()}, sim.shape) for sd in (sim.sd, moved)]
    with tempfile.TemporaryDirectory() as tmp:
        reference, store = reference_weightset(open_model(str(sim.folder)))
        canonical_a = {key: reference[key].double() for key in reference}
        aligned, source = aligned_weightset(open_model(sim.write(moved, Path(tmp) / "b")), store, "orthogonal")
        b = {key: aligned[key].double() for key in aligned}  # in B's own frame
        turn = source.start()[0].double().T  # R^T of the token rows: readers W R^T, writers R W
        canonical_b = {key: (turn.T @ w if key[0] in ("attn_o", "mlp_down") else w @ turn) for key, w in b.items()}
    distance = (sum(float((canonical_b[k] - canonical_a[k]).pow(2).sum()) for k in canonical_a)
                / sum(float(w.pow(2).sum()) for w in canonical_a.values())) ** 0.5
    layers = [k for k in raw[0] if k.startswith("model.layers.") and k.endswith("proj.weight")]
    raw_distance = (sum(float((raw[1][k] - raw[0][k]).pow(2).sum()) for k in layers)
                    / sum(float(raw[0][k].pow(2).sum()) for k in layers)) ** 0.5
    frame = math.radians(token_frame_deg(sim, eps))  # the token rows turn the frame: every matrix moves by that much
    assert distance <= BALANCE_LIPSCHITZ * raw_distance + 2 * frame, (distance, raw_distance)
