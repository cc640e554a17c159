"""Orbit alignment of two Llama-family checkpoints: bring B into A's gauge before comparing them.

Two checkpoints that compute the same function can differ by the network's exact symmetries
(issue 31, docs/scan.md "Aligned comparison"): a rotation of the residual stream once the norm gains
are folded, a permutation and positive scaling of each layer's hidden units (Up rows against Down
columns; Gate rows permuted only), an invertible map per key-value head on V's rows against O's
columns, and a rotation-scaling per key-value head and RoPE frequency pair on K's rows against Q's.
:func:`align` recovers each of them from the weights alone, in that order, and applies their
inverses to B:

1. **fold** both models' norm gains into the projections that read them (Q/K/V, Gate/Up, the head);
2. **residual rotation**: orthogonal Procrustes (``scipy.linalg.orthogonal_procrustes``) between the
   stacked token-indexed rows of the embedding and the (folded) head, whose rows no other gauge moves;
3. per layer, **hidden permutation**: ``scipy.optimize.linear_sum_assignment`` on the summed cosines of
   Gate rows, Up rows and Down columns (a cosine is blind to the positive Up/Down scaling);
4. **Up/Down scaling**: each matched unit of B scaled so that its ``log(||Up_j|| / ||Down_j||)`` equals
   A's (exact for a rescaled copy; for an unrelated model it puts B's units at A's balance);
5. **V/O map** per key-value head: the least-squares ``N = V_A V_B^+`` on V's rows, its inverse on the
   O columns of the head's query heads;
6. **Q/K map** per key-value head and RoPE pair: the least-squares 2x2 map on K's pair rows,
   projected onto rotation-scalings (the commutant of RoPE), its inverse transpose on Q's.

For an exact reparametrisation every step is exact, and the aligned B equals the folded A up to
float error; for two independently trained models each step is the best fit of its kind, and the
report says how good (the fit residuals, the mean matched cosine, the share of mutual best matches).
All of this works on Hugging Face-named state dicts in memory (float64 inside), for models
whose MLP is gated (SwiGLU) with RMSNorm pre-norms and RoPE in the half-split layout.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import torch
from scipy.linalg import orthogonal_procrustes
from scipy.optimize import linear_sum_assignment

from geodrift.errors import GeodriftError

StateDict = dict[str, torch.Tensor]
_P = "model.layers.{}."
_ROLES = {"q": "self_attn.q_proj", "k": "self_attn.k_proj", "v": "self_attn.v_proj", "o": "self_attn.o_proj",
          "gate": "mlp.gate_proj", "up": "mlp.up_proj", "down": "mlp.down_proj"}


@dataclass(frozen=True)
class LlamaShape:
    """The sizes alignment needs: layers, heads, widths.

    Example:
        >>> LlamaShape(2, 4, 2, 16, 24).head_dim
        4
    """

    n_layers: int
    n_heads: int
    n_kv_heads: int
    d_model: int
    d_ff: int

    @property
    def head_dim(self) -> int:
        """Width of one attention head (``d_model / n_heads``)."""
        return self.d_model // self.n_heads


@dataclass
class LayerAlignment:
    """What :func:`align` recovered in one layer."""

    layer: int
    identity_share: float  # share of B's hidden units matched to the unit of the same index
    mutual_best_share: float  # share of matches that are each other's best cosine (1.0 for an exact copy)
    matched_cosine: float  # mean over units of (cos Gate + cos Up + cos Down) / 3 after matching
    log_scale_std: float  # spread of the recovered Up/Down log-scales
    vo_residual: float  # ||N V_B - V_A|| / ||V_A|| over the layer's key-value heads
    qk_residual: float  # ||N K_B - K_A|| / ||K_A|| after the rotation-scaling projection


@dataclass
class AlignmentReport:
    """What :func:`align` recovered: the residual rotation's fit and each layer's maps."""

    rotation_residual: float  # ||X_B R - X_A|| / ||X_A|| over the embedding and head rows
    naive_weight_error: float  # ||B - A|| / ||A|| over every projection, both folded, before alignment
    aligned_weight_error: float  # the same after alignment
    layers: list[LayerAlignment] = field(default_factory=list)
    steps: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form (docs/output-schema.md, ``alignment``)."""
        return asdict(self)

    def summary(self) -> str:
        """One line: the fits and the permutation agreement.

        Example:
            >>> AlignmentReport(1e-9, 0.9, 2e-8, [LayerAlignment(0, 0.5, 1.0, 1.0, 0.3, 0.0, 0.0)]).summary()[:48]
            'aligned B to A: rotation fit residual 1.00e-09, '
        """
        mutual = float(np.mean([x.mutual_best_share for x in self.layers])) if self.layers else float("nan")
        cosine = float(np.mean([x.matched_cosine for x in self.layers])) if self.layers else float("nan")
        return (f"aligned B to A: rotation fit residual {self.rotation_residual:.2e}, hidden units matched with "
                f"mean cosine {cosine:.3f} ({100 * mutual:.1f}% mutual best), weight distance "
                f"{self.naive_weight_error:.3g} -> {self.aligned_weight_error:.3g} (relative, gains folded)")


def llama_shape(sd: StateDict, n_heads: int, n_kv_heads: int | None = None) -> LlamaShape:
    """Read the sizes from a Hugging Face-named Llama state dict.

    Args:
        sd: ``model.embed_tokens.weight``, ``model.layers.{l}.…``; Q/K/V/O, Gate/Up/Down and both norms per layer.
        n_heads, n_kv_heads: from the model's config (``n_kv_heads`` None: ``n_heads``).

    Raises:
        GeodriftError: a missing tensor, or heads that do not divide the width.

    Example:
        >>> sd = {"model.embed_tokens.weight": torch.zeros(5, 8), "model.layers.0.mlp.gate_proj.weight": torch.zeros(6, 8)}
        >>> llama_shape(sd, 2)
        LlamaShape(n_layers=1, n_heads=2, n_kv_heads=2, d_model=8, d_ff=6)
    """
    if "model.embed_tokens.weight" not in sd:
        raise GeodriftError("align: the state dict has no model.embed_tokens.weight; alignment needs a Llama-family "
                            "model with Hugging Face names")
    d = int(sd["model.embed_tokens.weight"].shape[1])
    layers = sorted({int(k.split(".")[2]) for k in sd if k.startswith("model.layers.")})
    if not layers or layers != list(range(len(layers))):
        raise GeodriftError("align: the state dict's layers are not numbered 0..L-1; pass a whole model")
    kv = n_kv_heads or n_heads
    if n_heads <= 0 or d % n_heads or n_heads % kv:
        raise GeodriftError(f"align: {n_heads} heads / {kv} key-value heads do not divide d_model {d}")
    return LlamaShape(len(layers), n_heads, kv, d, int(sd[_P.format(0) + "mlp.gate_proj.weight"].shape[0]))


def fold_gains(sd: StateDict, shape: LlamaShape) -> StateDict:
    """Fold every RMSNorm gain into the projections that read it; gains become ones, the head untied.

    Args:
        sd: a Hugging Face-named Llama state dict (``lm_head.weight`` absent: tied to the embedding).
        shape: from :func:`llama_shape`.

    Returns:
        A new float64 state dict computing the same function (RMSNorm without gain is radial, so the
        residual stream's rotation gauge becomes exact).

    Example:
        >>> sd = {"model.embed_tokens.weight": torch.ones(3, 2), "model.norm.weight": torch.tensor([2.0, 1.0])}
        >>> fold_gains(sd, LlamaShape(0, 1, 1, 2, 4))["lm_head.weight"][0].tolist()
        [2.0, 1.0]
    """
    out = {k: v.detach().to(torch.float64, copy=True) for k, v in sd.items()}
    out.setdefault("lm_head.weight", out["model.embed_tokens.weight"].clone())
    pairs = [("model.norm.weight", ["lm_head.weight"])]
    for layer in range(shape.n_layers):
        p = _P.format(layer)
        pairs += [(p + "input_layernorm.weight", [p + _ROLES[r] + ".weight" for r in ("q", "k", "v")]),
                  (p + "post_attention_layernorm.weight", [p + _ROLES[r] + ".weight" for r in ("gate", "up")])]
    for norm, readers in pairs:
        if norm not in out:
            continue
        gain = out[norm]
        for name in readers:
            out[name].mul_(gain.reshape(1, -1))
        out[norm] = torch.ones_like(gain)
    return out


def align(sd_a: StateDict, sd_b: StateDict, shape: LlamaShape, *, maps: bool = True
          ) -> tuple[StateDict, StateDict, AlignmentReport]:
    """Bring B into A's gauge: the residual rotation, hidden permutations and scalings, V/O and Q/K maps.

    Args:
        sd_a, sd_b: Hugging Face-named Llama state dicts of one shape.
        shape: from :func:`llama_shape` (checked against both).
        maps: also fit the per-head V/O and Q/K maps (False: rotation, permutations and scalings only).

    Returns:
        ``(a_folded, b_aligned, report)``: A with its gains folded, B folded and mapped into A's frame
        (float64; both compute their model's function), and what was recovered.

    Raises:
        GeodriftError: the two differ in a tensor's presence or shape (naming the tensor).

    Example:
        >>> g = torch.Generator().manual_seed(0)
        >>> sd = toy_state_dict(LlamaShape(2, 4, 2, 16, 24), g)
        >>> _, _, rep = align(sd, sd, LlamaShape(2, 4, 2, 16, 24))
        >>> rep.aligned_weight_error < 1e-12, rep.layers[0].identity_share
        (True, 1.0)
    """
    import time

    t0 = time.perf_counter()
    check_same_shape(sd_a, sd_b, shape)
    a, b = fold_gains(sd_a, shape), fold_gains(sd_b, shape)
    naive = weight_error(a, b, shape)
    rotation, rot_residual = _residual_rotation(a, b)
    _rotate(b, rotation, shape)
    layers = []
    for layer in range(shape.n_layers):
        perm, info = _match_hidden(a, b, layer)
        _permute_and_scale(a, b, layer, perm)
        vo = _fit_vo(a, b, layer, shape) if maps else float("nan")
        qk = _fit_qk(a, b, layer, shape) if maps else float("nan")
        layers.append(LayerAlignment(layer, info[0], info[1], info[2], info[3], vo, qk))
    steps = ["fold gains", "residual rotation (Procrustes on embedding and head rows)",
             "hidden permutation (linear_sum_assignment on Gate/Up/Down cosines)", "Up/Down scaling"]
    steps += ["V/O map per key-value head", "Q/K rotation-scaling per RoPE pair"] if maps else []
    report = AlignmentReport(rot_residual, naive, weight_error(a, b, shape), layers, steps, time.perf_counter() - t0)
    return a, b, report


def check_same_shape(sd_a: StateDict, sd_b: StateDict, shape: LlamaShape, label_a: str = "A",
                     label_b: str = "B") -> None:
    """Refuse two state dicts that differ in a projection's presence or shape.

    Raises:
        GeodriftError: one line naming the tensor, both shapes and both models.
    """
    names = ["model.embed_tokens.weight"] + [_P.format(lay) + _ROLES[r] + ".weight" for lay in range(shape.n_layers)
                                             for r in _ROLES]
    for name in names:
        ta, tb = sd_a.get(name), sd_b.get(name)
        sa = "missing" if ta is None else "x".join(map(str, ta.shape))
        sb = "missing" if tb is None else "x".join(map(str, tb.shape))
        if sa != sb or ta is None:
            raise GeodriftError(f"--align: {name} is {sa} in {label_a} but {sb} in {label_b}; --align needs two "
                                "models of one architecture and shape")


def weight_error(a: StateDict, b: StateDict, shape: LlamaShape) -> float:
    """``||B - A|| / ||A||`` over the embedding, the head and every projection (Frobenius, all stacked).

    Example:
        >>> s = LlamaShape(1, 2, 2, 4, 6); sd = toy_state_dict(s, torch.Generator().manual_seed(1))
        >>> weight_error(sd, sd, s)
        0.0
    """
    names = ["model.embed_tokens.weight", "lm_head.weight"] + [
        _P.format(lay) + _ROLES[r] + ".weight" for lay in range(shape.n_layers) for r in _ROLES]
    num = sum(float(torch.linalg.vector_norm(b[n].double() - a[n].double())) ** 2 for n in names if n in a)
    den = sum(float(torch.linalg.vector_norm(a[n].double())) ** 2 for n in names if n in a)
    return (num / den) ** 0.5 if den else 0.0


def toy_state_dict(shape: LlamaShape, generator: torch.Generator, vocab: int = 40) -> StateDict:
    """A random Hugging Face-named Llama state dict (float64; gains near 1), for examples and tests."""
    def randn(*size: int) -> torch.Tensor:
        return torch.randn(*size, generator=generator, dtype=torch.float64) / size[-1] ** 0.5

    d, f, hd = shape.d_model, shape.d_ff, shape.head_dim
    sd = {"model.embed_tokens.weight": randn(vocab, d), "lm_head.weight": randn(vocab, d),
          "model.norm.weight": 1 + 0.1 * randn(d) * d ** 0.5}
    for layer in range(shape.n_layers):
        p = _P.format(layer)
        sizes = {"q": (d, d), "k": (shape.n_kv_heads * hd, d), "v": (shape.n_kv_heads * hd, d), "o": (d, d),
                 "gate": (f, d), "up": (f, d), "down": (d, f)}
        sd.update({p + _ROLES[r] + ".weight": randn(*s) for r, s in sizes.items()})
        sd[p + "input_layernorm.weight"] = 1 + 0.1 * randn(d) * d ** 0.5
        sd[p + "post_attention_layernorm.weight"] = 1 + 0.1 * randn(d) * d ** 0.5
    return sd


# ---- the steps -----------------------------------------------------------------------------------
def _residual_rotation(a: StateDict, b: StateDict) -> tuple[torch.Tensor, float]:
    # Token-indexed rows (embedding, folded head) carry no gauge but the stream's: X_B = X_A Q^T.
    # orthogonal_procrustes(A, B) depends on A^T B only, so it is given (I, X_B^T X_A) formed in float64
    # blocks rather than the two (2 V x d) stacks.
    # ||X_B R - X_A||^2 = ||X_B||^2 + ||X_A||^2 - 2 tr(R^T X_B^T X_A): the residual from the same cross product.
    names = ("model.embed_tokens.weight", "lm_head.weight")
    cross = sum(b[n].T @ a[n] for n in names)
    assert isinstance(cross, torch.Tensor)
    rotation, _ = orthogonal_procrustes(np.eye(cross.shape[0]), cross.numpy())
    r = torch.from_numpy(rotation)
    sq_a = sum(float(torch.linalg.vector_norm(a[n])) ** 2 for n in names)
    sq_b = sum(float(torch.linalg.vector_norm(b[n])) ** 2 for n in names)
    return r, max(sq_a + sq_b - 2 * float((r * cross).sum()), 0.0) ** 0.5 / sq_a ** 0.5


def _rotate(b: StateDict, r: torch.Tensor, shape: LlamaShape) -> None:
    # Readers W -> W R (columns), writers W -> R^T W (rows), token rows X -> X R.
    for n in ("model.embed_tokens.weight", "lm_head.weight"):
        b[n] = b[n] @ r
    for layer in range(shape.n_layers):
        p = _P.format(layer)
        for role in ("q", "k", "v", "gate", "up"):
            b[p + _ROLES[role] + ".weight"] = b[p + _ROLES[role] + ".weight"] @ r
        for role in ("o", "down"):
            b[p + _ROLES[role] + ".weight"] = r.T @ b[p + _ROLES[role] + ".weight"]


def _unit(x: torch.Tensor) -> torch.Tensor:
    return x / x.norm(dim=1, keepdim=True).clamp_min(1e-300)


def _match_hidden(a: StateDict, b: StateDict, layer: int) -> tuple[np.ndarray, tuple[float, float, float, float]]:
    p = _P.format(layer)
    w = {r: (a[p + _ROLES[r] + ".weight"], b[p + _ROLES[r] + ".weight"]) for r in ("gate", "up", "down")}
    # rows of [Gate | Up | Down^T], each part unit-normalised: a cosine in float32 is ample for matching
    feats = [torch.cat([_unit(w[r][i] if r != "down" else w[r][i].T) for r in w], dim=1).float() for i in (0, 1)]
    sim_np = (feats[0] @ feats[1].T / 3).double().numpy()
    rows, cols = linear_sum_assignment(sim_np, maximize=True)  # rows == arange: A's unit i <- B's unit cols[i]
    mutual = (sim_np.argmax(axis=1) == cols) & (sim_np.argmax(axis=0)[cols] == rows)
    up_a, up_b = w["up"][0].norm(dim=1), w["up"][1].norm(dim=1)[cols]
    down_a, down_b = w["down"][0].norm(dim=0), w["down"][1].norm(dim=0)[cols]
    log_scale = 0.5 * (torch.log(up_a / down_a) - torch.log(up_b / down_b))
    return cols, (float(np.mean(cols == rows)), float(mutual.mean()), float(sim_np[rows, cols].mean()),
                  float(log_scale.std()) if log_scale.numel() > 1 else 0.0)


def _permute_and_scale(a: StateDict, b: StateDict, layer: int, cols: np.ndarray) -> None:
    p = _P.format(layer)
    idx = torch.from_numpy(np.asarray(cols, dtype=np.int64))
    gate, up, down = (p + _ROLES[r] + ".weight" for r in ("gate", "up", "down"))
    b[gate], b[up], b[down] = b[gate][idx], b[up][idx], b[down][:, idx]
    ratio_a = a[up].norm(dim=1) / a[down].norm(dim=0)
    ratio_b = b[up].norm(dim=1) / b[down].norm(dim=0)
    scale = (ratio_a / ratio_b).sqrt()
    b[up] = b[up] * scale.reshape(-1, 1)
    b[down] = b[down] / scale.reshape(1, -1)


def _fit_vo(a: StateDict, b: StateDict, layer: int, shape: LlamaShape) -> float:
    p, hd, group = _P.format(layer), shape.head_dim, shape.n_heads // shape.n_kv_heads
    v, o = p + _ROLES["v"] + ".weight", p + _ROLES["o"] + ".weight"
    num = den = 0.0
    for g in range(shape.n_kv_heads):
        rows = slice(g * hd, (g + 1) * hd)
        va, vb = a[v][rows], b[v][rows]
        n = va @ vb.T @ torch.linalg.inv(vb @ vb.T)  # least squares N V_B ~ V_A
        b[v][rows] = n @ vb
        cols = slice(g * group * hd, (g + 1) * group * hd)
        inv = torch.linalg.inv(n)
        b[o][:, cols] = torch.cat([b[o][:, cols][:, h * hd:(h + 1) * hd] @ inv for h in range(group)], dim=1)
        num += float((b[v][rows] - va).pow(2).sum())
        den += float(va.pow(2).sum())
    return (num / den) ** 0.5 if den else 0.0


def _fit_qk(a: StateDict, b: StateDict, layer: int, shape: LlamaShape) -> float:
    # RoPE's half-split layout pairs rows i and i + hd/2 of each head; its commutant is a*I + c*J per pair.
    p, hd, group = _P.format(layer), shape.head_dim, shape.n_heads // shape.n_kv_heads
    q, k = p + _ROLES["q"] + ".weight", p + _ROLES["k"] + ".weight"
    half = hd // 2
    num = den = 0.0
    for g in range(shape.n_kv_heads):
        for i in range(half):
            kr = [g * hd + i, g * hd + i + half]
            ka, kb = a[k][kr], b[k][kr]
            n = ka @ kb.T @ torch.linalg.inv(kb @ kb.T)
            c, s = float(n[0, 0] + n[1, 1]) / 2, float(n[1, 0] - n[0, 1]) / 2
            n = torch.tensor([[c, -s], [s, c]], dtype=kb.dtype)
            b[k][kr] = n @ kb
            q_map = torch.linalg.inv(n).T
            for h in range(g * group, (g + 1) * group):
                qr = [h * hd + i, h * hd + i + half]
                b[q][qr] = q_map @ b[q][qr]
            num += float((b[k][kr] - ka).pow(2).sum())
            den += float(ka.pow(2).sum())
    return (num / den) ** 0.5 if den else 0.0
