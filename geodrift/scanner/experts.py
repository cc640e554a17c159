"""Mixture-of-experts continuity: each expert across depth, the experts of one layer, and the router.

A mixture-of-experts block replaces the MLP with a router ``(n_experts, d_model)`` and ``n_experts``
SwiGLU MLPs (Mixtral, Qwen2-MoE, Qwen3-MoE, OLMoE; Qwen2-MoE adds an always-on shared expert). The
scanner reads them as roles (``geodrift.weights``): ``router``, ``expert_gate.E`` / ``expert_up.E`` /
``expert_down.E`` per expert ``E``, and ``shared_gate`` / ``shared_up`` / ``shared_down``. Three
comparisons, all through the one measurement path (``geodrift.continuity.measure``: Eq. 1 with the
permutation null and the random floor ``sqrt(2/(pi d))``):

- **each expert across depth** (``expert_gate.3`` at layer l vs l+1): ordinary roles of the report.
  The theory's read/write rule gives the same prediction as for a dense MLP - Gate, Up continuous in
  their input space, Down in its output space - and the verdict is the dense one;
- **the router across depth** (``router``): it reads the stream and is followed by softmax/top-k,
  as Q and K are by softmax, so its input space is predicted continuous. Its output space is indexed
  by expert, an order the model is free to permute per layer;
- **the experts of one layer with each other** (``expert_gate@3``, in ``Report.across_experts``):
  experts ``e`` and ``e + 1`` of layer 3 in place of layers ``l`` and ``l + 1``. The expert index
  carries no order (permuting experts and the router's rows leaves the model unchanged), so these
  are ``n_experts - 1`` pairs of an arbitrary chain. The theory is about depth; it predicts nothing
  here, and the verdict says "no prediction".

The rule applied to the router and the experts is the paper's (section 5), but the paper measured
no mixture-of-experts model; docs/models.md says so beside the numbers.
"""

from __future__ import annotations

from geodrift.continuity.measure import MeasureSpec, assemble
from geodrift.continuity.report import RoleReport
from geodrift.linalg import SVDTriplets
from geodrift.weights import WeightKey, across_experts_role, split_expert_role


def measure_across_experts(spectra: dict[WeightKey, SVDTriplets], spec: MeasureSpec, origin: str,
                           view: str) -> tuple[list[RoleReport], list[str]]:
    """Continuity of the experts of each layer with each other, from the scan's singular triplets.

    The triplets already computed for the depth comparison are regrouped - ``(expert_gate.E, l)``
    becomes ``(expert_gate@l, E)`` - and measured by :func:`geodrift.continuity.measure.assemble`,
    so the statistic, its permutation null and its floors are the depth comparison's, with experts
    in place of layers. No matrix is decomposed twice.

    Args:
        spectra: ``{(role, layer): SVDTriplets}`` of a scan (``geodrift.continuity.decompose``).
        spec: the scan's measurement (k, null draws, seed).
        origin, view: as the scan's report.

    Returns:
        ``(roles, notes)``: one RoleReport per expert family and layer (``layers`` = the experts,
        verdict ``no prediction``), in family then layer order; the measurement's notes.

    Example:
        >>> import torch
        >>> from geodrift.linalg import batched_svd_triplets
        >>> g = torch.Generator().manual_seed(0)
        >>> stack = torch.randn(3, 6, 5, generator=g)  # expert 0, 1, 2 of layer 4
        >>> spectra = {(f"expert_gate.{e}", 4): t for e, t in enumerate(batched_svd_triplets(stack, 2))}
        >>> roles, _ = measure_across_experts(spectra, MeasureSpec(k=2, null_draws=10), "demo", "raw")
        >>> roles[0].label, roles[0].layers, roles[0].verdict
        ('Gate L4', [0, 1, 2], 'no prediction')
    """
    regrouped: dict[WeightKey, SVDTriplets] = {}
    for (role, layer), triplets in spectra.items():
        split = split_expert_role(role)
        if split is not None:
            regrouped[(across_experts_role(split[0], layer), split[1])] = triplets
    if not regrouped:
        return [], []
    report = assemble(regrouped, spec, origin, view)
    return report.roles, report.notes


def depth_spectra(spectra: dict[WeightKey, SVDTriplets]) -> dict[WeightKey, SVDTriplets]:
    """The triplets without the per-expert roles (the trajectory shape is computed for the others)."""
    return {key: t for key, t in spectra.items() if split_expert_role(key[0]) is None}
