"""Continuity tracking during training, for both simulators, through ``geodrift.continuity``.

Each tracker implements ``geodrift.sim.train.Tracker`` and keeps one tidy series per ensemble
member: rows ``(step, epoch, source, role, metric, space, k, layer, value)``
(``record.SERIES_COLUMNS``). At every tracked step (step 0 = the first backward pass, then every
``TrackConfig.every`` steps and after the last one) the model's weights (``W``) and this step's
gradients (``G``) are measured as WeightSets by ``geodrift.continuity`` - the same code path as
``geodrift scan`` - so every similarity is recorded with its permutation null (``null_mean``,
``null_std``, ``z``; ``TrackConfig.null_draws`` draws, seeded by ``seed * 1_000_003 + step``):
``cont`` (Eq. 1, ``k = 1..TrackConfig.k``), ``s2wa`` (Eq. 2; over every singular vector for the
MLP, whose full spectrum is tracked) and ``erank`` (Eq. 3).

MLP extras (``MLPTracker``):

- ``Gcum``: the cumulative raw gradient ``sum_t G_t`` over all steps so far (summed every step,
  including step ``t`` at track time ``t``; the post-training gradient is not added): ``cont`` of
  v1 and u1 with its null, and ``delta_gw`` = cont(v1(Gcum)) - cont(v1(W)).
- ``align_w_v1`` for ``G``, ``Gcum`` and ``EMA<beta>``: the mean over layers of
  ``|cos(v1(W_l), v1(X_l))|`` (paper section 4.4; its exact formula is not stated there, this is the
  natural reading) with a permutation null (``align_null_mean``). ``EMA_l <- beta EMA_l + (1 - beta)
  G_l`` every step from zero (the zero start only rescales, v1 is unaffected).
- ``W``: ``rel_change`` = ``||W_l - W_l(0)||_F / ||W_l(0)||_F`` and ``rotation_deg`` =
  ``degrees(arccos |cos(v1_l(t), v1_l(t_ref))|)`` per layer and mean (``t_ref``: one epoch by
  default, Fig. 2a's "epoch-1 reference"), with ``rotation_null_deg`` = the angle of the
  permutation null's mean ``|cos|`` (what fully drifted layers approach).
- ``train``: ``loss``/``acc`` averaged over the mini-batches since the previous track;
  ``test``: ``loss``/``acc`` on the whole test set.

Only v1 is needed for ``Gcum`` and the EMAs: it comes from warm-started power iteration
(``geodrift.linalg.top_right_vectors``). Transformer extras (``LlamaTracker``): ``train`` loss
(mean of every ``min(every, 50)`` steps) and the held-out ``eval`` perplexity every ``eval_every``
steps and at the end. With ``TrackConfig.view == "canonical"`` the Llama's weights are measured at the
canonical point of their gauge orbit (:mod:`geodrift.sim.canonical`: the same numbers for every exactly
reparametrised copy) and its gradients are not recorded.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from geodrift import metrics
from geodrift.continuity import MeasureSpec, PermutationBank, assemble, decompose, vector_continuity
from geodrift.linalg import top_right_vectors
from geodrift.lm.llama import LlamaLM
from geodrift.sim.canonical import CanonicalFrame
from geodrift.sim.config import TrackConfig
from geodrift.sim.data import Dataset
from geodrift.sim.mlp import ResidualMLP
from geodrift.sim.reference import PAPER_TABLE2_SPACE
from geodrift.weights import WeightSet

Row = list[Any]


@dataclass(frozen=True)
class Latest:
    """The latest tracked weight continuity of member 0, with its permutation-null mean (for progress displays).

    ``label`` says what it is, e.g. ``W v1`` (the MLP's blocks) or ``W, mean of 7 projections``.
    """

    label: str
    value: float
    null_mean: float
    step: int


def latest_continuity(rows: list[Row], step: int, spaces: dict[str, str], label: str) -> Latest | None:
    """Mean over ``spaces`` (role -> space) of W's k=1 continuity and null mean tracked at ``step``, from ``rows``."""
    found: dict[tuple[str, str], float] = {}
    for row in reversed(rows):  # the latest track's rows are at the end
        if row[0] != step:
            break
        if row[2] == "W" and row[6] == 1 and row[7] is None and spaces.get(row[3]) == row[5]:
            found.setdefault((row[3], row[4]), row[8])
    roles = [r for r in spaces if (r, "cont") in found and (r, "null_mean") in found]
    if not roles:
        return None
    return Latest(label, sum(found[(r, "cont")] for r in roles) / len(roles),
                  sum(found[(r, "null_mean")] for r in roles) / len(roles), step)


def track_seed(seed: int, step: int) -> int:
    """Seed of the permutation nulls of one member at one tracked step."""
    return seed * 1_000_003 + step


class _Series:
    # The rows of one member and the helper that appends them.
    def __init__(self) -> None:
        self.rows: list[Row] = []

    def add(self, step: int, epoch: float, source: str, role: str | None, metric: str, value: float | torch.Tensor,
            space: str | None = None, k: int | None = None, layer: int | None = None) -> None:
        self.rows.append([step, epoch, source, role, metric, space, k, layer, float(value)])

    def measure(self, step: int, epoch: float, source: str, ws: WeightSet, spec: MeasureSpec) -> dict:
        """Measure ``ws`` through the continuity package, record its series, return the triplets."""
        spectra = decompose(ws, spec)
        report = assemble(spectra, spec, ws.origin, ws.view)
        for role, metric, space, k, layer, value in report.series():
            self.rows.append([step, epoch, source, role, metric, space, k, layer, float(value)])
        return spectra


class MLPTracker:
    """Tracks a ``ResidualMLP`` ensemble (see the module docstring).

    Args:
        model: the ensemble (weights ``model.blocks (E, L, D, D)``).
        data: for the test-set evaluation.
        cfg: interval, k, null draws, EMA betas, reference step.
        epoch_steps: steps per "epoch" for the time axis (and the default reference step).
        seeds: member seeds (they seed each member's nulls).
    """

    def __init__(self, model: ResidualMLP, data: Dataset, cfg: TrackConfig, epoch_steps: int,
                 seeds: list[int]) -> None:
        self.model, self.data, self.cfg, self.seeds = model, data, cfg, list(seeds)
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
        self.series = [_Series() for _ in range(E)]
        # per member: W's v1 per layer at step 0 and at the latest track (for the PCA plot)
        self.vectors: list[dict[str, list[list[float]]]] = [{} for _ in range(E)]
        self.seconds = 0.0
        self.latest: Latest | None = None
        self.frame: CanonicalFrame | None = None  # the canonical view's gauge, fixed at the first tracked step
        self.first_vectors: dict | None = None  # the first tracked step's v1/u1 (rotation_deg's reference)

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
        E, L, D, _ = self.model.blocks.shape
        epoch = step / self.epoch_steps
        # Full spectrum: the MLP's Eq. 2 sums over every singular vector, as the paper's.
        specs = [MeasureSpec(k=self.cfg.k, null_draws=self.cfg.null_draws, seed=track_seed(s, step),
                             full_spectrum=True, svd="exact") for s in self.seeds]
        w_v1, g_v1 = [], []
        for e in range(E):
            w = self.series[e].measure(step, epoch, "W", self.model.weightset(e), specs[e])
            g = self.series[e].measure(step, epoch, "G", self.model.gradset(e), specs[e])
            w_v1.append(torch.stack([w[("block", layer)].Vh[0] for layer in range(L)]))
            g_v1.append(torch.stack([g[("block", layer)].Vh[0] for layer in range(L)]))
        W_v1, G_v1 = torch.stack(w_v1), torch.stack(g_v1)  # (E, L, D)
        others = torch.cat([self.gcum.unsqueeze(0), self.ema]) if self.betas else self.gcum.unsqueeze(0)
        # warm start: the previous track's vectors; at the first track Gcum and the EMAs are all
        # multiples of this step's gradient, whose v1 the SVD just gave
        warm = self.warm if self.warm is not None else G_v1.unsqueeze(0).expand(others.shape[0], -1, -1, -1)
        v1_other = top_right_vectors(others.reshape(-1, D, D), warm.reshape(-1, D)).reshape(-1, E, L, D)
        self.warm = v1_other
        u1_gcum = torch.einsum("eldk,elk->eld", self.gcum.double().cpu(), v1_other[0])
        if step == self.reference_step and self.ref_v1 is None:
            self.ref_v1 = W_v1.clone()
        test_loss, test_acc = self._evaluate()
        run_loss, run_acc = self.run_loss.cpu(), self.run_acc.cpu()
        for e in range(E):
            add = self.series[e].add
            bank = PermutationBank(torch.Generator().manual_seed(specs[e].seed + 1))
            draws = self.cfg.null_draws
            self.vectors[e]["W v1 final"] = W_v1[e].tolist()
            if step == 0:
                self.vectors[e]["W v1 init"] = W_v1[e].tolist()
            cont_w = float(metrics.adjacent_abs_cos(W_v1[e]).mean())
            for space, vectors in (("v", v1_other[0, e]), ("u", u1_gcum[e])):
                vc = vector_continuity(vectors.float().unsqueeze(1), draws, bank)[0]
                for metric, value in (("cont", vc.mean), ("null_mean", vc.null_mean), ("null_std", vc.null_std),
                                      ("z", vc.z)):
                    add(step, epoch, "Gcum", "block", metric, value, space, 1)
                if space == "v":
                    add(step, epoch, "Gcum", "block", "delta_gw", vc.mean - cont_w)
            sources = [("G", G_v1[e]), ("Gcum", v1_other[0, e])]
            sources += [(f"EMA{beta:g}", v1_other[1 + b, e]) for b, beta in enumerate(self.betas)]
            for source, vectors in sources:
                value, null = _alignment(W_v1[e], vectors.float(), draws, bank)
                add(step, epoch, source, "block", "align_w_v1", value, "v", 1)
                add(step, epoch, source, "block", "align_null_mean", null, "v", 1)
            W, W0 = self.model.blocks.detach()[e], self.w0[e]
            rel = ((W - W0).flatten(1).norm(dim=1) / W0.flatten(1).norm(dim=1)).cpu()
            for layer in range(L):
                add(step, epoch, "W", "block", "rel_change", rel[layer], layer=layer)
            add(step, epoch, "W", "block", "rel_change", rel.mean())
            if self.ref_v1 is not None:
                cos = torch.nn.functional.cosine_similarity(W_v1[e], self.ref_v1[e], dim=-1).abs().clamp(0.0, 1.0)
                angle = torch.rad2deg(torch.arccos(cos))
                for layer in range(L):
                    add(step, epoch, "W", "block", "rotation_deg", angle[layer], layer=layer)
                add(step, epoch, "W", "block", "rotation_deg", angle.mean())
                _, null = _alignment(self.ref_v1[e], W_v1[e], draws, bank)
                add(step, epoch, "W", "block", "rotation_null_deg", math.degrees(math.acos(min(1.0, null))))
            if self.run_count:
                add(step, epoch, "train", None, "loss", run_loss[e] / self.run_count)
                add(step, epoch, "train", None, "acc", run_acc[e] / self.run_count)
            add(step, epoch, "test", None, "loss", test_loss[e])
            add(step, epoch, "test", None, "acc", test_acc[e])
        self.run_loss.zero_()
        self.run_acc.zero_()
        self.run_count = 0
        self.latest = latest_continuity(self.series[0].rows, step, {"block": "v"}, "W v1")
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

    def rows(self, member: int) -> list[Row]:
        return self.series[member].rows

    def state_dict(self) -> dict[str, Any]:
        return {"w0": self.w0, "gcum": self.gcum, "ema": self.ema, "ref_v1": self.ref_v1, "warm": self.warm,
                "run_loss": self.run_loss, "run_acc": self.run_acc, "run_count": self.run_count,
                "rows": [s.rows for s in self.series], "seconds": self.seconds, "vectors": self.vectors}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        device = self.gcum.device
        self.w0, self.gcum, self.ema = (state[k].to(device) for k in ("w0", "gcum", "ema"))
        self.ref_v1, self.warm = state["ref_v1"], state["warm"]
        self.run_loss, self.run_acc = state["run_loss"].to(device), state["run_acc"].to(device)
        self.run_count = state["run_count"]
        for series, rows in zip(self.series, state["rows"], strict=True):
            series.rows = rows
        self.seconds, self.vectors = state["seconds"], state["vectors"]


class LlamaTracker:
    """Tracks a ``LlamaLM`` (one member): every projection's W and G, the training loss, held-out perplexity.

    Args:
        model: the model.
        cfg: interval, k, null draws, evaluation interval.
        steps: the run's length (the final evaluation).
        steps_per_epoch: for the time axis.
        seed: the run's seed (it seeds the nulls).
        evaluate: returns held-out ``{"nll", "ppl", "bits_per_byte"}`` of the current model.
    """

    def __init__(self, model: LlamaLM, cfg: TrackConfig, steps: int, steps_per_epoch: float, seed: int,
                 evaluate: Callable[[], dict[str, float]]) -> None:
        self.model, self.cfg, self.steps, self.seed = model, cfg, steps, seed
        self.steps_per_epoch, self.evaluate = steps_per_epoch, evaluate
        self.losses: list[float] = []
        self.series = [_Series()]
        self.vectors: list[dict[str, list[list[float]]]] = [{}]
        self.seconds = 0.0
        self.latest: Latest | None = None
        self.frame: CanonicalFrame | None = None  # the canonical view's gauge, fixed at the first tracked step
        self.first_vectors: dict | None = None  # the first tracked step's v1/u1 (rotation_deg's reference)

    def after_backward(self, step: int, stats: dict[str, torch.Tensor]) -> None:
        self.losses.append(float(stats["loss"]))
        if len(self.losses) == max(1, min(self.cfg.every or 50, 50)):
            self.series[0].add(step, step / self.steps_per_epoch, "train", None, "loss",
                               sum(self.losses) / len(self.losses))
            self.losses = []

    def wants(self, step: int, final: bool) -> bool:
        return final or step == 0 or (self.cfg.every > 0 and step % self.cfg.every == 0)

    def track(self, step: int) -> None:
        start = time.perf_counter()
        epoch = step / self.steps_per_epoch
        spec = MeasureSpec(k=self.cfg.k, null_draws=self.cfg.null_draws, seed=track_seed(self.seed, step))
        if self.cfg.view == "canonical":  # the weights at their canonical point; no gradients (geodrift.sim.canonical)
            if self.frame is None:
                self.frame = CanonicalFrame(self.model)
            spectra = self.series[0].measure(step, epoch, "W", self.frame.weightset(self.model), spec)
        else:
            spectra = self.series[0].measure(step, epoch, "W", self.model.weightset(), spec)
            self.series[0].measure(step, epoch, "G", self.model.gradset(), spec)
        self._rotation(step, epoch, spectra)
        self.latest = latest_continuity(self.series[0].rows, step, PAPER_TABLE2_SPACE,
                                        f"W, mean of {len(PAPER_TABLE2_SPACE)} projections (paper's space)")
        if step == self.steps or (self.cfg.eval_every and step % self.cfg.eval_every == 0):
            self.record_eval(step)
        self.seconds += time.perf_counter() - start

    def _rotation(self, step: int, epoch: float, spectra: dict) -> None:
        # rotation_deg: per projection, space and layer, arccos |cos| of the first singular vector against the first
        # tracked step's (Fig. 2a), and its mean over layers; in the canonical view both in the first step's gauge
        first = {key: (t.Vh[0].double(), t.U[:, 0].double()) for key, t in spectra.items()}
        if self.first_vectors is None:
            self.first_vectors = first
        for role in sorted({r for r, _ in first}):
            layers = sorted(layer for r, layer in first if r == role and (r, layer) in self.first_vectors)
            for index, space in enumerate(("v", "u")):
                angles = [math.degrees(math.acos(min(1.0, abs(float(
                    torch.nn.functional.cosine_similarity(first[(role, layer)][index],
                                                         self.first_vectors[(role, layer)][index], dim=0))))))
                    for layer in layers]
                for layer, angle in zip(layers, angles, strict=True):
                    self.series[0].add(step, epoch, "W", role, "rotation_deg", angle, space, 1, layer)
                if angles:
                    self.series[0].add(step, epoch, "W", role, "rotation_deg", sum(angles) / len(angles), space, 1)

    def record_eval(self, step: int) -> None:
        """Evaluate held-out perplexity now and record it at ``step``."""
        stats = self.evaluate()
        for name in ("nll", "ppl", "bits_per_byte"):
            self.series[0].add(step, step / self.steps_per_epoch, "eval", None, name, stats[name])

    def rows(self, member: int) -> list[Row]:
        return self.series[member].rows

    def state_dict(self) -> dict[str, Any]:
        # the first tracked step's vectors and canonical weights travel too: a resumed run keeps its reference
        first = [[role, layer, *vectors] for (role, layer), vectors in (self.first_vectors or {}).items()]
        return {"losses": list(self.losses), "seconds": self.seconds, "rows": self.series[0].rows,
                "first_vectors": first, "frame": None if self.frame is None else self.frame.reference}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.losses, self.seconds = list(state["losses"]), float(state["seconds"])
        self.series[0].rows = state["rows"]
        first = state.get("first_vectors") or []
        self.first_vectors = {(role, layer): (v, u) for role, layer, v, u in first} or None
        if state.get("frame") is not None:
            self.frame = CanonicalFrame(self.model)
            self.frame.reference = state["frame"]


def _alignment(a: torch.Tensor, b: torch.Tensor, draws: int, bank: PermutationBank) -> tuple[float, float]:
    # Mean over layers of |cos(a_l, b_l)| for a, b (L, D), and its permutation-null mean: the pairs
    # (a_l, b_l) are interleaved into one stack (2L, 1, D) whose even adjacent pairs are exactly them.
    stack = torch.stack([a.float(), b.float()], 1).reshape(-1, 1, a.shape[-1])
    n_pairs, dim = stack.shape[0] - 1, stack.shape[-1]
    samples = metrics.permuted_abs_cos(stack, draws, bank.generator, flat_index=bank.index(draws, n_pairs, dim))[:, 0::2]
    return float(metrics.adjacent_abs_cos(stack)[0::2].mean()), float(samples.mean())


def summarize(rows: list[Row]) -> dict[str, float | None]:
    """Headline numbers of one run: the final value of every mean series, plus step-0 values.

    Keys: ``"<source> <space><k>"`` for continuity (``"W v1"``), with ``" null"``, ``" null_std"``
    and ``" excess"`` (cont - null mean) beside it; ``"<source> s2wa(<space>)"``;
    ``"<source> erank"``; ``"G0 v1"``/``"W0 v1"`` (+ ``" excess"``) at the first backward pass;
    ``acc``, ``delta_gw``, ``rel_change``, ``rotation_deg``, ``align <source>``, ``ppl``,
    ``bits_per_byte``. Roles other than the MLP's ``block`` prefix the key (``"W attn_q v1"``).

    Returns:
        A dict; a value is ``None`` when the series lacks it.
    """
    last = max((r[0] for r in rows), default=0)
    final: dict[tuple, float] = {}
    first: dict[tuple, float] = {}
    for step, _, source, role, metric, space, k, layer, value in rows:
        if layer is not None:
            continue
        key = (source, role, metric, space, k)
        if step == last:
            final[key] = value
        if step == 0:
            first[key] = value
    out: dict[str, float | None] = {}
    for (source, role, metric, space, k), value in final.items():
        prefix = f"{source} " if role in (None, "block") else f"{source} {role} "
        if metric == "cont":
            name = f"{prefix}{space}{k}"
            out[name] = value
            out[f"{name} null"] = final.get((source, role, "null_mean", space, k))
            out[f"{name} null_std"] = final.get((source, role, "null_std", space, k))
            null = out[f"{name} null"]
            out[f"{name} excess"] = value - null if null is not None else None
        elif metric == "s2wa":
            out[f"{prefix}s2wa({space})"] = value
        elif metric == "erank":
            out[f"{prefix}erank"] = value
        elif metric == "align_w_v1":
            out[f"align {source}"] = value
        elif metric == "rotation_deg" and role not in (None, "block"):
            out[f"{prefix}rotation_deg({space})"] = value
        elif source in ("train", "test", "eval") or metric in ("delta_gw", "rel_change", "rotation_deg"):
            out[metric if source != "train" else f"train {metric}"] = value
    for source in ("G", "W"):
        for label, metric in (("v1", "cont"), ("v1 excess", None)):
            cont = first.get((source, "block", "cont", "v", 1))
            null = first.get((source, "block", "null_mean", "v", 1))
            if metric == "cont":
                out[f"{source}0 {label}"] = cont
            else:
                out[f"{source}0 {label}"] = cont - null if cont is not None and null is not None else None
    return out
