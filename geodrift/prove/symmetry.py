"""Numeric cross-checks (torch) of the symbolic symmetry claims in geodrift.proofs.

The same statements the proofs settle symbolically, computed on random inputs in float64:
activations (element-wise and radial), random orthogonal matrices (QR with sign fix, or matrix_exp
of a skew matrix), equivariance errors, the witness values, and the commutant table. The gauge and
Noether checks, on the simulator's own models, live in geodrift.prove.gauge.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from geodrift.lm.activations import get_activation

Act = Callable[[torch.Tensor], torch.Tensor]

# The element-wise activations the proofs name (``geodrift.proofs.activations``), resolved by the
# simulators' own registry, so the numeric checks test the functions that train.
ELEMENTWISE: dict[str, Act] = {name: get_activation(name) for name in
                               ("relu", "leaky_relu", "gelu", "silu", "tanh", "softplus", "sigmoid", "abs")}
EQUIVARIANT: dict[str, Act] = {"linear": get_activation("none"), "radial_tanh": get_activation("radial"),
                               "radial_tanh_rms": get_activation("radial_rms")}


@dataclass
class NumericResult:
    """Outcome of a numeric cross-check: whether it agrees with the symbolic claim, and the numbers."""

    passed: bool
    summary: str
    metrics: dict[str, Any] = field(default_factory=dict)


def orthogonal_qr(d: int, generator: torch.Generator, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """Haar-random orthogonal (d, d) matrix: QR of a Gaussian matrix with the sign of diag(R) fixed.

    Example:
        >>> q = orthogonal_qr(4, torch.Generator().manual_seed(0)); torch.allclose(q.T @ q, torch.eye(4, dtype=q.dtype))
        True
    """
    z = torch.randn(d, d, generator=generator, dtype=dtype)
    q, r = torch.linalg.qr(z)
    return q * torch.sign(torch.diagonal(r)).unsqueeze(0)


def rotation_expm(d: int, generator: torch.Generator, scale: float = 1.0, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """A rotation in SO(d): matrix_exp of a random skew matrix ``scale * (Z - Z^T) / 2``."""
    z = torch.randn(d, d, generator=generator, dtype=dtype) * scale
    return torch.linalg.matrix_exp((z - z.T) / 2)


def equivariance_error(act: Act, x: torch.Tensor, r: torch.Tensor) -> float:
    """max |act(R x) - R act(x)| for a batch x: (B, d) and R: (d, d)."""
    return float((act(x @ r.T) - act(x) @ r.T).abs().max())


def witness_tensors(d: int = 2) -> tuple[torch.Tensor, torch.Tensor]:
    """The symbolic witness (3-4-5 rotation, x* = (1, -1)) embedded in d >= 2 dimensions (float64)."""
    r = torch.eye(d, dtype=torch.float64)
    r[:2, :2] = torch.tensor([[0.6, -0.8], [0.8, 0.6]], dtype=torch.float64)
    x = torch.zeros(d, dtype=torch.float64)
    x[:2] = torch.tensor([1.0, -1.0], dtype=torch.float64)
    return x, r


def infinitesimal_defect(act: Act, x: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
    """D_A(x) = J_act(x) A x - A act(x), with the Jacobian-vector product from autograd. x: (d,).

    Reverse mode (``torch.autograd.functional.jvp``, the double-backward trick): forward mode (``torch.func.jvp``)
    loads torch's forward-AD decompositions, which call the deprecated ``torch.jit.script``.
    """
    _, product = torch.autograd.functional.jvp(act, x, a @ x)
    return product - a @ act(x)


def _inside(value: float, box: list[float], tol: float = 1e-12) -> bool:
    return box[0] - tol <= value <= box[1] + tol


def check_equivariance(facts: dict[str, Any], generator: torch.Generator, trials: int = 20) -> NumericResult:
    """Linear and radial activations: equivariance error ~ machine precision for random d, x, R."""
    worst = {name: 0.0 for name in EQUIVARIANT}
    for i in range(trials):
        d = int(torch.randint(2, 33, (1,), generator=generator))
        r = orthogonal_qr(d, generator) if i % 2 == 0 else rotation_expm(d, generator, scale=2.0)
        x = torch.randn(16, d, generator=generator, dtype=torch.float64) * 3
        for name, act in EQUIVARIANT.items():
            worst[name] = max(worst[name], equivariance_error(act, x, r))
    passed = all(v < 1e-10 for v in worst.values())
    return NumericResult(passed, "max |s(Rx)-Rs(x)|: " + ", ".join(f"{k} {v:.1e}" for k, v in worst.items()), worst)


def check_breaking(facts: dict[str, Any], generator: torch.Generator, trials: int = 10) -> NumericResult:
    """Witness values inside the symbolic enclosures; element-wise errors large on random R, x."""
    x, r = witness_tensors()
    a = torch.tensor([[0.0, -1.0], [1.0, 0.0]], dtype=torch.float64)
    inside, random_err = True, {}
    for name, act in ELEMENTWISE.items():
        fin = act(r @ x) - r @ act(x)
        dfc = infinitesimal_defect(act, x, a)
        boxes = facts["witness"][name]
        inside = inside and all(_inside(float(v), b) for v, b in zip(fin, boxes["finite"], strict=False))
        inside = inside and all(_inside(float(v), b, 1e-9) for v, b in zip(dfc, boxes["defect"], strict=False))
        errs = []
        for _ in range(trials):
            d = int(torch.randint(2, 17, (1,), generator=generator))
            xs = torch.randn(8, d, generator=generator, dtype=torch.float64) * 2
            errs.append(equivariance_error(act, xs, orthogonal_qr(d, generator)))
        random_err[name] = min(errs)
    passed = inside and all(v > 1e-3 for v in random_err.values())
    summary = (f"witness values inside enclosures: {inside}; min over random (x,R) of max error: "
               f"{min(random_err.values()):.2e}")
    return NumericResult(passed, summary, {"inside": inside, "random_err": random_err})


def check_commutants(facts: dict[str, Any], generator: torch.Generator) -> NumericResult:
    """Predicted table (permutation / sign flip / positive rescaling) vs torch on random inputs."""
    table = facts["table"]
    d, disagreements = 6, []
    x = torch.randn(32, d, generator=generator, dtype=torch.float64) * 2
    w1 = torch.randn(d, d, generator=generator, dtype=torch.float64)
    w2 = torch.randn(d, d, generator=generator, dtype=torch.float64)
    perm = torch.eye(d, dtype=torch.float64)[torch.randperm(d, generator=generator)]
    sign = torch.diag(torch.where(torch.rand(d, generator=generator) < 0.5, -1.0, 1.0).double())
    sign[0, 0] = -1.0
    lam = torch.diag(torch.rand(d, generator=generator, dtype=torch.float64) * 3 + 0.2)
    for name, act in ELEMENTWISE.items():
        base = act(x @ w1.T) @ w2.T
        holds = {
            "permutation": equivariance_error(act, x, perm) < 1e-12,
            "sign_flip": equivariance_error(act, x, sign) < 1e-12,
            "pos_rescale": float((act(x @ w1.T @ lam) @ torch.linalg.inv(lam) @ w2.T - base).abs().max()) < 1e-10,
        }
        for key, val in holds.items():
            if table[name][key] is not val:
                disagreements.append(f"{name}.{key}")
    passed = not disagreements
    return NumericResult(passed, "torch agrees with the table" if passed else f"disagree: {disagreements}",
                         {"disagreements": disagreements})
