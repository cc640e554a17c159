"""The scan job: open a checkpoint, stream its projections, and build the continuity report."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch

from geodrift.continuity import MeasureSpec, PermutationBank, Report, assemble, decompose
from geodrift.continuity.measure import Derive
from geodrift.continuity.trajectory import trajectory_shapes
from geodrift.continuity.verdicts import path_verdicts
from geodrift.errors import GeodriftError
from geodrift.linalg import MatrixProduct, SVDTriplets
from geodrift.scanner.checkpoint import Checkpoint
from geodrift.scanner.distributed import RaySource, layer_ranges, on_ray, svd_workers
from geodrift.scanner.experts import depth_spectra, measure_across_experts
from geodrift.scanner.mapping import NameRule
from geodrift.scanner.preflight import check_layers
from geodrift.scanner.readers import VIEWS, open_checkpoint, weightset
from geodrift.weights import (
    EXPERTS_GROUP,
    ROLE_NAMES,
    TRANSFORMER_ROLES,
    WeightKey,
    WeightSet,
    canonical_role,
)

# --layers is expanded only below this bound (a model's depth is checked after it is opened).
MAX_LAYERS = 100_000


def parse_roles(text: str | None) -> list[str] | None:
    """``"q,k,gate"``, ``"attn_q,mlp_up"`` or ``"router,expert_gate,experts"`` -> canonical roles (None = all).

    The names are ``geodrift.weights.ROLE_NAMES`` (the same vocabulary as ``--names``): an expert
    family (``expert_gate``) stands for every expert's, ``expert_gate.3`` for one, ``experts`` for all.

    Raises:
        GeodriftError: on an unknown name.
    """
    if not text:
        return None
    roles = []
    for item in text.split(","):
        role = EXPERTS_GROUP if item.strip().lower() == EXPERTS_GROUP else canonical_role(item)
        if role is None:
            raise GeodriftError(
                f"--roles: unknown projection {item!r}; use any of {', '.join(ROLE_NAMES)}, {EXPERTS_GROUP} "
                f"or expert_gate.N (or {', '.join(TRANSFORMER_ROLES)})"
            )
        roles.append(role)
    return roles


def parse_layers(text: str | None) -> list[int] | None:
    """``"0-9,20,25-29"`` -> ``[0, ..., 9, 20, 25, ..., 29]`` (None = all).

    The ranges are checked and merged before any is expanded, so the list holds each layer once and
    never more than :data:`MAX_LAYERS` numbers, however many ranges the text repeats.

    Raises:
        GeodriftError: on a malformed range, or one past :data:`MAX_LAYERS`.

    Example:
        >>> parse_layers("3-5,0,4-6")
        [0, 3, 4, 5, 6]
    """
    if not text:
        return None
    ranges: list[tuple[int, int]] = []
    for part in text.split(","):
        lo_text, dash, hi_text = part.strip().partition("-")
        try:
            lo, hi = int(lo_text), int(hi_text) if dash else int(lo_text)
        except ValueError:
            raise GeodriftError(f"--layers: cannot read {text[:80]!r}; write ranges like 0-9,20,25-29") from None
        if lo < 0 or hi < lo:
            raise GeodriftError(f"--layers: {part.strip()!r} is not a range of layers (first <= last, both >= 0)")
        if hi >= MAX_LAYERS:
            raise GeodriftError(
                f"--layers: {part.strip()!r} goes past layer {MAX_LAYERS - 1}, more than any model has; "
                "select layers the model has (geodrift inspect MODEL lists them)"
            )
        ranges.append((lo, hi))
    merged: list[tuple[int, int]] = []
    for lo, hi in sorted(set(ranges)):
        if merged and lo <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], hi))
        else:
            merged.append((lo, hi))
    return [layer for lo, hi in merged for layer in range(lo, hi + 1)]


def ov_composite_hook(n_heads: int, n_kv_heads: int) -> Derive:
    """A :func:`geodrift.continuity.measure` ``derive`` hook that yields ``W_O W_V`` once a layer's V and O are seen.

    With grouped-query attention, V's rows are expanded to one block per query head (key-value head
    ``j`` serves query heads ``j*g .. j*g+g-1``, ``g = n_heads / n_kv_heads``, as in transformers'
    ``repeat_kv``), so the composite is ``W_O (d, n_heads*hd) @ V_expanded (n_heads*hd, d)``. The
    expansion is folded into ``W_O`` instead: summing each group's ``g`` head blocks of ``W_O``'s
    columns gives ``B (d, n_kv*hd)`` with ``W_O V_expanded = B W_V`` exactly. The product is returned
    as its factors (:class:`geodrift.linalg.MatrixProduct`); the scan's top-k SVD never forms it.

    Args:
        n_heads: query heads.
        n_kv_heads: key-value heads.

    Returns:
        The hook; it keeps at most one V matrix resident.
    """
    pending: dict[int, torch.Tensor] = {}
    group = n_heads // n_kv_heads

    def hook(key: tuple[str, int], W: torch.Tensor) -> dict[tuple[str, int], torch.Tensor | MatrixProduct]:
        role, layer = key
        if role == "attn_v":
            pending.clear()
            pending[layer] = W
            return {}
        if role != "attn_o" or layer not in pending:
            return {}
        V = pending.pop(layer)
        head_dim = V.shape[0] // n_kv_heads
        summed = W.reshape(W.shape[0], n_kv_heads, group, head_dim).sum(2)  # (d, n_kv, hd)
        return {("attn_ov", layer): MatrixProduct(summed.reshape(W.shape[0], n_kv_heads * head_dim), V)}

    return hook


def load_weights(
    model: str | Path | None, view: str | None = None, names: str | Path | list[NameRule] | None = None,
    roles: list[str] | None = None, layers: list[int] | None = None,
) -> tuple[WeightSet, tuple[int, int] | None]:
    """The projections of ``model`` (None = the embedded SmolLM2-135M) as a lazy WeightSet.

    ``view`` None is the scan's default: ``canonical`` where geodrift has derived the model's gauge group,
    else ``raw`` with a note (:func:`geodrift.scanner.canonical_view.resolve_view`); ``"raw"`` is the paper's metric.

    Returns:
        ``(weights, heads)``: heads is ``(n_heads, n_kv_heads)`` when the checkpoint states them.

    Raises:
        GeodriftError: on any unreadable input or an unknown role/layer selection.
    """
    if view is not None and view not in VIEWS:
        raise GeodriftError(f"--view: {view!r} is not a view; use raw, folded or canonical")
    ckpt = open_checkpoint(model, names=names)
    ws = weightset(ckpt, view=view)
    check_layers(layers, sorted({layer for _, layer in ws.entries}), ckpt.label)
    return ws.select(roles, layers), heads_of(ckpt)


def heads_of(ckpt: Checkpoint) -> tuple[int, int] | None:
    """``(n_heads, n_kv_heads)`` when the checkpoint's config states them (the OV composite needs them)."""
    n_heads, n_kv = ckpt.config.get("n_heads"), ckpt.config.get("n_kv_heads")
    return (int(n_heads), int(n_kv or n_heads)) if n_heads else None


def scan(
    ws: WeightSet,
    spec: MeasureSpec,
    *,
    progress: Callable[[str], None] | None = None,
    heads: tuple[int, int] | None = None,
    ray: RaySource | None = None,
) -> Report:
    """Per-projection geometric continuity of a checkpoint's projections.

    Args:
        ws: the projections, from :func:`load_weights` (streamed: one large matrix resident at a time).
        spec: k, null draws, seed, full spectrum (see :class:`geodrift.continuity.MeasureSpec`).
        progress: called after each matrix.
        heads: ``(n_heads, n_kv_heads)`` to add the OV composite ``W_O W_V`` (None = skip it).
        ray: decompose ``ws``' layers as Ray tasks of layer ranges that read the model from this source
            (:mod:`geodrift.scanner.distributed`); the report is assembled here, bitwise the local one.

    Returns:
        The continuity Report, with the trajectory shape (App. A.2: 3-PC explained variance and
        ``|cos|`` decay with layer distance, each beside its random and permutation floors) of v1
        and u1 of every projection with at least 3 layers (the per-expert ones aside) in
        ``report.trajectory``, both verdicts per projection (shared frame: ``verdict``; depth path:
        ``path_verdict``), and in a mixture of experts each layer's experts compared with one
        another in ``report.across_experts`` (``geodrift.scanner.experts``).

    Raises:
        GeodriftError: fewer than 2 layers, NaN/Inf in a tensor.

    Example:
        >>> ws, heads = load_weights(None)  # doctest: +SKIP
        >>> report = scan(ws, MeasureSpec(k=4), heads=heads)  # doctest: +SKIP
    """
    if all(len(ws.layers(role)) < 2 for role in ws.roles()):
        raise GeodriftError(
            f"{ws.origin}: every projection has fewer than 2 layers; continuity compares adjacent "
            "layers - scan a model (or a --layers selection) with at least 2 layers"
        )
    if ray is not None:
        spectra = _layers_on_ray(ws, spec, ray, heads, progress)
    else:
        derive = None
        if heads is not None and {"attn_v", "attn_o"} <= set(ws.roles()):
            derive = ov_composite_hook(*heads)
        spectra = decompose(ws, spec, progress, derive)
    bank = PermutationBank(torch.Generator().manual_seed(spec.seed))  # one bank: the trajectory reuses Eq. 1's
    report = assemble(spectra, spec, ws.origin, ws.view, bank=bank, architecture=ws.architecture)
    report.trajectory = trajectory_shapes(depth_spectra(spectra), spec.null_draws, spec.seed, bank)
    report.roles = path_verdicts(report.roles, report.trajectory)
    report.across_experts, notes = measure_across_experts(spectra, spec, ws.origin, ws.view)
    report.notes += [*ws.notes, *notes]
    return report


def layers_task(model: str | Path | None, spec: MeasureSpec, view: str, names: str | Path | list[NameRule] | None,
                roles: list[str] | None, layers: list[int], heads: tuple[int, int] | None,
                threads: int) -> dict[WeightKey, SVDTriplets]:
    """A Ray task of :func:`scan`: the triplets of ``layers`` of one model (with the OV composites when ``heads``)."""
    ws, _ = load_weights(model, view, names, roles, layers)
    derive = ov_composite_hook(*heads) if heads is not None and {"attn_v", "attn_o"} <= set(ws.roles()) else None
    with svd_workers(threads):
        return decompose(ws, spec, None, derive)


def _layers_on_ray(ws: WeightSet, spec: MeasureSpec, ray: RaySource, heads: tuple[int, int] | None,
                   progress: Callable[[str], None] | None) -> dict[WeightKey, SVDTriplets]:
    # ws's layers in contiguous ranges, one Ray task each; the merged triplets (the report is assembled here).
    ranges = layer_ranges(sorted({layer for _, layer in ws.entries}), ray.chunks or 2)

    def done(_: int, part: dict[WeightKey, SVDTriplets]) -> None:
        for key in sorted(part, key=lambda key: key[1]):
            if progress is not None and key in ws.entries:
                progress(f"{key[0]}[{key[1]}]")

    merged: dict[WeightKey, SVDTriplets] = {}
    args = [(ray.model, spec, ws.view, ray.names, ray.roles, chunk, heads) for chunk in ranges]
    for part in on_ray(layers_task, args, ray.address, done):
        merged.update(part)
    return merged
