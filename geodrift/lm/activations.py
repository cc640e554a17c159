"""The one activation registry, used by both simulators and the numeric proofs: names -> functions.

Named activations (:data:`ACTIVATIONS`): the identity ``none``, the element-wise ``relu``, ``gelu``
(exact erf form), ``silu`` and ``tanh``, and the rotation-equivariant radial forms (the paper's
ablations). Any other name is looked up in ``torch.nn.functional`` then ``torch`` and accepted only
if it is element-wise (checked on a probe input). A simulator may restrict the names it accepts:
the Llama's MLP takes :data:`LLAMA_MLP_ACTIVATIONS`, its V projection :data:`LLAMA_V_ACTIVATIONS`.

Importing this module does not import torch (the run specs in ``geodrift.sim.config`` check names
with it and stay light); torch is imported when a function is resolved.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING

from geodrift.errors import GeodriftError

if TYPE_CHECKING:
    import torch

Activation = Callable[["torch.Tensor"], "torch.Tensor"]


def identity(x: torch.Tensor) -> torch.Tensor:
    """The linear activation (``none``): returns ``x`` itself.

    Example:
        >>> import torch
        >>> identity(torch.tensor([-1.0, 2.0]))
        tensor([-1.,  2.])
    """
    return x


def radial(x: torch.Tensor) -> torch.Tensor:
    """Rotation-equivariant activation ``x * tanh(||x||)``, norm over the last (feature) dim (the paper's).

    Args:
        x: ``(..., d)``.

    Returns:
        ``(..., d)``.

    Example:
        >>> import torch
        >>> radial(torch.tensor([[3.0, 4.0]]))  # ||x|| = 5, tanh(5) = 0.99991
        tensor([[2.9997, 3.9996]])
    """
    return x * x.norm(dim=-1, keepdim=True).tanh()


def radial_rms(x: torch.Tensor) -> torch.Tensor:
    """Rotation-equivariant activation ``x * tanh(||x|| / sqrt(d))``: the paper's radial form on the
    root-mean-square of the features, so that it is not the identity at width d.

    At d = 256 the paper's ``tanh(||x||)`` is 1 to float32 precision for every pre-activation of the
    MLP (norms 6-48 at initialisation), which makes ``radial`` the identity there; the features' rms
    is 0.38-3.0 at initialisation (median per layer, seed 42, MNIST subset), where ``tanh`` bends.

    Args:
        x: ``(..., d)``.

    Returns:
        ``(..., d)``.

    Example:
        >>> import torch
        >>> radial_rms(torch.tensor([[3.0, 4.0]]))  # ||x|| / sqrt(2) = 3.54, tanh = 0.99831
        tensor([[2.9949, 3.9932]])
    """
    return x * (x.norm(dim=-1, keepdim=True) / math.sqrt(x.shape[-1])).tanh()


# The named activations; relu, gelu, silu and tanh resolve to torch's own functions.
NAMED: tuple[str, ...] = ("relu", "gelu", "silu", "tanh", "none", "radial", "radial_rms")
# Rotation-equivariant (act(R x) = R act(x) for every orthogonal R): the gauge symmetry survives them.
EQUIVARIANT: tuple[str, ...] = ("none", "radial", "radial_rms")
# What the Llama accepts on Gate's output (SwiGLU's slot) and on V's output (test (b)).
LLAMA_MLP_ACTIVATIONS: tuple[str, ...] = ("silu", "relu", "gelu", "none", "radial", "radial_rms")
LLAMA_V_ACTIVATIONS: tuple[str, ...] = ("none", "radial", "radial_rms", "silu", "relu", "gelu", "tanh")


def get_activation(name: str, choices: tuple[str, ...] | None = None, option: str = "activation") -> Activation:
    """Resolve an activation by name.

    ``none`` is the identity, ``radial`` is ``x * tanh(||x||)`` and ``radial_rms`` is
    ``x * tanh(||x|| / sqrt(d))``; ``relu``, ``gelu``, ``silu`` and ``tanh`` are torch's; other names
    are looked up in ``torch.nn.functional`` then ``torch`` and must be element-wise (checked on a
    probe input).

    Args:
        name: the activation's name.
        choices: when given, the only names accepted (e.g. :data:`LLAMA_MLP_ACTIVATIONS`).
        option: what the error message calls the value (``activation``, ``v_activation``).

    Returns:
        A function ``(..., d) -> (..., d)``.

    Raises:
        GeodriftError: for a name outside ``choices``, an unknown or a non-element-wise function.

    Example:
        >>> import torch
        >>> get_activation("relu")(torch.tensor([-1.0, 2.0]))
        tensor([0., 2.])
        >>> get_activation("elu", LLAMA_MLP_ACTIVATIONS)
        Traceback (most recent call last):
        geodrift.errors.GeodriftError: activation: unknown value 'elu'; choose one of silu, relu, gelu, none, radial, radial_rms
    """
    if choices is not None and name not in choices:
        raise GeodriftError(f"{option}: unknown value {name!r}; choose one of {', '.join(choices)}")
    import torch
    import torch.nn.functional as F

    named: dict[str, Activation] = dict(zip(NAMED, (F.relu, F.gelu, F.silu, torch.tanh, identity, radial, radial_rms),
                                            strict=True))
    if name in named:
        return named[name]
    fn = getattr(F, name, None) or getattr(torch, name, None)
    if not callable(fn):
        raise GeodriftError(f"{option} {name!r}: not found in torch.nn.functional or torch; "
                            f"use {', '.join(NAMED)} or an element-wise torch function")
    probe = torch.linspace(-2.0, 2.0, 16).reshape(2, 8)
    other = probe.clone()
    other[:, 1:] = torch.flip(probe[:, 1:], dims=[1]) * 3.0
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            a, b = fn(probe), fn(other)
        elementwise = a.shape == probe.shape and torch.equal(a[:, 0], b[:, 0])
    except Exception:  # any failure means it is not a plain tensor -> tensor function
        elementwise = False
    if not elementwise:
        raise GeodriftError(f"{option} {name!r} is not element-wise (output[i] must depend on input[i] "
                            f"only); use {', '.join(NAMED)} or another element-wise function")
    return fn  # type: ignore[no-any-return]
