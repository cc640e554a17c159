"""From a WeightSet to everything a continuity report shows, per projection (role).

One code path for simulated and pretrained weights: :func:`analyze_weightset` streams the matrices
one at a time (top-k SVD each, only the vectors are kept), then computes per role and per space
(``v`` input, ``u`` output): adjacent ``|cos|`` for ``k = 1..K`` (Eq. 1), the sigma^2-weighted
alignment (Eq. 2, with its truncation bound), top-K subspace overlap, effective-rank bounds (Eq. 3),
both noise floors (analytic ``sqrt(2/(pi d))`` and a seeded permutation null) and the theory's
verdict.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field

import torch
from threadpoolctl import threadpool_limits

from geodrift import metrics
from geodrift.linalg import SVDTriplets, top_k_svd
from geodrift.weights import PREDICTED_SPACE, ROLE_LABELS, WeightSet

# A projection's space counts as continuous when its v1/u1 continuity beats the permutation null
# by this many null standard deviations (a one-sided test at about 1e-3 under a normal null).
Z_SIGNIFICANT = 3.0

# For "neither space" (V): an excess over the null below this counts as no continuity. It is the
# level the paper calls low (V: 0.14 in Llama-3.1-8B, against 0.63-0.89 for the other projections).
QUIET_EXCESS = 0.3
# Vectors shown per space in the k table (the SVD may compute more for the full Eq. 2).
SPACES = ("v", "u")
# Up to this many vectors per space, one permutation sample serves both the Eq. 1 and Eq. 2 nulls.
NULL_MAX_VECTORS = 32
# Matrices up to this many entries (64 MB in float32) are read ahead on a second thread.
PREFETCH_MAX_NUMEL = 16 * 2**20


@dataclass(frozen=True)
class VectorContinuity:
    """Eq. 1 for one singular-vector index ``k`` (1-based) in one space, with both floors."""

    k: int
    per_pair: list[float]
    mean: float
    median: float
    baseline: float
    null_mean: float
    null_std: float
    z: float


@dataclass(frozen=True)
class SpaceContinuity:
    """All continuity numbers of one role in one space (``v`` = input, ``u`` = output)."""

    space: str
    dim: int
    vectors: list[VectorContinuity]
    sigma2_wa: float  # mean over pairs of the truncated Eq. 2 (a lower bound when K < rank)
    sigma2_wa_upper: float  # + the left-out energy share: the full Eq. 2 is in [sigma2_wa, upper]
    sigma2_wa_per_pair: list[float]
    sigma2_null_mean: float
    sigma2_null_std: float
    sigma2_null_draws: int
    subspace_overlap: float  # mean cos^2 of principal angles of the top-K subspaces
    subspace_baseline: float  # K / dim: random K-subspaces


@dataclass(frozen=True)
class RoleReport:
    """Everything the scan shows for one projection across its layers."""

    role: str
    label: str
    shape: tuple[int, int]
    layers: list[int]
    k: int
    spaces: dict[str, SpaceContinuity]
    erank_lower: list[float]
    erank_upper: list[float]
    predicted_space: str | None
    verdict: str
    criterion: str
    max_residual: float
    methods: dict[str, int]

    def space(self, name: str) -> SpaceContinuity:
        return self.spaces[name]


@dataclass
class ScanReport:
    """A whole WeightSet's continuity report; JSON-able via :meth:`to_dict`."""

    origin: str
    view: str
    k: int
    null_draws: int
    seed: int
    roles: list[RoleReport]
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)

    def rows(self) -> list[dict]:
        """Flat rows (one per role, space and k) for CSV output."""
        out = []
        for r in self.roles:
            for s in r.spaces.values():
                for vc in s.vectors:
                    out.append({
                        "origin": self.origin, "view": self.view, "role": r.role, "label": r.label,
                        "layers": len(r.layers), "space": s.space, "dim": s.dim, "k": vc.k,
                        "mean": vc.mean, "median": vc.median, "baseline": vc.baseline,
                        "null_mean": vc.null_mean, "null_std": vc.null_std, "z": vc.z,
                        "sigma2_wa": s.sigma2_wa, "sigma2_wa_upper": s.sigma2_wa_upper,
                        "sigma2_null_mean": s.sigma2_null_mean,
                        "subspace_overlap": s.subspace_overlap, "subspace_baseline": s.subspace_baseline,
                        "predicted_space": r.predicted_space or "none", "verdict": r.verdict,
                    })
        return out


def decompose(
    ws: WeightSet,
    k: int | None,
    progress: Callable[[str], None] | None = None,
    derive: Callable[[tuple[str, int], torch.Tensor], dict[tuple[str, int], torch.Tensor]] | None = None,
) -> dict[tuple[str, int], SVDTriplets]:
    """Top-``k`` triplets of every matrix, loading one matrix at a time, layer by layer.

    Args:
        ws: the weights; each value is loaded once and dropped after its SVD.
        k: triplets per matrix (clipped to the matrix rank); None = the full spectrum.
        progress: called with the key's label after each matrix.
        derive: optional hook called with every loaded matrix; it returns derived matrices (e.g. the
            OV composite once a layer's V and O have both been seen) that are decomposed too.

    Returns:
        ``{(role, layer): SVDTriplets}``.
    """
    roles = ws.roles()
    keys = sorted(ws, key=lambda key: (key[1], roles.index(key[0])))
    out = {}
    # One reader thread loads (reads + dequantizes) the next matrix while this one is decomposed, so
    # reading overlaps with the SVD on a second core. Only matrices up to PREFETCH_MAX_NUMEL are
    # prefetched: a 14336 x 4096 projection is read alone, keeping peak memory to one large matrix.
    def fetch(index: int) -> Future[torch.Tensor] | None:
        if index >= len(keys):
            return None
        if _numel(ws.entries[keys[index]].shape) <= PREFETCH_MAX_NUMEL:
            return reader.submit(ws.__getitem__, keys[index])
        return None

    # The SVDs run single-threaded: the second core reads ahead, and multi-threaded BLAS on
    # small matrices next to a busy core was 7x slower here (thread oversubscription).
    with ThreadPoolExecutor(max_workers=1) as reader, single_threaded_blas():
        pending = fetch(0)
        for index, key in enumerate(keys):
            W = pending.result() if pending is not None else ws[key]
            pending = fetch(index + 1)
            derived = derive(key, W) if derive is not None else {}
            for name, matrix in [(key, W), *derived.items()]:
                out[name] = top_k_svd(matrix, min(k or min(matrix.shape), min(matrix.shape)))
            del W, derived
            if progress is not None:
                progress(f"{key[0]}[{key[1]}]")
    return out


def analyze_weightset(
    ws: WeightSet,
    k: int = 8,
    null_draws: int = 100,
    seed: int = 0,
    progress: Callable[[str], None] | None = None,
    derive: Callable[[tuple[str, int], torch.Tensor], dict[tuple[str, int], torch.Tensor]] | None = None,
    full_spectrum: bool = False,
) -> ScanReport:
    """Continuity report of every role in ``ws`` (roles with one layer are skipped with a note).

    Args:
        ws: weights ``(role, layer) -> (d_out, d_in)``.
        k: singular vectors per space (``k = 1..K`` rows; K also truncates Eq. 2, bounded).
        null_draws: permutation-null draws per statistic.
        seed: seeds the permutation null (the only randomness).
        progress: called after each matrix's SVD.
        derive: hook that adds derived matrices (see :func:`decompose`), e.g. the OV composite.
        full_spectrum: compute every singular triplet so Eq. 2 is exact (a full SVD per matrix,
            slower); otherwise Eq. 2 is bounded from the top ``k``.

    Returns:
        ScanReport.

    Example:
        >>> g = torch.Generator().manual_seed(0)
        >>> ws = WeightSet.from_tensors({("block", i): torch.randn(8, 8, generator=g) for i in range(3)})
        >>> analyze_weightset(ws, k=2, null_draws=10).roles[0].label
        'Block'
    """
    spectra = decompose(ws, None if full_spectrum else k, progress, derive)
    generator = torch.Generator().manual_seed(seed)
    bank = PermutationBank(generator)
    roles = sorted({role for role, _ in spectra}, key=_role_order)
    reports, notes = [], []
    for role in roles:
        layers = sorted(layer for r, layer in spectra if r == role)
        if len(layers) < 2:
            notes.append(f"{role}: only {len(layers)} layer(s); continuity needs at least 2 - skipped")
            continue
        reports.append(analyze_role(role, [spectra[(role, layer)] for layer in layers], layers,
                                    null_draws, generator, k=k, bank=bank))
    return ScanReport(ws.origin, ws.view, k, null_draws, seed, reports, notes)


def analyze_role(
    role: str,
    triplets: list[SVDTriplets],
    layers: list[int],
    null_draws: int,
    generator: torch.Generator,
    k: int | None = None,
    bank: PermutationBank | None = None,
) -> RoleReport:
    """Continuity of one role from its per-layer triplets (ordered by depth).

    Args:
        role: the role name.
        triplets: one SVDTriplets per layer, same shapes.
        layers: the layer indices, same order.
        null_draws: permutation-null draws.
        generator: source of the null's randomness.
        k: vector indices to report (None = all available); Eq. 2 uses every available triplet.
        bank: permutations shared with other roles of the same shape (None = a private one).

    Returns:
        RoleReport with both spaces, floors, prediction and verdict.
    """
    available = min(t.S.shape[0] for t in triplets)
    k = min(k or available, available)
    sigma = torch.stack([t.S[:available] for t in triplets])  # (L, K)
    fro = torch.tensor([t.frobenius_sq for t in triplets], dtype=torch.float64)  # (L,)
    stacks = {
        "v": torch.stack([t.Vh[:available] for t in triplets]),  # (L, K, d_in)
        "u": torch.stack([t.U[:, :available].T for t in triplets]),  # (L, K, d_out)
    }
    bank = bank or PermutationBank(generator)
    spaces = {s: _space_continuity(s, stacks[s], sigma, fro, k, null_draws, bank) for s in SPACES}
    shape = (triplets[0].U.shape[0], triplets[0].Vh.shape[1])
    lower, upper = metrics.effective_rank_bounds(sigma, fro, min(shape))
    predicted = PREDICTED_SPACE.get(role)
    if role in PREDICTED_SPACE:
        verdict, criterion = _verdict(predicted, spaces)
    else:
        verdict, criterion = "no prediction", "the theory makes no per-space prediction for this role"

    methods: dict[str, int] = {}
    for t in triplets:
        methods[t.method] = methods.get(t.method, 0) + 1
    return RoleReport(
        role=role, label=ROLE_LABELS.get(role, role), shape=shape, layers=layers, k=k, spaces=spaces,
        erank_lower=lower.tolist(), erank_upper=upper.tolist(), predicted_space=predicted,
        verdict=verdict, criterion=criterion, max_residual=max(t.residual for t in triplets),
        methods=methods,
    )


def _space_continuity(
    space: str, vectors: torch.Tensor, sigma: torch.Tensor, fro: torch.Tensor, k: int, draws: int,
    bank: PermutationBank,
) -> SpaceContinuity:
    # vectors: (L, K, d) with K >= k; the first k are reported one by one, all K enter Eq. 2.
    n_pairs, available, dim = vectors.shape[0] - 1, vectors.shape[1], vectors.shape[2]
    cos = metrics.adjacent_abs_cos(vectors[:, :k])  # (L-1, k)
    # One set of permuted samples serves both nulls when all K vectors are few; with the full
    # spectrum, Eq. 2's null permutes every vector per draw, so its draws are capped (~32 x draws).
    shared = available <= NULL_MAX_VECTORS
    samples = metrics.permuted_abs_cos(vectors[:, :available if shared else k], draws, bank.generator,
                                       bank.get(draws, n_pairs, dim))
    null = metrics.null_of_continuity(samples[..., :k])
    if shared:
        wa_draws, wa_samples = draws, samples
    else:
        wa_draws = max(8, draws * NULL_MAX_VECTORS // available)
        wa_samples = metrics.permuted_abs_cos(vectors, wa_draws, bank.generator, bank.get(wa_draws, n_pairs, dim))
    wa_null = metrics.null_of_sigma2(wa_samples, sigma, fro)
    means = cos.mean(0)
    z = null.z(means)
    rows = [
        VectorContinuity(
            k=j + 1, per_pair=cos[:, j].tolist(), mean=float(means[j]), median=float(cos[:, j].median()),
            baseline=metrics.random_baseline(dim), null_mean=float(null.mean[j]),
            null_std=float(null.std[j]), z=float(z[j]),
        )
        for j in range(cos.shape[1])
    ]
    wa = metrics.sigma2_weighted_alignment(vectors, sigma, fro)
    gap = metrics.sigma2_truncation_gap(sigma, fro)
    return SpaceContinuity(
        space=space, dim=dim, vectors=rows, sigma2_wa=float(wa.mean()),
        sigma2_wa_upper=float((wa + gap).mean()), sigma2_wa_per_pair=wa.tolist(),
        sigma2_null_mean=float(wa_null.mean), sigma2_null_std=float(wa_null.std), sigma2_null_draws=wa_draws,
        subspace_overlap=float(metrics.subspace_overlap(vectors[:, :k]).mean()), subspace_baseline=k / dim,
    )


class PermutationBank:
    """Permutations shared by every null statistic of one shape ``(pairs, d)`` within a report.

    Each statistic still gets an exact permutation null; sharing only correlates the nulls of
    different statistics, and it spares generating the same-shaped permutations again.
    """

    def __init__(self, generator: torch.Generator) -> None:
        self.generator = generator
        self._banks: dict[tuple[int, int], torch.Tensor] = {}

    def get(self, draws: int, n_pairs: int, dim: int) -> torch.Tensor:
        """``(>= draws, n_pairs, dim)`` permutations, drawn on first use of the shape."""
        bank = self._banks.get((n_pairs, dim))
        if bank is None or bank.shape[0] < draws:
            bank = metrics.random_permutations(draws, n_pairs, dim, self.generator)
            self._banks[(n_pairs, dim)] = bank
        return bank


def _verdict(predicted: str | None, spaces: dict[str, SpaceContinuity]) -> tuple[str, str]:
    # Compare excess over each space's own permutation null, not raw |cos|: near-uniform vectors
    # (e.g. Gate's u1 in SmolLM2) have high raw |cos| that any coordinate order would give.
    v1, u1 = spaces["v"].vectors[0], spaces["u"].vectors[0]
    if predicted in SPACES:
        hit, other = (v1, u1) if predicted == "v" else (u1, v1)
        other_name = "u1" if predicted == "v" else "v1"
        criterion = (f"{predicted}1 beats its permutation null (z >= {Z_SIGNIFICANT:g}) and its excess over "
                     f"the null exceeds {other_name}'s")
        ok = hit.z >= Z_SIGNIFICANT and (hit.mean - hit.null_mean) > (other.mean - other.null_mean)
        return ("holds" if ok else "fails"), criterion
    criterion = (f"neither v1 nor u1 is continuous: each is within {Z_SIGNIFICANT:g} null std of its null "
                 f"or its excess over the null is below {QUIET_EXCESS:g}")
    quiet = all(x.z < Z_SIGNIFICANT or (x.mean - x.null_mean) < QUIET_EXCESS for x in (v1, u1))
    return ("holds" if quiet else "fails"), criterion


@contextmanager
def single_threaded_blas() -> Iterator[None]:
    """Limit numpy/scipy BLAS and torch to one thread inside the block, then restore both."""
    torch_threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with threadpool_limits(limits=1):
            yield
    finally:
        torch.set_num_threads(torch_threads)


def _numel(shape: tuple[int, int]) -> int:
    return shape[0] * shape[1]


def _role_order(role: str) -> int:
    order = list(ROLE_LABELS)
    return order.index(role) if role in order else len(order)
