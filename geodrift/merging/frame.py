"""Whether two models sit in one gauge, what alignment recovers, and whether one descends from the other.

For each input after the reference (``--base``, else the first model), :func:`check_pair` runs
:func:`geodrift.gauge.align.align_folded` twice - with general and with orthogonal per-head maps - and keeps
the fit that leaves the smaller weight distance (general maps recover every exact reparametrisation, e.g. a
V/O map of condition number 100; between two unrelated models they distort, and the orthogonal fit wins:
benchmarks/RESULTS_barriers.md). Then:

- **one gauge**: the two sit in one gauge when the maps alignment recovered are the identity: every layer keeps
  its hidden units, heads and signs, and the residual rotation, the per-head V/O and Q/K maps and the Up/Down
  scales lie within a tenth of the identity (:mod:`geodrift.merging.identity`, which states the thresholds'
  grounds). The weight distance that alignment removes does not decide it: between two short fine-tunes of one
  base the near-identity maps absorb about a quarter of their distance (ratio aligned / naive 0.73 on SmolLM2-135M,
  benchmarks/RESULTS_merge.md), while the maps stay within 2e-3 of the identity. Under ``--align auto``
  a pair in one gauge is not aligned: two fine-tunes of one base get the plain merge, to the bit.
- **lineage**: ``B`` descends from ``A`` (or both from one base) when, after alignment, their MLP hidden
  units match with a mean cosine (Gate rows, Up rows, Down columns) of at least ``LINEAGE_COSINE``. A
  fine-tune keeps every unit near its base's (cosine above 0.99 in docs/merge.md's measurements); two
  models trained from different seeds match at about 0.25-0.27 (the tests' Llama, the simulator's ``tiny`` one). Which of two
  related models is the ancestor cannot be told from two sets of weights: "descends" here means "shares
  its lineage".

Example:
    >>> from geodrift.gauge.orbit import GaugeShape, random_gauge, toy_state_dict
    >>> shape = GaugeShape(n_layers=2, n_heads=4, n_kv_heads=2, head_dim=4)
    >>> sd = toy_state_dict(shape, d_model=16, d_ff=24, vocab=40, generator=torch.Generator().manual_seed(0))
    >>> moved = random_gauge(sd, shape, torch.Generator().manual_seed(1), condition=10.0, sigma=0.5)
    >>> ref = fold_reference(sd, shape)
    >>> _, check = check_pair(ref, moved, shape, "B", "A")
    >>> check.one_gauge, check.related, check.head_maps
    (False, True, 'general')
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from geodrift.gauge.align import align_folded, fold_float64
from geodrift.gauge.orbit import GaugeShape, StateDict
from geodrift.merging.identity import KEEP_SHARE, MAP_TOLERANCE, map_deviation, one_gauge

LINEAGE_COSINE = 0.9
HEAD_MAP_FITS = ("general", "orthogonal")


@dataclass
class PairCheck:
    """What the pre-merge check found for one input against the reference.

    Attributes:
        label, reference: the two models' names.
        naive_distance: ``||B - A|| / ||A||`` over the embedding, head and projections, gains folded.
        aligned_distance: the same after alignment (the better of the two head-map fits).
        head_maps: the per-head fit kept (``general`` or ``orthogonal``).
        one_gauge: the recovered maps are the identity (:func:`geodrift.merging.identity.one_gauge`).
        maps: how far each recovered map is from the identity (:class:`~geodrift.merging.identity.MapDeviation`
            as a dict).
        matched_cosine: mean over layers of the matched hidden units' cosine after alignment.
        mutual_best: mean share of hidden units matched as each other's best.
        identity_share: mean share of hidden units matched to the unit of the same index.
        heads_kept: mean share of layers' heads matched to themselves.
        rotation_residual: the residual rotation's fit residual.
        related: ``matched_cosine >= LINEAGE_COSINE``.
        applied: whether the merge used the aligned copy (set by the merge).
        alignment: the full :class:`~geodrift.gauge.align.AlignmentReport` as a dict.
    """

    label: str
    reference: str
    naive_distance: float
    aligned_distance: float
    head_maps: str
    one_gauge: bool
    matched_cosine: float
    mutual_best: float
    identity_share: float
    heads_kept: float
    rotation_residual: float
    related: bool
    applied: bool
    alignment: dict[str, Any]
    maps: dict[str, Any] = field(default_factory=dict)

    @property
    def ratio(self) -> float:
        """``aligned / naive`` distance (1.0 for two identical models)."""
        return self.aligned_distance / self.naive_distance if self.naive_distance > 0 else 1.0

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        return {**asdict(self), "ratio": self.ratio}


def fold_reference(sd: StateDict, shape: GaugeShape) -> StateDict:
    """The reference model, float64, gains folded (``sd`` itself is left as it is)."""
    return fold_float64(dict(sd), shape)


def check_pair(reference: StateDict, other: StateDict, shape: GaugeShape, label: str, reference_label: str
               ) -> tuple[StateDict, PairCheck]:
    """Align ``other`` to the folded ``reference`` and judge the pair (the module docstring's criteria).

    Args:
        reference: from :func:`fold_reference` (only read).
        other: the input's state dict as read (float32, gains not folded; left as it is).
        shape: their gauge shape.
        label, reference_label: names for the report.

    Returns:
        ``(aligned, check)``: ``other`` folded and brought into the reference's gauge (float32: the fits run in
        float64), and the check.
    """
    best: tuple[StateDict, Any, str] | None = None
    for head_maps in HEAD_MAP_FITS:
        aligned, report = align_folded(reference, fold_float64(dict(other), shape), shape, head_maps=head_maps)
        if best is None or report.aligned_weight_error < best[1].aligned_weight_error:
            best = None  # the earlier fit's tensors go before the next fit starts
            best = ({k: aligned.pop(k).to(torch.float32) for k in list(aligned)}, report, head_maps)
        del aligned
    assert best is not None
    aligned, report, head_maps = best
    layers = report.layers

    def mean(values: list[float]) -> float:
        return float(sum(values) / len(values)) if values else float("nan")

    cosine = mean([x.matched_cosine for x in layers])
    naive, after = report.naive_weight_error, report.aligned_weight_error
    deviation = map_deviation(other, aligned, report, shape)
    check = PairCheck(label=label, reference=reference_label, naive_distance=naive, aligned_distance=after,
                      head_maps=head_maps, one_gauge=one_gauge(deviation),
                      matched_cosine=cosine, mutual_best=mean([x.mutual_best_share for x in layers]),
                      identity_share=mean([x.identity_share for x in layers]),
                      heads_kept=mean([x.heads_kept for x in layers]), rotation_residual=report.rotation_residual,
                      related=bool(cosine >= LINEAGE_COSINE), applied=False, alignment=report.to_dict(),
                      maps=deviation.to_dict())
    return aligned, check


def describe(check: PairCheck) -> str:
    """One line: the gauge verdict and what alignment recovered.

    Example:
        >>> c = PairCheck("B", "A", 2.9, 1e-6, "general", False, 1.0, 1.0, 0.0, 0.0, 1e-7, True, True, {})
        >>> describe(c)[:62]
        'B vs A: not in one gauge - alignment (general head maps) takes'
    """
    verdict = "in one gauge" if check.one_gauge else "not in one gauge"
    lineage = f"shares {check.reference}'s lineage" if check.related else f"no common lineage with {check.reference}"
    maps = check.maps
    found = (f"recovered maps: hidden units kept {100 * maps['units_kept']:.1f}%, heads kept "
             f"{100 * maps['heads_kept']:.0f}%, sign flips {100 * maps['sign_flips']:.1f}%, from the identity: "
             f"residual rotation {maps['rotation']:.3g}, V/O {maps['vo']:.3g}, Q/K {maps['qk']:.3g}, Up/Down "
             f"{maps['updown']:.3g} (one gauge when >= {KEEP_SHARE:g} kept and <= {MAP_TOLERANCE:g} from the identity); "
             ) if maps else ""
    return (f"{check.label} vs {check.reference}: {verdict} - {found}alignment ({check.head_maps} head maps) takes the "
            f"relative weight distance {check.naive_distance:.3g} -> {check.aligned_distance:.3g} (ratio "
            f"{check.ratio:.3g}); matched cosine {check.matched_cosine:.4f} ({lineage}; related when >= "
            f"{LINEAGE_COSINE})" + ("; alignment applied" if check.applied else "; alignment not applied"))


def to_float64(sd: StateDict) -> StateDict:
    """``sd`` in float64 (a new dict)."""
    return {k: v.detach().to(torch.float64) for k, v in sd.items()}
