"""The numeric side of claim ``dimension``: every architecture's continuous gauge group measured (the Jacobian's
null space, :mod:`geodrift.prove.jacobian`) beside the table's derived dimension, and every generator checked.

It passes when, for every row of :data:`geodrift.architectures.ARCHITECTURES` (and the simulators' residual
MLP with ReLU, tanh and GELU), the measured dimension equals the derived one, the generators' tangents are
independent and in the null space, every map (discrete ones, continuous ones at realistic sizes) keeps the
logits, and the table's generator formulas are the claim's (sympy, ``facts["dimensions"]``).
"""

from __future__ import annotations

from typing import Any

import sympy as sp
import torch

from geodrift.architectures import ARCHITECTURES, GENERATORS
from geodrift.prove import jacobian, jacobian_sim
from geodrift.prove.symmetry import NumericResult
from geodrift.prove.twins import has_transformers

SIM_ACTIVATIONS = ("relu", "tanh", "gelu")


def measured_rows() -> list[str]:
    """The architectures ``geodrift prove`` measures: every row with a transformers probe, then the simulators."""
    return [a for a, row in ARCHITECTURES.items() if row.probe is not None] + ["sim_llama"]


def formula_mismatches(derived: dict[str, str]) -> list[str]:
    """Generators whose table formula (``GENERATORS[g].dimension``) differs from the claim's."""
    return [g for g, formula in derived.items()
            if g in GENERATORS and sp.simplify(sp.sympify(GENERATORS[g].dimension) - sp.sympify(formula)) != 0]


def check_dimension(facts: dict[str, Any], generator: torch.Generator) -> NumericResult:
    """Measure every architecture; pass when each agrees (see the module docstring)."""
    seed = int(torch.randint(0, 2**31 - 1, (1,), generator=generator))
    results: dict[str, dict[str, Any]] = {}
    skipped = []
    for arch in measured_rows():
        if arch == "sim_llama":
            results[arch] = jacobian_sim.sim_llama(seed).to_dict()
        elif has_transformers():
            results[arch] = jacobian.measure(arch, seed).to_dict()
        else:
            skipped.append(arch)
    for activation in SIM_ACTIVATIONS:
        results[f"sim_mlp:{activation}"] = jacobian_sim.sim_mlp(activation, seed).to_dict()
    wrong = formula_mismatches(facts.get("dimensions", {}))
    failed = [a for a, r in results.items() if not r["agrees"]]
    listed = ", ".join(f"{a} {r['measured']}/{r['derived']}" for a, r in results.items())
    summary = (f"Jacobian null space (measured/derived, threshold {jacobian.THRESHOLD:g} x the largest singular value, "
               f"epsilon 0): {listed}" + (f"; DISAGREE: {', '.join(failed)}" if failed else "")
               + (f"; table formulas differ from the claim's: {', '.join(wrong)}" if wrong else "")
               + (f"; not measured (no transformers): {', '.join(skipped)}" if skipped else ""))
    return NumericResult(not failed and not wrong, summary, {"architectures": results, "formula_mismatches": wrong,
                                                              "skipped": skipped, "sizes": jacobian.SIZES})
