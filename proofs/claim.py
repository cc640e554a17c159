"""The declared shape of a claim and of its symbolic derivation.

A claim is data (name, statement, assumptions, method, the name of its numeric cross-check) plus a
``derive`` function that runs the sympy derivation and returns a :class:`Derivation`: a list of
steps, each either decided by sympy (``ok`` True/False) or undecided (``ok`` None). A derivation is
``verified`` only if every step was decided True; an undecided step makes it ``unproven`` (with the
step as the reason), a step decided False makes it ``refuted``. Nothing is ever reported verified
because sympy failed to simplify.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import sympy as sp

Verdict = Literal["verified", "unproven", "refuted"]


@dataclass
class Step:
    """One step of a derivation: Markdown text with inline LaTeX and sympy's decision on it."""

    text: str
    ok: bool | None = True


@dataclass
class Derivation:
    """The outcome of a claim's symbolic derivation.

    Attributes:
        steps: the derivation, in order (Markdown with LaTeX).
        facts: exact results the numeric cross-check compares against (JSON-able: floats, lists,
            dicts), e.g. interval enclosures of witness differences.
    """

    steps: list[Step] = field(default_factory=list)
    facts: dict[str, Any] = field(default_factory=dict)

    def say(self, text: str) -> None:
        """Add an explanatory step that asserts nothing."""
        self.steps.append(Step(text, True))

    def check(self, text: str, ok: bool | None) -> bool | None:
        """Add a step decided by sympy (``ok`` True/False) or left undecided (``None``)."""
        self.steps.append(Step(text, ok))
        return ok

    @property
    def verdict(self) -> Verdict:
        if any(s.ok is False for s in self.steps):
            return "refuted"
        if any(s.ok is None for s in self.steps):
            return "unproven"
        return "verified"

    @property
    def reason(self) -> str:
        """Why the verdict is not ``verified`` (the first failing or undecided step), else ''."""
        for s in self.steps:
            if s.ok is False:
                return f"step decided false: {s.text[:160]}"
        for s in self.steps:
            if s.ok is None:
                return f"sympy could not decide: {s.text[:160]}"
        return ""


@dataclass(frozen=True)
class Claim:
    """A declared symmetry claim.

    Attributes:
        name: short identifier used on the command line (``geodrift prove gauge``).
        title: one-line title.
        statement: the claim as Markdown with LaTeX.
        assumptions: what the statement assumes (regularity, dimension, ...).
        method: how sympy settles it (one line).
        numeric: name of the torch cross-check in ``geodrift.symmetry_numeric.NUMERIC_CHECKS``.
        derive: runs the symbolic derivation.
    """

    name: str
    title: str
    statement: str
    assumptions: tuple[str, ...]
    method: str
    numeric: str
    derive: Callable[[], Derivation]


def is_zero(expr: sp.Expr | sp.MatrixBase | sp.MatrixExpr, *, trig: bool = False) -> bool | None:
    """Decide ``expr == 0`` (scalar, explicit matrix or matrix expression): True, or None if undecided.

    Never returns False on a failed simplification: a nonzero claim needs a certified witness
    (see :mod:`geodrift.proofs.interval`).

    Example:
        >>> x = sp.Symbol("x"); is_zero(sp.sin(x)**2 + sp.cos(x)**2 - 1, trig=True)
        True
    """
    if isinstance(expr, sp.MatrixBase):
        results = [is_zero(e, trig=trig) for e in expr]
        return True if all(r is True for r in results) else None
    if isinstance(expr, sp.MatrixExpr):
        done = sp.expand(expr).doit()
        if isinstance(done, sp.ZeroMatrix) or done == 0:
            return True
        if isinstance(done, sp.MatMul) and done.args and done.args[0] == 0:
            return True
        return None
    simplified = sp.expand(expr)
    if simplified != 0:
        simplified = sp.trigsimp(simplified) if trig else sp.simplify(simplified)
    return True if simplified == 0 else None


def tex(expr: Any) -> str:
    """Inline LaTeX for a sympy object."""
    return f"${sp.latex(expr)}$"
