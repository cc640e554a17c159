"""The generators of every architecture's gauge group, as maps of a state dict in canonical keys.

A state is ``{(kind, layer): tensor}`` in the scanner's vocabulary (:mod:`geodrift.scanner.names`:
``attn_q``, ``attn_q_bias``, ``norm_attn`` (the *effective* gain), ``norm_attn_bias``, ``embed``,
``pos_embed``, ``lm_head``, ``router``, ``expert_up.3``, ...), projections ``(d_out, d_in)``, Q/K rows in
Hugging Face's half-split rotary layout (pair ``p`` of a head: rows ``p`` and ``p + hd/2``).
:mod:`geodrift.scanner.role_state` converts a Hugging Face state dict to and from it.

Every generator named in :data:`geodrift.architectures.GENERATORS` has an :class:`Action` in
:data:`ACTIONS` (:mod:`geodrift.gauge.generator_actions` holds those of the attention heads, the MLPs and
the experts). A continuous one maps ``theta`` (its dimension's worth of numbers; 0 is the identity)
to a group element differentiably, so ``torch.func.jacfwd`` gives its tangent directions at the model
(:mod:`geodrift.prove.jacobian`); every one draws a random element at realistic sizes (log-normal scales
of spread 1, V/O and Q/K maps of condition 30 - a float32 checkpoint keeps about 7 digits and a map of
condition c leaves about c x 1e-7 of rounding in the balanced factors, which the scan's 1e-5 must absorb on
tiny models whose singular values lie close - Haar rotations) for the exactness checks and the
Hypothesis properties. Each returns a new dict; the input is never modified.

Example:
    >>> import torch
    >>> state = {("embed", None): torch.eye(3, dtype=torch.float64), ("norm_final", None): torch.ones(3, dtype=torch.float64),
    ...          ("lm_head", None): torch.ones(2, 3, dtype=torch.float64)}
    >>> lay = Layout("llama", {"L": 0, "d": 3, "H": 1, "Hkv": 1, "hd": 2})
    >>> moved = RESIDUAL_ACTIONS["fold"].apply(state, lay, torch.zeros(3, dtype=torch.float64))
    >>> bool(torch.equal(moved[("lm_head", None)], state[("lm_head", None)]))
    True
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from geodrift.architectures import ARCHITECTURES, dimension

Key = tuple[str, int | None]
State = dict[Key, torch.Tensor]
# What reads each norm (base roles; experts "expert_up.3" read as "expert_up").
READS: dict[str, tuple[str, ...]] = {
    "norm_attn": ("attn_q", "attn_k", "attn_v"),
    "norm_mlp": ("mlp_gate", "mlp_up", "router", "expert_gate", "expert_up", "shared_gate", "shared_up",
                 "shared_router"),
    "norm_final": ("lm_head",),
}
WRITES: dict[str, tuple[str, ...]] = {"norm_attn_post": ("attn_o",),
                                      "norm_mlp_post": ("mlp_down", "expert_down", "shared_down")}
READER_ROLES = tuple(r for readers in READS.values() for r in readers if r != "lm_head")
WRITER_ROLES = tuple(w for writers in WRITES.values() for w in writers)


def base(kind: str) -> str:
    """``expert_up.3`` -> ``expert_up``."""
    return kind.split(".", 1)[0]


@dataclass
class Layout:
    """Where things are in a state of one architecture: its registry row and sizes (``L``, ``d``, ``H``, ...)."""

    architecture: str
    sizes: dict[str, int]

    @property
    def row(self) -> Any:
        """The registry row."""
        return ARCHITECTURES[self.architecture]

    @property
    def group(self) -> int:
        """Query heads per KV head."""
        return self.sizes["H"] // self.sizes["Hkv"]

    def size(self, generator: str) -> int:
        """A continuous generator's dimension here (the registry's formula)."""
        return dimension(self.row.group[generator], self.sizes)

    def pre_norms(self, state: State) -> list[Key]:
        """The norms read by projections, in order: per layer the row's pre-norms, then the final norm."""
        keys = [(kind, layer) for layer in range(self.sizes["L"]) for kind in self.row.pre_norms]
        return [k for k in keys if k in state] + [("norm_final", None)]

    def readers(self, state: State, norm: Key) -> list[Key]:
        """The projections reading ``norm`` (weights only)."""
        kinds = READS[norm[0]]
        return [k for k in state if k[1] == norm[1] and base(k[0]) in kinds]

    def writers(self, state: State, layer: int | None = None) -> list[Key]:
        """The projections writing the stream (of ``layer``, or every layer)."""
        return [k for k in state if base(k[0]) in WRITER_ROLES and (layer is None or k[1] == layer)]

    def post_norm(self, writer: Key) -> Key | None:
        """The post-norm a writer's output passes through (None: written as it is)."""
        for norm, writers in WRITES.items():
            if base(writer[0]) in writers and norm in self.row.post_norms:
                return (norm, writer[1])
        return None

    def raw_readers(self, state: State) -> list[Key]:
        """The projections reading the raw stream (no pre-norm: a post-norm-only architecture's blocks)."""
        read = {r for norm in self.row.pre_norms for r in READS[norm]}
        return [k for k in state if base(k[0]) in READER_ROLES and base(k[0]) not in read]

    def head_rows(self, head: int) -> slice:
        """Rows of one head in Q (a query head) or K/V (a KV head)."""
        hd = self.sizes["hd"]
        return slice(head * hd, (head + 1) * hd)

    def pair_rows(self, head: int, pair: int) -> list[int]:
        """The two rows of RoPE pair ``pair`` of ``head`` (half-split layout)."""
        hd = self.sizes["hd"]
        return [head * hd + pair, head * hd + pair + hd // 2]


def with_bias(state: State, key: Key) -> list[Key]:
    """``key`` and its bias where the state has one."""
    bias = (key[0] + "_bias", key[1])
    return [key, bias] if bias in state else [key]


def map_rows(state: State, out: State, key: Key, rows: list[int] | slice, matrix: torch.Tensor) -> None:
    """``out[key][rows] = matrix @ state[key][rows]`` (and the bias's), without writing into ``state``."""
    for k in with_bias(state, key):
        value = out.get(k, state[k])
        idx = torch.arange(value.shape[0])[rows] if isinstance(rows, slice) else torch.tensor(rows)
        moved = matrix.to(value.dtype) @ value[idx]
        out[k] = value.index_copy(0, idx, moved)


def map_cols(state: State, out: State, key: Key, cols: slice, matrix: torch.Tensor) -> None:
    """``out[key][:, cols] = state[key][:, cols] @ matrix``."""
    value = out.get(key, state[key])
    idx = torch.arange(value.shape[1])[cols]
    out[key] = value.index_copy(1, idx, value[:, idx] @ matrix.to(value.dtype))


def skew(theta: torch.Tensor, n: int) -> torch.Tensor:
    """The ``n x n`` skew-symmetric matrix with ``theta`` (``n(n-1)/2``) above the diagonal."""
    upper = torch.zeros(n, n, dtype=theta.dtype)
    rows, cols = torch.triu_indices(n, n, 1)
    upper = upper.index_put((rows, cols), theta)
    return upper - upper.T


def ones_complement(d: int, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """An orthonormal ``(d, d-1)`` basis of the complement of ``1`` (Helmert's)."""
    q, _ = torch.linalg.qr(torch.cat([torch.ones(d, 1, dtype=dtype), torch.eye(d, dtype=dtype)[:, : d - 1]], 1))
    return q[:, 1:]


def random_orthogonal(n: int, generator: torch.Generator) -> torch.Tensor:
    """Haar-random ``O(n)`` (float64)."""
    q, r = torch.linalg.qr(torch.randn(n, n, generator=generator, dtype=torch.float64))
    return q * torch.sign(torch.diagonal(r)).reshape(1, -1)


def random_conditioned(n: int, generator: torch.Generator, condition: float = 30.0) -> torch.Tensor:
    """``U diag(s) V^T`` with log-spaced singular values from 1 to ``condition`` (a V/O or Q/K map)."""
    s = torch.logspace(0.0, math.log10(condition), n, dtype=torch.float64) if n > 1 else torch.ones(1, dtype=torch.float64)
    s = s / s.log().mean().exp()  # determinant 1: the scale is another generator's
    return random_orthogonal(n, generator) @ torch.diag(s) @ random_orthogonal(n, generator).T


def log_normal(n: int, generator: torch.Generator, sigma: float = 1.0) -> torch.Tensor:
    """``exp(N(0, sigma^2))``, ``n`` of them (float64)."""
    return (torch.randn(n, generator=generator, dtype=torch.float64) * sigma).exp()


def signs(n: int, generator: torch.Generator) -> torch.Tensor:
    """Random ``+-1`` (at least one ``-1``)."""
    out = torch.where(torch.rand(n, generator=generator) < 0.5, -1.0, 1.0).double()
    out[int(torch.randint(n, (1,), generator=generator))] = -1.0
    return out


@dataclass(frozen=True)
class Action:
    """A generator as a map of states.

    ``element(layout, theta)``: the group element of ``theta`` (continuous only; 0 -> identity);
    ``random(state, layout, generator)``: a random element at realistic sizes; ``act(state, layout, element)``.
    """

    act: Callable[[State, Layout, Any], State]
    random: Callable[[State, Layout, torch.Generator], Any]
    element: Callable[[Layout, torch.Tensor], Any] | None = None

    def apply(self, state: State, layout: Layout, theta: torch.Tensor) -> State:
        """The continuous element of ``theta`` applied (differentiable in ``theta``)."""
        assert self.element is not None, "a discrete generator has no theta"
        return self.act(state, layout, self.element(layout, theta))

    def draw(self, state: State, layout: Layout, generator: torch.Generator) -> State:
        """A random element applied."""
        return self.act(state, layout, self.random(state, layout, generator))


# ---- residual stream ------------------------------------------------------------------------------------
def _scale_gains(state: State, layout: Layout, scales: list[torch.Tensor]) -> State:
    # fold: each pre-norm's gain (and LayerNorm bias) times s, its readers' columns divided by s
    out = dict(state)
    for norm, s in zip(layout.pre_norms(state), scales, strict=True):
        out[norm] = state[norm] * s
        if (norm[0] + "_bias", norm[1]) in state:
            out[(norm[0] + "_bias", norm[1])] = state[(norm[0] + "_bias", norm[1])] * s
        for reader in layout.readers(state, norm):
            out[reader] = state[reader] / s.reshape(1, -1)
    return out


def _fold_element(layout: Layout, theta: torch.Tensor) -> list[torch.Tensor]:
    return list(theta.exp().split(layout.sizes["d"]))


def _fold_random(state: State, layout: Layout, generator: torch.Generator) -> list[torch.Tensor]:
    return [log_normal(layout.sizes["d"], generator) for _ in layout.pre_norms(state)]


def _sign_random(state: State, layout: Layout, generator: torch.Generator) -> list[torch.Tensor]:
    return [signs(layout.sizes["d"], generator) for _ in layout.pre_norms(state)]


def map_stream(state: State, layout: Layout, m: torch.Tensor, gain_perm: torch.Tensor | None = None) -> State:
    """``h -> M h`` for an orthogonal ``M``: readers of a pre-norm ``W diag(g) M^T diag(g)^-1``, raw readers
    ``W M^T``, writers (and their biases) ``M W``, embeddings ``E M^T``, LayerNorm biases ``g * M(b / g)``;
    with ``gain_perm`` (``M`` a signed permutation) every gain is permuted instead (sandwich norms)."""
    out = dict(state)
    m = m.to(next(iter(state.values())).dtype)
    for key in (("embed", None), ("pos_embed", None)):
        if key in state:
            out[key] = state[key] @ m.T
    for norm in layout.pre_norms(state):
        g = state[norm]
        if gain_perm is not None:
            out[norm] = g[gain_perm]
            for reader in layout.readers(state, norm):
                out[reader] = state[reader] @ m.T
            continue
        for reader in layout.readers(state, norm):
            out[reader] = (state[reader] * g.reshape(1, -1)) @ m.T / g.reshape(1, -1)
        bias = (norm[0] + "_bias", norm[1])
        if bias in state:
            out[bias] = g * (m @ (state[bias] / g))
    for reader in layout.raw_readers(state):
        out[reader] = state[reader] @ m.T
    for writer in layout.writers(state):
        post = layout.post_norm(writer)
        out[writer] = m @ state[writer]
        if (writer[0] + "_bias", writer[1]) in state:
            out[(writer[0] + "_bias", writer[1])] = m @ state[(writer[0] + "_bias", writer[1])]
        if post is not None and gain_perm is not None:
            out[post] = state[post][gain_perm]
    return out


def _rotation(layout: Layout, theta: torch.Tensor) -> torch.Tensor:
    return torch.linalg.matrix_exp(skew(theta, layout.sizes["d"]))


def _rotation_fixing_ones(layout: Layout, theta: torch.Tensor) -> torch.Tensor:
    d = layout.sizes["d"]
    q = ones_complement(d, theta.dtype)
    return q @ torch.linalg.matrix_exp(skew(theta, d - 1)) @ q.T + torch.ones(d, d, dtype=theta.dtype) / d


def _haar_fixing_ones(layout: Layout, generator: torch.Generator) -> torch.Tensor:
    d = layout.sizes["d"]
    q = ones_complement(d)
    inner = random_orthogonal(d - 1, generator)
    if torch.linalg.det(inner) < 0:
        inner[:, 0] = -inner[:, 0]
    return q @ inner @ q.T + torch.ones(d, d, dtype=torch.float64) / d


def _reflection(state: State, layout: Layout, generator: torch.Generator) -> torch.Tensor:
    u = torch.randn(layout.sizes["d"], 1, generator=generator, dtype=torch.float64)
    u = u / u.norm()
    return torch.eye(layout.sizes["d"], dtype=torch.float64) - 2 * u @ u.T


def _signed_permutation(state: State, layout: Layout, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    d = layout.sizes["d"]
    perm = torch.randperm(d, generator=generator)
    return torch.diag(signs(d, generator)) @ torch.eye(d, dtype=torch.float64)[perm], perm


def _stream_scale(state: State, layout: Layout, c: torch.Tensor) -> State:
    out = dict(state)
    for key in (("embed", None), ("pos_embed", None)):
        if key in state:
            out[key] = state[key] * c
    for writer in layout.writers(state):
        post = layout.post_norm(writer)
        if post is not None:
            out[post] = state[post] * c
            continue
        out[writer] = state[writer] * c
        if (writer[0] + "_bias", writer[1]) in state:
            out[(writer[0] + "_bias", writer[1])] = state[(writer[0] + "_bias", writer[1])] * c
    for reader in layout.raw_readers(state):
        out[reader] = state[reader] / c
    return out


def _post_scale(state: State, layout: Layout, scales: torch.Tensor) -> State:
    out = dict(state)
    keys = [w for layer in range(layout.sizes["L"]) for w in layout.writers(state, layer)
            if base(w[0]) in ("attn_o", "mlp_down")]
    for key, c in zip(keys, scales, strict=True):
        out[key] = state[key] * c
    return out


def _post_gain_sign(state: State, layout: Layout, flips: dict[Key, torch.Tensor]) -> State:
    out = dict(state)
    for writer in layout.writers(state):
        post = layout.post_norm(writer)
        if post is None:
            continue
        s = flips[post]
        out[post] = state[post] * s
        out[writer] = state[writer] * s.reshape(-1, 1)
    return out


def _post_flips(state: State, layout: Layout, generator: torch.Generator) -> dict[Key, torch.Tensor]:
    posts = {layout.post_norm(w) for w in layout.writers(state)} - {None}
    return {p: signs(layout.sizes["d"], generator) for p in sorted(posts, key=str) if p is not None}


def _one(layout: Layout, theta: torch.Tensor) -> torch.Tensor:
    return theta.exp()[0]


RESIDUAL_ACTIONS: dict[str, Action] = {
    "fold": Action(_scale_gains, _fold_random, _fold_element),
    "gain_sign": Action(_scale_gains, _sign_random),
    "rotate": Action(lambda s, lay, m: map_stream(s, lay, m), lambda s, lay, g: random_orthogonal(lay.sizes["d"], g),
                     _rotation),
    "reflect": Action(lambda s, lay, m: map_stream(s, lay, m), _reflection),
    "rotate_fixing_ones": Action(lambda s, lay, m: map_stream(s, lay, m), lambda s, lay, g: _haar_fixing_ones(lay, g),
                                 _rotation_fixing_ones),
    "reflect_ones": Action(lambda s, lay, m: map_stream(s, lay, m), lambda s, lay, g: -_haar_fixing_ones(lay, g)),
    "signed_permute": Action(lambda s, lay, mp: map_stream(s, lay, mp[0], mp[1]), _signed_permutation),
    "stream_scale": Action(_stream_scale, lambda s, lay, g: log_normal(1, g)[0], _one),
    "post_scale": Action(_post_scale, lambda s, lay, g: log_normal(2 * lay.sizes["L"], g),
                         lambda lay, theta: theta.exp()),
    "post_gain_sign": Action(_post_gain_sign, _post_flips),
}
