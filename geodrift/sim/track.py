"""Continuity tracking during training of the toy MLP ensemble, as a tidy long-format time series.

Rows are ``(step, epoch, source, metric, space, k, layer, value)`` (``record.SERIES_COLUMNS``), one
list per ensemble member. ``layer=None`` marks a mean over layers (or over adjacent pairs).

Sources and metrics (``step`` = updates applied so far; ``step 0`` = the first backward pass):

- ``W`` (block weights ``W_l``) and ``G`` (this step's mini-batch gradient ``dL/dW_l``), both from
  one exact batched SVD (``geodrift.linalg.batched_svd``) of all ``2 * E * L`` matrices:
  ``cont`` (Eq. 1, space ``v``/``u``, ``k`` = 1, 2), ``s2wa`` (Eq. 2 over all singular vectors),
  ``null_mean``/``null_std``/``null_excess`` (permutation null of Eq. 1, ``k`` = 1, 2; excess =
  cont - null mean), ``erank`` (Eq. 3, per layer and mean).
- ``Gcum``: the cumulative raw gradient ``sum_t G_t`` over all steps so far (summed every step,
  including step ``t`` at track time ``t``; the post-training gradient is not added): ``cont``
  (``v``/``u``, ``k=1``), ``null_excess`` (``v``, ``k=1``) and ``delta_gw`` = cont(v1(Gcum)) -
  cont(v1(W)).
- ``W``: ``rel_change`` = ``||W_l - W_l(0)||_F / ||W_l(0)||_F`` (per layer and mean) and
  ``rotation_deg`` = ``degrees(arccos |cos(v1_l(t), v1_l(t_ref))|)`` per layer and mean, where
  ``t_ref`` is the reference step (one epoch by default; Fig. 2a's "epoch-1 reference"). The
  ``|cos|`` makes the angle sign-invariant (0-90 degrees), matching the paper's ~85-90 degree
  plateau for fully drifted layers.
- ``align_w_v1`` for sources ``G`` (raw gradient), ``Gcum`` and ``EMA<beta>``: the mean over layers
  of ``|cos(v1(W_l), v1(X_l))|`` where ``X_l`` is that gradient statistic (paper section 4.4; the
  exact formula is not stated there, this is the natural reading). ``EMA_l <- beta EMA_l +
  (1 - beta) G_l`` every step from zero (the zero start only rescales, v1 is unaffected).
- ``train``: ``loss``/``acc`` averaged over the mini-batches since the previous track;
  ``test``: ``loss``/``acc`` on the whole test set.

Only v1 is needed for ``Gcum`` and the EMAs: it comes from power iteration on the Gram matrix,
warm-started at the previous track's vector, with a residual check and an exact ``eigh`` fallback.
"""

from __future__ import annotations

import math
import time
from typing import Any

import torch
import torch.nn.functional as F

from geodrift.linalg import batched_svd
from geodrift.metrics import adjacent_abs_cos, effective_rank, permutation_null, sigma2_weighted_alignment
from geodrift.sim.config import TrackConfig
from geodrift.sim.data import Dataset
from geodrift.sim.mlp import ResidualMLP

# Relative eigen-residual accepted for the float32 power iteration: the angle error of v1 is about
# residual / relative gap (gaps of trained Gcum/EMA matrices are ~0.3-0.5), far below 1e-3.
_POWER_TOL = 1e-5
_POWER_ITERS = 100


class MLPTracker:
    """Implements ``geodrift.sim.train.Tracker`` for a ``ResidualMLP`` ensemble.

    Args:
        model: the ensemble (weights ``model.blocks (E, L, D, D)``).
        data: for the test-set evaluation.
        cfg: interval, null draws, EMA betas, reference step.
        epoch_steps: steps per "epoch" for the time axis (and the default reference step).
        seeds: member seeds (the permutation null of member ``e`` uses ``seeds[e]``).

    Example:
        >>> # tracker = MLPTracker(model, data, TrackConfig(every=100), 469, [42])  # doctest: +SKIP
    """

    def __init__(self, model: ResidualMLP, data: Dataset, cfg: TrackConfig, epoch_steps: int,
                 seeds: list[int]) -> None:
        self.model, self.data, self.cfg = model, data, cfg
        self.epoch_steps = max(1, epoch_steps)
        self.reference_step = cfg.reference_step if cfg.reference_step is not None else self.epoch_steps
        blocks = model.blocks.detach()
        self.w0 = blocks.clone()
        self.gcum = torch.zeros_like(blocks)
        self.betas = tuple(cfg.ema_betas)
        self.ema = blocks.new_zeros((len(self.betas), *blocks.shape))
        self._ema_weight = torch.tensor([1.0 - b for b in self.betas], dtype=blocks.dtype,
                                        device=blocks.device).view(-1, 1, 1, 1, 1)
        self.ref_v1: torch.Tensor | None = None
        self.warm: torch.Tensor | None = None  # (1 + n_betas, E, L, D) previous v1 of Gcum and EMAs
        E = blocks.shape[0]
        # running sums stay on the model's device (no per-step host sync on CUDA)
        self.run_loss = torch.zeros(E, dtype=torch.float64, device=blocks.device)
        self.run_acc = torch.zeros(E, dtype=torch.float64, device=blocks.device)
        self.run_count = 0
        self.gens = [torch.Generator().manual_seed(int(s) + 7919) for s in seeds]
        self.rows: list[list[list[Any]]] = [[] for _ in range(E)]
        # per member: W's v1 per layer at step 0 and at the latest track (for the PCA plot)
        self.vectors: list[dict[str, list[list[float]]]] = [{} for _ in range(E)]
        self.seconds = 0.0

    # ---- Tracker protocol -------------------------------------------------------------------
    def after_backward(self, step: int, stats: dict[str, torch.Tensor]) -> None:
        start = time.perf_counter()
        grad = self.model.blocks.grad
        assert grad is not None
        self.gcum.add_(grad)
        if self.betas:
            self.ema.lerp_(grad.unsqueeze(0).expand_as(self.ema), self._ema_weight)
        self.run_loss += stats["loss"].double()
        self.run_acc += stats["acc"].double()
        self.run_count += 1
        self.seconds += time.perf_counter() - start

    def wants(self, step: int, final: bool) -> bool:
        if self.cfg.every <= 0:
            return False
        return final or step % self.cfg.every == 0 or step == self.reference_step

    def track(self, step: int) -> None:
        start = time.perf_counter()
        W = self.model.blocks.detach()
        G = self.model.blocks.grad
        assert G is not None
        E, L, D, _ = W.shape
        U, S, Vh = batched_svd(torch.cat([W, G]).reshape(2 * E * L, D, D))
        U = U.reshape(2, E, L, D, -1).mT.cpu()  # (2, E, L, r, D): rows are u_k
        S = S.reshape(2, E, L, -1).cpu()
        Vh = Vh.reshape(2, E, L, -1, D).cpu()
        others = torch.cat([self.gcum.unsqueeze(0), self.ema]) if self.betas else self.gcum.unsqueeze(0)
        # warm start: the previous track's vectors; at the first track Gcum and the EMAs are all
        # multiples of this step's gradient, whose v1 the SVD just gave
        warm = self.warm if self.warm is not None else Vh[1, :, :, 0].unsqueeze(0).expand(others.shape[0], -1, -1, -1)
        v1_other = _top_right_vectors(others.reshape(-1, D, D), warm.reshape(-1, D)).reshape(-1, E, L, D)
        self.warm = v1_other
        u1_gcum = torch.einsum("eldk,elk->eld", self.gcum.double().cpu(), v1_other[0])
        if step == self.reference_step and self.ref_v1 is None:
            self.ref_v1 = Vh[0, :, :, 0].clone()
        test_loss, test_acc = self._evaluate()
        run_loss, run_acc = self.run_loss.cpu(), self.run_acc.cpu()
        epoch = step / self.epoch_steps
        for e in range(E):
            rows: list[list[Any]] = []

            def add(source: str, metric: str, value: float | torch.Tensor, space: str | None = None,
                    k: int | None = None, layer: int | None = None, _rows: list[list[Any]] = rows) -> None:
                _rows.append([step, epoch, source, metric, space, k, layer, float(value)])

            cont_w_v1 = 0.0
            for i, source in enumerate(("W", "G")):
                for space, vectors in (("v", Vh[i, e]), ("u", U[i, e])):
                    cont = adjacent_abs_cos(vectors[:, :2]).mean(0)  # (2,)
                    null = permutation_null(vectors[:, :2], self.cfg.null_draws, self.gens[e])
                    for k in (1, 2):
                        add(source, "cont", cont[k - 1], space, k)
                        add(source, "null_excess", cont[k - 1] - null.mean[k - 1], space, k)
                    add(source, "null_mean", null.mean[0], space, 1)
                    add(source, "null_std", null.std[0], space, 1)
                    add(source, "s2wa", sigma2_weighted_alignment(vectors, S[i, e]).mean(), space)
                    if source == "W" and space == "v":
                        cont_w_v1 = float(cont[0])
                erank = effective_rank(S[i, e])
                for layer in range(L):
                    add(source, "erank", erank[layer], layer=layer)
                add(source, "erank", erank.mean())
            w_v1 = Vh[0, e, :, 0]  # (L, D)
            self.vectors[e]["W v1 final"] = w_v1.tolist()
            if step == 0:
                self.vectors[e]["W v1 init"] = w_v1.tolist()
            add("G", "align_w_v1", _abs_cos(w_v1, Vh[1, e, :, 0]).mean(), "v", 1)
            g_v1 = v1_other[0, e]
            cont_g = adjacent_abs_cos(g_v1).mean()
            null_g = permutation_null(g_v1.unsqueeze(1), self.cfg.null_draws, self.gens[e])
            add("Gcum", "cont", cont_g, "v", 1)
            add("Gcum", "null_excess", cont_g - null_g.mean[0], "v", 1)
            add("Gcum", "cont", adjacent_abs_cos(u1_gcum[e]).mean(), "u", 1)
            add("Gcum", "delta_gw", float(cont_g) - cont_w_v1)
            add("Gcum", "align_w_v1", _abs_cos(w_v1, g_v1).mean(), "v", 1)
            for b, beta in enumerate(self.betas):
                add(f"EMA{beta:g}", "align_w_v1", _abs_cos(w_v1, v1_other[1 + b, e]).mean(), "v", 1)
            rel = ((W[e] - self.w0[e]).flatten(1).norm(dim=1) / self.w0[e].flatten(1).norm(dim=1)).cpu()
            for layer in range(L):
                add("W", "rel_change", rel[layer], layer=layer)
            add("W", "rel_change", rel.mean())
            if self.ref_v1 is not None:
                angle = torch.rad2deg(torch.arccos(_abs_cos(w_v1, self.ref_v1[e]).clamp(0.0, 1.0)))
                for layer in range(L):
                    add("W", "rotation_deg", angle[layer], layer=layer)
                add("W", "rotation_deg", angle.mean())
            if self.run_count:
                add("train", "loss", run_loss[e] / self.run_count)
                add("train", "acc", run_acc[e] / self.run_count)
            add("test", "loss", test_loss[e])
            add("test", "acc", test_acc[e])
            self.rows[e].extend(rows)
        self.run_loss.zero_()
        self.run_acc.zero_()
        self.run_count = 0
        self.seconds += time.perf_counter() - start

    @torch.no_grad()
    def _evaluate(self) -> tuple[torch.Tensor, torch.Tensor]:
        was_training = self.model.training
        self.model.eval()
        E = self.model.members
        x = self.data.x_test.unsqueeze(0).expand(E, -1, -1)
        logits = self.model(x)  # (E, N, C)
        y = self.data.y_test.unsqueeze(0).expand(E, -1)
        loss = F.cross_entropy(logits.flatten(0, 1), y.flatten(), reduction="none").view(E, -1).mean(1)
        acc = (logits.argmax(-1) == y).float().mean(1)
        self.model.train(was_training)
        return loss.cpu(), acc.cpu()

    # ---- resumable state ----------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {"w0": self.w0, "gcum": self.gcum, "ema": self.ema, "ref_v1": self.ref_v1, "warm": self.warm,
                "run_loss": self.run_loss, "run_acc": self.run_acc, "run_count": self.run_count,
                "gens": [g.get_state() for g in self.gens], "rows": self.rows, "seconds": self.seconds,
                "vectors": self.vectors}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        device = self.gcum.device
        self.w0, self.gcum, self.ema = (state[k].to(device) for k in ("w0", "gcum", "ema"))
        self.ref_v1, self.warm = state["ref_v1"], state["warm"]
        self.run_loss, self.run_acc = state["run_loss"].to(device), state["run_acc"].to(device)
        self.run_count = state["run_count"]
        for gen, gstate in zip(self.gens, state["gens"], strict=True):
            gen.set_state(gstate)
        self.rows, self.seconds, self.vectors = state["rows"], state["seconds"], state["vectors"]


def _abs_cos(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    # a, b (..., D) -> (...) sign-invariant cosine
    a, b = a.double(), b.double()
    return ((a * b).sum(-1).abs() / (a.norm(dim=-1) * b.norm(dim=-1)).clamp_min(1e-300)).float()


def _top_right_vectors(M: torch.Tensor, warm: torch.Tensor | None) -> torch.Tensor:
    """Principal right singular vector of each ``M (N, m, n)`` -> ``(N, n)`` float64 on CPU.

    Float32 power iteration ``v <- M^T M v`` (two mat-vecs, no Gram matrix) from ``warm (N, n)``; matrices
    whose relative eigen-residual ``||M^T M v - lam v|| / lam`` stays above ``_POWER_TOL`` (and all
    of them without a warm start) fall back to an exact ``eigh`` of ``M^T M``.
    """
    M = M.detach().float().cpu()
    N, n = M.shape[0], M.shape[-1]
    out = torch.zeros(N, n, dtype=torch.float64)
    todo = torch.ones(N, dtype=torch.bool)
    if warm is not None:
        v = warm.float().cpu()
        v = v / v.norm(dim=-1, keepdim=True).clamp_min(1e-30)
        res = torch.full((N,), math.inf)
        for _ in range(_POWER_ITERS):
            w = (M.mT @ (M @ v.unsqueeze(-1))).squeeze(-1)  # (N, n)
            lam = (v * w).sum(-1)
            res = (w - lam.unsqueeze(-1) * v).norm(dim=-1) / lam.abs().clamp_min(1e-30)
            if bool((res < _POWER_TOL).all()):
                break
            v = w / w.norm(dim=-1, keepdim=True).clamp_min(1e-30)
        ok = res < _POWER_TOL
        out[ok] = v[ok].double()
        todo = ~ok
    if bool(todo.any()):
        A = M[todo].double().mT @ M[todo].double()
        _, vecs = torch.linalg.eigh(A)
        out[todo] = vecs[..., -1]
    return out


def summarize(rows: list[list[Any]]) -> dict[str, float | None]:
    """Headline numbers of one run: final values (the Table 1/3/4/5 columns) and step-0 values.

    Returns:
        A dict like ``{"acc": .977, "G v1": ..., "W v1": ..., "delta_gw": ..., "G0 v1": ...}``;
        a value is ``None`` when the series lacks it.
    """
    last_step = max((r[0] for r in rows), default=0)

    def pick(source: str, metric: str, space: str | None = None, k: int | None = None,
             step: int | None = None) -> float | None:
        want = last_step if step is None else step
        vals = [r[7] for r in rows if r[0] == want and r[2] == source and r[3] == metric and r[4] == space
                and r[5] == k and r[6] is None]
        return float(vals[-1]) if vals else None

    out: dict[str, float | None] = {"acc": pick("test", "acc")}
    for src in ("W", "G"):
        for space in ("v", "u"):
            for k in (1, 2):
                out[f"{src} {space}{k}"] = pick(src, "cont", space, k)
            out[f"{src} s2wa({space})"] = pick(src, "s2wa", space)
            out[f"{src} {space}1 excess"] = pick(src, "null_excess", space, 1)
            out[f"{src} {space}1 null"] = pick(src, "null_mean", space, 1)
            out[f"{src} {space}1 null_std"] = pick(src, "null_std", space, 1)
        out[f"{src} erank"] = pick(src, "erank")
    out["Gcum v1"] = pick("Gcum", "cont", "v", 1)
    out["Gcum v1 excess"] = pick("Gcum", "null_excess", "v", 1)
    out["delta_gw"] = pick("Gcum", "delta_gw")
    out["rel_change"] = pick("W", "rel_change")
    out["rotation_deg"] = pick("W", "rotation_deg")
    out["G0 v1"] = pick("G", "cont", "v", 1, step=0)
    out["W0 v1"] = pick("W", "cont", "v", 1, step=0)
    out["W0 v1 excess"] = pick("W", "null_excess", "v", 1, step=0)
    out["G0 v1 excess"] = pick("G", "null_excess", "v", 1, step=0)
    out["align G"] = pick("G", "align_w_v1", "v", 1)
    out["align Gcum"] = pick("Gcum", "align_w_v1", "v", 1)
    for r in rows:
        if r[0] == last_step and r[3] == "align_w_v1" and r[2].startswith("EMA"):
            out[f"align {r[2]}"] = float(r[7])
    return out
