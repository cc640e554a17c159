"""The Jacobian measurement of :mod:`geodrift.prove.jacobian` on the simulators' own models.

- geodrift's Llama (:class:`geodrift.lm.llama.LlamaLM`, default switches): the registry row ``sim_llama``
  (the llama group), its generators acting through the same canonical keys as a transformers Llama's;
- the residual MLP (:class:`geodrift.sim.mlp.ResidualMLP`, ``h -> h + act(W h)``, no norm): the stream's group
  is the activation's commutant acting by conjugation, ``E -> G E``, ``W_l -> G W_l G^-1``, ``H -> H G^-1``:
  positive diagonals for ReLU (dimension ``d``), ``O(d)`` for a radial activation (``d(d-1)/2``), nothing
  continuous for tanh or GELU (signs and permutations, checked as maps).
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable

import torch

from geodrift.lm.llama import LlamaLM
from geodrift.prove.jacobian import (
    SIZES,
    Measurement,
    count_null,
    float64_forward,
    gram_of,
    logits,
    measure_model,
    tangent_jacobian,
)
from geodrift.sim.mlp import ResidualMLP

# The residual MLP's continuous generators per activation: name -> dimension at width d.
MLP_GROUPS: dict[str, dict[str, Callable[[int], int]]] = {
    "relu": {"stream_positive_scale": lambda d: d},
    "radial": {"stream_orthogonal": lambda d: d * (d - 1) // 2},
    "tanh": {},
    "gelu": {},
}
MLP_SIZES = {"in": 16, "classes": 5, "d": 12, "L": 2}


def sim_llama(seed: int = 0) -> Measurement:
    """The ``sim_llama`` row measured on a random :class:`LlamaLM` of :data:`SIZES` (epsilon 0, random gains)."""
    generator = torch.Generator().manual_seed(seed)
    s = SIZES
    model = LlamaLM(s["V"], s["d"], s["L"], s["H"], s["f"], n_kv_heads=s["Hkv"], norm_eps=0.0, init_std=0.3,
                    generator=torch.Generator().manual_seed(int(torch.randint(0, 2**31 - 1, (1,), generator=generator))))
    model = model.double().eval()
    with torch.no_grad():
        for p in model.parameters():
            if p.ndim == 1:
                p.copy_(1 + 0.3 * torch.randn(p.shape, generator=generator, dtype=torch.float64))
    return measure_model(model, "sim_llama", dict(SIZES), generator)


def _conjugate(params: dict[str, torch.Tensor], g: torch.Tensor) -> dict[str, torch.Tensor]:
    inverse = torch.linalg.inv(g)
    return {"embed": g @ params["embed"], "blocks": g @ params["blocks"] @ inverse, "head": params["head"] @ inverse}


def _elements(activation: str, d: int) -> Callable[[torch.Tensor], torch.Tensor]:
    if activation == "relu":
        return lambda theta: torch.diag(theta.exp())
    rows, cols = torch.triu_indices(d, d, 1)

    def rotation(theta: torch.Tensor) -> torch.Tensor:
        upper = torch.zeros(d, d, dtype=theta.dtype).index_put((rows, cols), theta)
        return torch.linalg.matrix_exp(upper - upper.T)
    return rotation


def sim_mlp(activation: str = "relu", seed: int = 0) -> Measurement:
    """The residual MLP with ``activation``: its measured continuous group beside :data:`MLP_GROUPS`'."""
    start = time.perf_counter()
    generator = torch.Generator().manual_seed(seed)
    s = MLP_SIZES
    model = ResidualMLP(s["in"], s["classes"], d_model=s["d"], n_layers=s["L"], activation=activation,
                        init_std=0.3 if activation == "radial" else 0.5,
                        seeds=[int(torch.randint(0, 2**31 - 1, (1,), generator=generator))]).double().eval()
    params = {k: v.detach() for k, v in model.named_parameters()}
    groups = {name: size(s["d"]) for name, size in MLP_GROUPS[activation].items()}
    element = _elements(activation, s["d"])
    tangents = torch.zeros(sum(v.numel() for v in params.values()), 0, dtype=torch.float64)
    if groups:
        tangents = tangent_jacobian(lambda t: torch.cat([v.reshape(-1) for v in _conjugate(params, element(t)).values()]),
                                    torch.zeros(sum(groups.values()), dtype=torch.float64))
    count = sum(v.numel() for v in params.values())
    samples = 3 * count // s["classes"] + 16
    x = torch.randn(1, samples, s["in"], generator=generator, dtype=torch.float64)
    gram, jt, blocks = gram_of(lambda p, x: logits(model, p, x), params, tangents, list(x.split(64, dim=1)))
    out = count_null(f"sim_mlp:{activation}", gram, jt, tangents, samples * s["classes"], {"d": s["d"]}, groups, blocks)
    out.discrete = _discrete_maps(model, params, activation, generator)
    out.seconds = time.perf_counter() - start
    return out


def _discrete_maps(model: ResidualMLP, params: dict[str, torch.Tensor], activation: str,
                   generator: torch.Generator) -> dict[str, float]:
    # the permutation (every activation) and, for tanh, a sign flip: relative logit change (exact: < 1e-9)
    d = params["embed"].shape[1]
    x = torch.randn(1, 16, params["embed"].shape[2], generator=generator, dtype=torch.float64)
    maps = {"stream_permute": torch.eye(d, dtype=torch.float64)[torch.randperm(d, generator=generator)]}
    if activation == "tanh":
        maps["stream_sign"] = torch.diag(torch.where(torch.arange(d) % 2 == 0, -1.0, 1.0)).double()
    before = logits(model, params, x).detach()
    out = {}
    with float64_forward(model):
        for name, g in maps.items():
            work = copy.deepcopy(model)
            work.load_state_dict(_conjugate(params, g))
            out[name] = float((logits(work, dict(work.named_parameters()), x).detach() - before).abs().max()
                              / before.abs().max())
    return out
