"""Which exact gauges act on each weight matrix the scanner reports, read from the one table of architectures.

The table is :data:`geodrift.architectures.ARCHITECTURES` (every generator of every architecture's group,
its dimension, the claim that derives it; ``geodrift prove`` measures the continuous part). This module
answers the per-role questions the scanner and the reports ask of it, and keeps the simulators'
residual-MLP groups (the activation's commutant).

Example:
    >>> role_generators("qwen3", "attn_q")
    ('fold', 'rotate', 'qk_head_scale', 'gain_sign', 'reflect', 'head_permute', 'qk_pair_sign')
    >>> role_generators("olmoe", "attn_q")[:2], unknown_reason("custom")
    (('fold', 'rotate'), 'custom: no gauge group in the table of architectures (geodrift.architectures)')
"""

from __future__ import annotations

from typing import Any

from geodrift.architectures import ARCHITECTURES, GENERATORS, summaries
from geodrift.gauge.status import residual_spaces

SIM_MLP_GROUPS: dict[str, str] = {  # the simulators' residual MLP: the commutant of the activation
    "none": "O(d)", "radial": "O(d)", "radial_rms": "O(d)", "relu": "positive diagonal x permutations",
    "leaky_relu": "positive diagonal x permutations", "abs": "positive diagonal x permutations",
    "tanh": "signed permutations", "gelu": "permutations", "silu": "permutations", "softplus": "permutations",
    "sigmoid": "permutations",
}


def role_generators(architecture: str, role: str) -> tuple[str, ...]:
    """Every generator of ``architecture``'s group that moves a number of ``role`` in the raw view."""
    row = ARCHITECTURES.get(architecture)
    base = role.split(".", 1)[0]
    if row is None or not residual_spaces(base):
        return ()
    out = []
    for name in row.group:
        moves = GENERATORS[name].moves
        if base in moves or any(m in (f"{base}.u", f"{base}.v", f"hidden:{base}") for m in moves) or \
                "residual" in moves:
            out.append(name)
    return tuple(out)


def unknown_reason(architecture: str) -> str:
    """Why an architecture has no gauge group: one line.

    Example:
        >>> unknown_reason("llama")
        ''
    """
    if architecture in ARCHITECTURES:
        return ""
    return f"{architecture}: no gauge group in the table of architectures (geodrift.architectures)"


def sim_mlp_group(activation: str) -> str:
    """The simulators' residual MLP's stream group for an activation name (``geodrift.lm.activations``).

    Example:
        >>> sim_mlp_group("relu")
        'positive diagonal x permutations'
    """
    return SIM_MLP_GROUPS.get(activation, "unknown")


def table() -> dict[str, Any]:
    """The table, JSON-able: every architecture's generators and views, the generators' meanings."""
    return {"architectures": [vars(s) for s in summaries()],
            "generators": {name: vars(g) for name, g in GENERATORS.items()}, "sim_mlp": SIM_MLP_GROUPS}
