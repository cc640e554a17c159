"""The structural guard of the scan's speed: counts of what a scan does, never timings (those are in benchmarks/).

Issue 22: the trajectory nulls once multiplied the permutation rows a scan generates by 72 (626 k `randperm`
rows on SmolLM2, half never used) and the scan went from 3x to 16-33x its read floor without any test noticing.
These counts are deterministic, so each is pinned to what the design says it must be:

- every projection is read (dequantized) once;
- every matrix and OV composite is decomposed once, none by the exact fallback, with at most
  ``LANCZOS_PASSES`` products with the whole matrix (the Gram matrix, then the two products of the acceptance
  rule's residuals);
- the permutation rows are one bank per vector shape: ``draws x (layers - 1)`` per dimension, shared by every
  role, space, statistic and trajectory lag (nothing else draws permutations);
- on a safetensors checkpoint (written here), a matrix too large to be read ahead is warmed into the page cache
  once on the reader thread and still read once; small Gram sides take the ``eigh`` route, once each; and the
  report is the same whichever matrices were warmed.
"""

from __future__ import annotations

import importlib
from collections import Counter
from typing import Any

import pytest
import torch

from geodrift import metrics
from geodrift.continuity import MeasureSpec
from geodrift.linalg import SVDTriplets
from geodrift.scanner.scan import load_weights, scan
from geodrift.weights import WeightSet

measure_module = importlib.import_module("geodrift.continuity.measure")
LANCZOS_PASSES = 3


class Tally:
    """Counting wrappers around the real functions (each call goes through to them)."""

    def __init__(self) -> None:
        self.reads: Counter[tuple[str, int]] = Counter()
        self.decompositions: list[tuple[tuple[int, int], str, int]] = []
        self.permutation_rows = 0

    def reading(self, real: Any) -> Any:
        def read(ws: WeightSet, key: tuple[str, int]) -> Any:
            self.reads[key] += 1
            return real(ws, key)
        return read

    def decomposing(self, real: Any) -> Any:
        def decompose(matrix: Any, k: int, *args: Any, **kwargs: Any) -> SVDTriplets:
            result = real(matrix, k, *args, **kwargs)
            self.decompositions.append((tuple(matrix.shape), result.method, result.passes))
            return result
        return decompose

    def permuting(self, real: Any) -> Any:
        def permutations(draws: int, n_pairs: int, d: int, generator: Any) -> Any:
            self.permutation_rows += draws * n_pairs
            return real(draws, n_pairs, d, generator)
        return permutations


@pytest.fixture(scope="module")
def counted_scan() -> tuple[Tally, WeightSet, Any]:
    tally = Tally()
    patch = pytest.MonkeyPatch()
    try:
        patch.setattr(WeightSet, "__getitem__", tally.reading(WeightSet.__getitem__))
        patch.setattr(measure_module, "top_k_svd", tally.decomposing(measure_module.top_k_svd))
        patch.setattr(measure_module, "top_k_svd_of_product", tally.decomposing(measure_module.top_k_svd_of_product))
        patch.setattr(metrics, "random_permutations", tally.permuting(metrics.random_permutations))
        # the raw view's reads (the canonical default reads each folded matrix through the checks once, then
        # checks its canonical layer's matrix again: two __getitem__ per key, one read of the file)
        ws, heads = load_weights(None, "raw", layers=list(range(6)))
        report = scan(ws, MeasureSpec(), heads=heads)
    finally:
        patch.undo()
    return tally, ws, report


def test_a_scan_reads_every_projection_once(counted_scan):
    tally, ws, _ = counted_scan
    assert set(tally.reads) == set(ws) and set(tally.reads.values()) == {1}


def test_a_scan_decomposes_every_matrix_once_without_an_exact_fallback_and_within_its_passes(counted_scan):
    tally, ws, report = counted_scan
    n_layers = len(ws.layers("attn_o"))
    assert len(tally.decompositions) == len(ws) + n_layers  # the projections and one OV composite per layer
    assert Counter(method for _, method, _ in tally.decompositions) == {"lanczos": len(ws) + n_layers}
    assert max(passes for _, _, passes in tally.decompositions) <= LANCZOS_PASSES
    assert sum(sum(r.methods.values()) for r in report.roles) == len(tally.decompositions)


def test_a_scan_draws_one_permutation_bank_per_vector_dimension_and_nothing_else(counted_scan):
    tally, ws, report = counted_scan
    draws, n_layers = report.null_draws, len(ws.layers("attn_q"))
    dims = {s.dim for r in report.roles for s in r.spaces.values()}
    assert {t.dim for t in report.trajectory} <= dims  # the trajectory's nulls reuse the main table's banks
    assert tally.permutation_rows == draws * (n_layers - 1) * len(dims)


def test_the_layer_order_null_draws_one_sequence_of_orders_per_depth_shared_by_every_stack():
    # 10 layers (10! > ORDER_EXACT_MAX: random orders), two roles, both spaces: four stacks of one depth. Unrelated
    # random vectors reach their observed value quickly; depth-ordered ones (an arc) need every order.
    from geodrift.continuity.bank import PermutationBank
    from geodrift.continuity.trajectory import _ORDER_BATCH, ORDER_DRAWS, trajectory_shapes

    g = torch.Generator().manual_seed(3)
    angles = torch.linspace(0, 1.5, 10)
    arc = torch.cat([torch.stack([angles.cos(), angles.sin()], 1), torch.zeros(10, 10)], 1)  # (10, 12)
    spectra = {}
    for role in ("attn_q", "mlp_down"):
        for layer in range(10):
            u = arc[layer, :8] if role == "attn_q" else torch.randn(8, generator=g)
            v = arc[layer] if role == "attn_q" else torch.randn(12, generator=g)
            spectra[(role, layer)] = SVDTriplets(U=(u / u.norm())[:, None], S=torch.ones(1), Vh=(v / v.norm())[None],
                                                   frobenius_sq=1.0, residual=0.0, method="exact")
    bank = PermutationBank(torch.Generator().manual_seed(0))
    shapes = trajectory_shapes(spectra, 20, 0, bank)
    assert len(shapes) == 4
    assert min(t.order_p for t in shapes) < 1e-4  # the arc needed (almost) every order ...
    assert bank.orders_generated == ORDER_DRAWS  # ... and the four stacks together drew them once
    assert bank.orders_generated % _ORDER_BATCH == 0


def _counted_safetensors_scan(folder: Any, prefetch_max: int) -> tuple[Tally, Counter[str], WeightSet, Any]:
    from geodrift.continuity import schedule
    from geodrift.scanner.safetensors_reader import SafetensorsCheckpoint

    tally, warmed = Tally(), Counter()
    real_warm = SafetensorsCheckpoint.warm

    def warm(self: Any, name: str) -> None:
        warmed[name] += 1
        real_warm(self, name)

    patch = pytest.MonkeyPatch()
    try:
        patch.setattr(schedule, "PREFETCH_MAX_NUMEL", prefetch_max)
        patch.setattr(SafetensorsCheckpoint, "warm", warm)
        patch.setattr(WeightSet, "__getitem__", tally.reading(WeightSet.__getitem__))
        patch.setattr(measure_module, "top_k_svd", tally.decomposing(measure_module.top_k_svd))
        patch.setattr(measure_module, "top_k_svd_of_product", tally.decomposing(measure_module.top_k_svd_of_product))
        patch.setattr(metrics, "random_permutations", tally.permuting(metrics.random_permutations))
        ws, heads = load_weights(folder, "raw")  # the raw view's reads (the canonical view reads a layer at once)
        report = scan(ws, MeasureSpec(svd="topk", null_draws=20), heads=heads)
    finally:
        patch.undo()
    return tally, warmed, ws, report


def test_a_large_matrix_is_warmed_on_the_reader_thread_then_read_once_and_the_report_does_not_change(tmp_path):
    from _checkpoints import hf_config, llama_state, write_hf_folder

    # d 64, d_ff 160: Q/K/V/O up to 4096 entries (read ahead), Gate/Up/Down 10240 ("large" under a 4096 limit:
    # warmed, then read in the loop); Gate/Up/Down have a Gram side of 64, the eigh route's.
    folder = write_hf_folder(tmp_path / "m", llama_state(4, d=64, n_heads=4, n_kv=2, d_ff=160),
                             hf_config(n_layers=4, d=64, n_heads=4, n_kv=2, d_ff=160), shards=2)
    tally, warmed, ws, report = _counted_safetensors_scan(folder, 64 * 64)
    large = {key for key in ws if ws.entries[key].shape[0] * ws.entries[key].shape[1] > 64 * 64}
    assert large and set(tally.reads) == set(ws) and set(tally.reads.values()) == {1}
    assert len(warmed) == len(large) and set(warmed.values()) == {1}  # each large one warmed once, nothing else
    assert all(name.endswith(("gate_proj.weight", "up_proj.weight", "down_proj.weight")) for name in warmed)
    assert len(tally.decompositions) == len(ws) + len(ws.layers("attn_o"))
    assert {method for shape, method, _ in tally.decompositions if 10240 in (shape[0] * shape[1],)} == {"eigh"}
    assert max(passes for _, _, passes in tally.decompositions) <= LANCZOS_PASSES
    dims = {sp.dim for r in report.roles for sp in r.spaces.values()}
    assert tally.permutation_rows == report.null_draws * (len(ws.layers("attn_q")) - 1) * len(dims)
    # Nothing warmed (every matrix read ahead): the same report, number for number.
    _, none_warmed, _, same = _counted_safetensors_scan(folder, 2**24)
    assert not none_warmed and same.to_dict() == report.to_dict()


def test_a_gguf_warms_its_large_matrices_too(monkeypatch):
    # The embedded SmolLM2 (GGUF) with a limit of 576 x 576 entries: Gate, Up and Down (1536 x 576) are warmed once each.
    from geodrift.continuity import schedule
    from geodrift.scanner.gguf_reader import GGUFCheckpoint

    warmed: Counter[str] = Counter()
    real_warm = GGUFCheckpoint.warm

    def warm(self: Any, name: str) -> None:
        warmed[name] += 1
        real_warm(self, name)

    monkeypatch.setattr(schedule, "PREFETCH_MAX_NUMEL", 576 * 576)
    monkeypatch.setattr(GGUFCheckpoint, "warm", warm)
    ws, heads = load_weights(None, "raw", layers=[0, 1, 2])  # the raw view's reads
    scan(ws, MeasureSpec(null_draws=10), heads=heads)
    assert sorted(warmed) == sorted(f"blk.{layer}.ffn_{kind}.weight" for layer in range(3) for kind in ("gate", "up", "down"))
    assert set(warmed.values()) == {1}


def _canonical_scan_counting_mlp_maps(folder: Any, prefetch_max: int) -> tuple[Counter[tuple[str, bool]], Any]:
    # the default (canonical) view's scan; counts each gated matrix mapped (apply_gated), and whether off the main thread
    import threading

    from geodrift.continuity import schedule
    from geodrift.scanner import canonical_view

    mapped: Counter[tuple[str, bool]] = Counter()
    real_apply = canonical_view.apply_gated

    def apply(kind: str, weight: torch.Tensor, maps: Any) -> torch.Tensor:
        mapped[(kind, threading.current_thread() is not threading.main_thread())] += 1
        return real_apply(kind, weight, maps)

    patch = pytest.MonkeyPatch()
    try:
        patch.setattr(schedule, "PREFETCH_MAX_NUMEL", prefetch_max)
        patch.setattr(canonical_view, "apply_gated", apply)
        ws, heads = load_weights(folder, "canonical")
        report = scan(ws, MeasureSpec(svd="topk", null_draws=20), heads=heads)
    finally:
        patch.undo()
    return mapped, report


def test_the_canonical_view_makes_each_large_mlp_matrix_ahead_on_the_reader_thread_and_the_report_does_not_change(
        tmp_path):
    from _checkpoints import hf_config, llama_state, write_hf_folder

    # As above: Gate/Up/Down (10240 entries) are "large" under a 4096 limit, so the scan reads them on its main thread
    # after warming them; the canonical view's warm-up makes each whole there (once), and the main thread only takes it.
    folder = write_hf_folder(tmp_path / "m", llama_state(4, d=64, n_heads=4, n_kv=2, d_ff=160),
                             hf_config(n_layers=4, d=64, n_heads=4, n_kv=2, d_ff=160), shards=2)
    mapped, report = _canonical_scan_counting_mlp_maps(folder, 64 * 64)
    assert mapped == Counter({(kind, True): 4 for kind in ("gate", "up", "down")})
    # Nothing large (every matrix read ahead whole, as before): the same report, number for number.
    _, same = _canonical_scan_counting_mlp_maps(folder, 2**24)
    assert report.view == "canonical" and same.to_dict() == report.to_dict()
