"""Weights-only forgetting indicators of a checkpoint against its base, each beside its noise floor.

Every indicator reads the seven projections of each decoder layer (``W0`` base, ``W`` checkpoint,
``dW = W - W0``) through the scanner, as ``geodrift drift``/``compare`` do, and is reported in total and
per layer:

- ``rel_dw``: ``||dW||_F / ||W0||_F`` (pooled over the projections);
- ``rotation_v1``: the paper's rotation drift, the angle (degrees) of each matrix's first singular vector
  (v1 in input space, u1 in output space) from the base's, averaged over projections, spaces and layers;
- ``rotation_topk``: the mean principal angle (degrees) between the base's and the checkpoint's top-k
  subspaces (:func:`geodrift.continuity.series.subspace_comparison`) in the raw view;
- ``rotation_topk_gauge``: the same with the series' gauge fixed as ``geodrift drift``/``compare`` fix it by default
  (:data:`GAUGE_VIEW`, :mod:`geodrift.scanner.series_gauge`): the base read in the canonical view, every checkpoint
  canonicalised and aligned to it by orthogonal maps, its top-k vectors turned into the base's residual frame;
- ``intruders``: Shuttleworth et al.'s intruder dimensions (arXiv 2410.21228): among each matrix's top
  :data:`INTRUDER_K` left singular vectors, those whose largest ``|cos|`` with every left singular vector of
  the base is below :data:`INTRUDER_EPS`; counted over matrices;
- ``frame_share`` (directional, geodrift's): the share of ``||dW||^2`` inside the base's top-k frame in the
  projection's predicted continuous space (Q, K, Gate, Up: input space, ``dW V_k^T``; O, Down: output space,
  ``U_k^T dW``; V has none and is left out), against ``k / d`` for a direction drawn at random;
- ``frame_energy`` (directional, with magnitude): ``||dW in that frame||_F / ||W0||_F``.

Noise floors: the subspace rows' permutation null (two unrelated subspaces: ``null`` of the rotations), the
random-direction share ``k/d`` of ``frame_share``, and - for every indicator - its value for a *random
update of the same size*: ``W0 + E`` with ``E`` Gaussian and ``||E||_F = ||dW||_F`` matrix by matrix
(``noise``). An indicator only says something about *where* the update went where it differs from ``noise``.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from typing import Any

import torch

from geodrift.continuity import MeasureSpec, decompose
from geodrift.continuity.series import Spectra, SubspaceRow, subspace_comparison
from geodrift.scanner.open import open_model
from geodrift.scanner.readers import weightset
from geodrift.scanner.series import decompose_checkpoint
from geodrift.scanner.series_gauge import reference_weightset
from geodrift.weights import PREDICTED_SPACE, TRANSFORMER_ROLES, WeightKey, WeightSet

# The view that fixes a series' gauge: drift's and compare's default (issue 38), the canonical view aligned to the base.
GAUGE_VIEW = "canonical"
TOP_K = 8
INTRUDER_K = 10
INTRUDER_EPS = 0.5
INDICATORS = ("rel_dw", "rotation_v1", "rotation_topk", "rotation_topk_gauge", "intruders", "frame_share",
              "frame_energy")


class BaseGeometry:
    """The base model's weights and decompositions, read once; :meth:`measure` scores each checkpoint against it.

    Args:
        base: the base checkpoint (path; None: the embedded SmolLM2-135M).
        null_draws, seed: the permutation nulls of the subspace comparisons.
    """

    def __init__(self, base: str | None, null_draws: int = 20, seed: int = 0) -> None:
        self.spec = MeasureSpec(k=INTRUDER_K, null_draws=null_draws, seed=seed)
        self.seed = seed
        raw = _weights(base, "raw")
        self.w0 = {key: raw[key].float() for key in raw}
        self.norm0 = math.sqrt(sum(float(w.pow(2).sum()) for w in self.w0.values()))
        self.spectra = {"raw": decompose(raw, self.spec)}
        # the reference of the series' gauge fixing: the base's canonical layers kept, its top-k triplets beside them
        canonical, self.reference = reference_weightset(open_model(base))
        self.spectra[GAUGE_VIEW] = decompose(canonical.select(list(raw.roles())), self.spec)
        self.reference.spectra = self.spectra[GAUGE_VIEW]
        # The base's complete left singular bases (intruders compare against every one of them).
        self.left = {key: torch.linalg.svd(w, full_matrices=False)[0] for key, w in self.w0.items()}

    def measure(self, checkpoint: Any) -> dict[str, Any]:
        """Every indicator of ``checkpoint`` (a path, module or state dict), total and per layer, with floors."""
        raw = _weights(checkpoint, "raw")
        w = _Lazy(raw)  # each matrix read when used, not all held at once (the grid runs two of these side by side)
        # as `geodrift drift` reads a checkpoint of a series: canonical, aligned to the base, turned into its frame
        _, gauge, _ = decompose_checkpoint(checkpoint, self.spec, view=GAUGE_VIEW, roles=list(raw.roles()), ov=False,
                                           reference=self.reference)
        generator = torch.Generator().manual_seed(self.seed)
        noisy = {}
        for key, w0 in self.w0.items():
            e = torch.randn(w0.shape, generator=generator)
            noisy[key] = w0 + e * (float((w[key] - w0).norm()) / max(float(e.norm()), 1e-30))
        measured = self._score(w, decompose(raw, self.spec), gauge)
        floor = self._score(noisy, decompose(WeightSet.from_tensors(noisy, "noise"), self.spec), None)
        return {"value": measured["total"], "per_layer": measured["per_layer"], "noise": floor["total"],
                "null": measured["null"]}

    def _score(self, w: Mapping[WeightKey, torch.Tensor], raw: Spectra, gauge: Spectra | None) -> dict[str, Any]:
        layers = sorted({layer for _, layer in self.w0})
        acc: dict[str, dict[int, list[float]]] = {name: {layer: [] for layer in layers} for name in INDICATORS}
        rows = subspace_comparison(self.spectra["raw"], raw, TOP_K, self.spec.null_draws, self.seed)
        null_angles = [_mean_angle_of_overlap(r.overlap_null_mean) for r in rows]
        for row in rows:
            acc["rotation_topk"][row.layer].append(_mean(row.principal_angles_deg))
            acc["rotation_v1"][row.layer].append(math.degrees(math.acos(min(1.0, row.top1_abs_cos))))
        if gauge is not None:
            for row in subspace_comparison(self.spectra[GAUGE_VIEW], gauge, TOP_K, self.spec.null_draws, self.seed,
                                           GAUGE_VIEW):
                acc["rotation_topk_gauge"][row.layer].append(_mean(row.principal_angles_deg))
        energy = {layer: [0.0, 0.0, 0.0, 0.0] for layer in layers}  # ||dW||^2, ||W0||^2, in-frame, in-frame share floor
        for key, w0 in self.w0.items():
            d = (w[key] - w0).double()
            e = energy[key[1]]
            e[0] += float(d.pow(2).sum())
            e[1] += float(w0.double().pow(2).sum())
            space = PREDICTED_SPACE.get(key[0])
            base = self.spectra["raw"][key]
            if space == "v":
                e[2] += float((d @ base.Vh[:TOP_K].double().T).pow(2).sum())
            elif space == "u":
                e[2] += float((base.U[:, :TOP_K].double().T @ d).pow(2).sum())
            top = raw[key].U[:, :INTRUDER_K].double()
            best = (self.left[key].double().T @ top).abs().amax(0)  # (INTRUDER_K,): best match among the base's
            acc["intruders"][key[1]].append(float((best < INTRUDER_EPS).sum()))
        for layer, (dw2, w2, frame2, _) in energy.items():
            acc["rel_dw"][layer].append(math.sqrt(dw2 / w2))
            acc["frame_energy"][layer].append(math.sqrt(frame2 / w2))
            acc["frame_share"][layer].append(frame2 / dw2 if dw2 > 0 else 0.0)
        per_layer = {name: {str(layer): (sum(v) if name == "intruders" else _mean(v)) for layer, v in by_layer.items()
                            if v} for name, by_layer in acc.items()}
        total_dw2 = sum(e[0] for e in energy.values())
        total_w2 = sum(e[1] for e in energy.values())
        total_frame = sum(e[2] for e in energy.values())
        total = {
            "rel_dw": math.sqrt(total_dw2 / total_w2),
            "rotation_v1": _mean([a for v in acc["rotation_v1"].values() for a in v]),
            "rotation_topk": _mean([a for v in acc["rotation_topk"].values() for a in v]),
            "rotation_topk_gauge": _mean([a for v in acc["rotation_topk_gauge"].values() for a in v]),
            "intruders": sum(sum(v) for v in acc["intruders"].values()),
            "frame_share": total_frame / total_dw2 if total_dw2 > 0 else 0.0,
            "frame_energy": math.sqrt(total_frame / total_w2),
        }
        null = {"rotation_topk_unrelated_deg": _mean(null_angles),
                "rotation_v1_unrelated_deg": _mean([math.degrees(math.acos(min(1.0, r.top1_null_mean))) for r in rows]),
                "frame_share_random": _frame_floor(rows)}
        return {"total": total, "per_layer": per_layer, "null": null}


class _Lazy(Mapping[WeightKey, torch.Tensor]):
    """A WeightSet's matrices as float32, read from the checkpoint on each access."""

    def __init__(self, ws: WeightSet) -> None:
        self.ws = ws

    def __getitem__(self, key: WeightKey) -> torch.Tensor:
        return self.ws[key].float()

    def __iter__(self) -> Iterator[WeightKey]:
        return iter(self.ws)

    def __len__(self) -> int:
        return len(self.ws)


def _weights(model: Any, view: str) -> WeightSet:
    ws = weightset(open_model(model), view)
    roles: list[str] = [r for r in TRANSFORMER_ROLES if r in ws.roles()]
    return ws.select(roles)


def _frame_floor(rows: list[SubspaceRow]) -> float:
    # k/d of the predicted space, averaged over the projections that have one (weighted equally).
    floors = [r.k / r.dim for r in rows if PREDICTED_SPACE.get(r.role) == r.space]
    return _mean(floors)


def _mean_angle_of_overlap(overlap: float) -> float:
    # The angle whose cos^2 is the mean overlap: what "unrelated subspaces" look like, in degrees.
    return math.degrees(math.acos(math.sqrt(min(1.0, max(0.0, overlap)))))


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else float("nan")
