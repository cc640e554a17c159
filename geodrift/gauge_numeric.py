"""Numeric cross-checks of the gauge and Noether claims on a minimal residual MLP (torch, float64).

``ResidualMLP`` is a stand-in for the simulator's model (geodrift/sim/, written separately): an
embedding E (d, n_in), L blocks ``h + act(W h)`` (block "A") or ``h + U act(W h)`` (block "B"),
a head H (n_out, d), no biases. The checks should switch to the simulator's model class once it lands.
"""

from __future__ import annotations

from typing import Any

import torch

from geodrift.symmetry_numeric import ELEMENTWISE, EQUIVARIANT, Act, NumericResult, orthogonal_qr

ACTS: dict[str, Act] = {**EQUIVARIANT, **ELEMENTWISE}


class ResidualMLP(torch.nn.Module):
    """Minimal bias-free residual MLP. x: (B, n_in) -> (B, n_out)."""

    def __init__(self, n_in: int, d: int, n_out: int, layers: int, act: str, block: str,
                 generator: torch.Generator, scale: float = 0.3) -> None:
        super().__init__()
        g = lambda *s: torch.nn.Parameter(torch.randn(*s, generator=generator, dtype=torch.float64) * scale)  # noqa: E731
        self.act, self.block = ACTS[act], block
        self.E = g(d, n_in)
        self.W = torch.nn.ParameterList([g(d, d) for _ in range(layers)])
        self.U = torch.nn.ParameterList([g(d, d) for _ in range(layers)] if block == "B" else [])
        self.H = g(n_out, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x @ self.E.T
        for i, w in enumerate(self.W):
            branch = self.act(h @ w.T)
            h = h + (branch @ self.U[i].T if self.block == "B" else branch)
        return h @ self.H.T

    @torch.no_grad()
    def gauge_(self, r: torch.Tensor) -> None:
        """In place: E -> R E, W, U -> R W R^T, H -> H R^T."""
        self.E.copy_(r @ self.E)
        for p in [*self.W, *self.U]:
            p.copy_(r @ p @ r.T)
        self.H.copy_(self.H @ r.T)

    def charges(self) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """Q = E E^T + sum (W W^T - W^T W) - H^T H (block A), and the parameter list (E, W.., H)."""
        q = self.E @ self.E.T - self.H.T @ self.H
        for w in self.W:
            q = q + w @ w.T - w.T @ w
        return q.detach(), [self.E, *self.W, self.H]


def orbit_momentum(params: list[torch.Tensor], deltas: list[torch.Tensor]) -> torch.Tensor:
    """Skew part of P = E dE^T + sum (W dW^T - dW^T W) - dH^T H for an update (dE, dW.., dH): (d, d)."""
    e, *ws, h = params
    de, *dws, dh = deltas
    p = e @ de.T - dh.T @ h
    for w, dw in zip(ws, dws, strict=False):
        p = p + w @ dw.T - dw.T @ w
    return (p - p.T) / 2


def check_gauge(facts: dict[str, Any], generator: torch.Generator) -> NumericResult:
    """Output change under a random gauge: ~0 for linear/radial, large for element-wise (blocks A, B)."""
    x = torch.randn(64, 5, generator=generator, dtype=torch.float64)
    change: dict[str, float] = {}
    for block in ("A", "B"):
        for name in ACTS:
            net = ResidualMLP(5, 8, 3, 4, name, block, generator, scale=0.5)
            y = net(x).detach()
            net.gauge_(orthogonal_qr(8, generator))
            change[f"{block}:{name}"] = float((net(x).detach() - y).abs().max() / y.abs().max())
    ok = all((v < 1e-10) == (k.split(":")[1] in EQUIVARIANT) for k, v in change.items())
    worst_eq = max(v for k, v in change.items() if k.split(":")[1] in EQUIVARIANT)
    least_el = min(v for k, v in change.items() if k.split(":")[1] not in EQUIVARIANT)
    return NumericResult(ok, f"relative output change: equivariant <= {worst_eq:.1e}, element-wise >= {least_el:.1e}",
                         change)


def train_trace(act: str, optimizer: str, lr: float, steps: int, seed: int) -> dict[str, float]:
    """Train a block-A ResidualMLP on a fixed random regression task; report Q drift and orbit momentum.

    Returns:
        ``q_drift``: |Q_T - Q_0|_F / |Q_0|_F; ``momentum``: max over steps of |skew P|_F / (|theta|_F |dtheta|_F).
    """
    gen = torch.Generator().manual_seed(seed)
    net = ResidualMLP(4, 6, 3, 3, act, "A", gen, scale=0.4)
    x = torch.randn(64, 4, generator=gen, dtype=torch.float64)
    y = torch.randn(64, 3, generator=gen, dtype=torch.float64)
    q0, params = net.charges()
    opt = torch.optim.SGD(params, lr=lr) if optimizer == "gd" else torch.optim.Adam(params, lr=lr)
    mom = 0.0
    for _ in range(steps):
        before = [p.detach().clone() for p in params]
        opt.zero_grad()
        torch.nn.functional.mse_loss(net(x), y).backward()
        opt.step()
        deltas = [p.detach() - b for p, b in zip(params, before, strict=False)]
        norm = torch.sqrt(torch.stack([(b**2).sum() for b in before]).sum()) * torch.sqrt(
            torch.stack([(dd**2).sum() for dd in deltas]).sum())
        mom = max(mom, float(torch.linalg.matrix_norm(orbit_momentum(before, deltas)) / norm))
    q1, _ = net.charges()
    return {"q_drift": float(torch.linalg.matrix_norm(q1 - q0) / torch.linalg.matrix_norm(q0)), "momentum": mom}


def check_noether(facts: dict[str, Any], generator: torch.Generator) -> NumericResult:
    """GD (small step) keeps Q (linear net) and has zero orbit momentum; Adam breaks both.

    Also checks the GD drift of Q halves when the step halves at fixed training time (O(lr) error
    of the Euler discretisation of a conserved flow), and reports the radial net for contrast.
    """
    seed = int(torch.randint(0, 2**31 - 1, (1,), generator=generator))
    gd = train_trace("linear", "gd", 2e-3, 200, seed)
    gd_half = train_trace("linear", "gd", 1e-3, 400, seed)
    adam = train_trace("linear", "adam", 2e-3, 200, seed)
    gd_rad = train_trace("radial_tanh", "gd", 2e-3, 200, seed)
    adam_rad = train_trace("radial_tanh", "adam", 2e-3, 200, seed)
    ratio = gd["q_drift"] / max(gd_half["q_drift"], 1e-300)
    ok = (gd["momentum"] < 1e-12 and gd_rad["momentum"] < 1e-12 and adam["momentum"] > 1e-6
          and adam_rad["momentum"] > 1e-6 and adam["q_drift"] > 10 * gd["q_drift"] and 1.6 < ratio < 2.5)
    summary = (f"linear: Q drift GD {gd['q_drift']:.1e} (halved step {gd_half['q_drift']:.1e}) vs Adam "
               f"{adam['q_drift']:.1e}; orbit momentum GD {gd['momentum']:.0e}/{gd_rad['momentum']:.0e} "
               f"(lin/rad) vs Adam {adam['momentum']:.1e}/{adam_rad['momentum']:.1e}")
    return NumericResult(ok, summary, {"gd": gd, "gd_half_step": gd_half, "adam": adam, "gd_radial": gd_rad,
                                       "adam_radial": adam_rad, "drift_ratio": ratio})
