"""The declared shape of a claim and of its symbolic derivation.

A claim is data (name, statement, premises, method, the name of its numeric cross-check) plus a
``derive`` function that runs the sympy derivation and returns a :class:`Derivation`. The premises
are sympy predicates (``Q.orthogonal(R)``, ``Q.integer(d) & (d >= 2)``, ...): the derivation uses
them through ``sympy.refine`` / ``sympy.ask`` under ``sympy.assuming`` (or, where sympy has no
predicate for a premise, as an explicit substitution rule, and says so), and the report prints them
with ``sympy.latex``. A derivation is a list of
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
from sympy.assumptions.assume import Predicate
from sympy.multipledispatch import Dispatcher

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
class Assumption:
    """One premise of a claim, held as a sympy predicate or boolean expression.

    Attributes:
        predicate: what is assumed, e.g. ``Q.orthogonal(R)``, ``Q.integer(d) & (d >= 2)``,
            ``Eq(A.T, -A)``. Derivations hand it to ``sympy.refine`` / ``sympy.ask`` (under
            ``sympy.assuming``) or, where sympy has no predicate for it, read it as a substitution
            rule; the report prints it with ``sympy.latex``.
        gloss: short Markdown prose printed after the predicate (what it means, how sympy uses it).
    """

    predicate: sp.Basic
    gloss: str = ""

    @property
    def text(self) -> str:
        """The printed premise: ``$<sympy.latex(predicate)>$ (<gloss>)``."""
        shown = f"${sp.latex(self.predicate)}$"
        return f"{shown} ({self.gloss})" if self.gloss else shown


def premise_predicate(name: str, doc: str) -> Predicate:
    """A named predicate sympy records and prints but cannot reason with (it has no handlers).

    ``ask`` decides it only when it is assumed verbatim; a derivation therefore states how it
    enters (by hand) instead of pretending sympy used it.

    Args:
        name: printed as ``Q.<name>`` / ``\\operatorname{Q}_{\\text{<name>}}``.
        doc: what the predicate means.

    Returns:
        The predicate; call it on a sympy object, e.g. ``C1(sigma)``.
    """
    cls = type(f"{name}Predicate", (Predicate,),
               {"name": name, "handler": Dispatcher(f"{name}Handler", doc=doc), "__doc__": doc})
    return cls()


C1 = premise_predicate("C1", "The function is continuously differentiable.")
DIFFERENTIABLE = premise_predicate("differentiable", "The function is differentiable.")


def conjunction(premises: tuple[Assumption, ...]) -> sp.Boolean:
    """The premises' predicates joined by ``&``.

    Args:
        premises: the claim's assumptions.

    Returns:
        ``sympy.And`` of their predicates (``sympy.true`` for none).
    """
    return sp.And(*(a.predicate for a in premises))


def substitutions(assumed: sp.Basic) -> dict[sp.Basic, sp.Basic]:
    """The equations among the conjuncts of ``assumed``, as a substitution.

    For premises sympy's assumption system cannot express (``A^T = -A``: there is no skew-symmetric
    predicate; ``\\dot E = -G_E``: a differential equation), the equation itself is the rule.

    Args:
        assumed: a conjunction of premises.

    Returns:
        ``{lhs: rhs}`` for each ``Eq(lhs, rhs)`` conjunct (empty if none).
    """
    return {c.lhs: c.rhs for c in sp.And.make_args(assumed) if isinstance(c, sp.Equality)}


def askable(assumed: sp.Basic) -> list[sp.Basic]:
    """The conjuncts of ``assumed`` that sympy's ``ask`` accepts as assumptions.

    Set membership (``Contains(d, {2, 3, 4})``) is dropped: ``ask`` falls back to its linear-arithmetic
    solver, which raises on it. Derivations read such premises directly instead.

    Args:
        assumed: a conjunction of premises.

    Returns:
        The conjuncts to pass to ``sympy.assuming``.
    """
    return [c for c in sp.And.make_args(assumed) if not isinstance(c, sp.Contains)]


def refine_under(expr: Any, assumed: sp.Basic) -> Any:
    """``sympy.refine`` of the expanded ``expr`` under ``with sympy.assuming(assumed)``, then ``doit``.

    For matrix expressions, refine's ``MatMul`` rule replaces ``X^T X`` and ``X X^T`` by ``I`` exactly
    when ``ask(Q.orthogonal(X))`` is True; ``doit`` then drops the identities.

    Args:
        expr: a scalar or matrix expression.
        assumed: a conjunction of premises.

    Returns:
        The refined expression (unchanged where no premise applies).

    Example:
        >>> R, x = sp.MatrixSymbol("R", 3, 3), sp.MatrixSymbol("x", 3, 1)
        >>> refine_under(x.T * R.T * R * x, sp.Q.orthogonal(R))
        x.T*x
    """
    with sp.assuming(*askable(assumed)):
        return sp.refine(sp.expand(expr)).doit()


@dataclass(frozen=True)
class Claim:
    """A declared symmetry claim.

    Attributes:
        name: short identifier used on the command line (``geodrift prove gauge``).
        title: one-line title.
        statement: the claim as Markdown with LaTeX.
        premises: what the statement assumes, as sympy predicates (see :class:`Assumption`);
            ``derive`` runs under them and ``assumptions`` prints them.
        method: how sympy settles it (one line).
        numeric: name of the torch cross-check in ``geodrift.symmetry_numeric.NUMERIC_CHECKS``.
        derive: runs the symbolic derivation under ``predicate`` (called with no argument); called
            with another boolean it derives under that instead (to show what a premise buys).
    """

    name: str
    title: str
    statement: str
    premises: tuple[Assumption, ...]
    method: str
    numeric: str
    derive: Callable[[], Derivation]

    @property
    def assumptions(self) -> tuple[str, ...]:
        """The premises as printed: LaTeX generated from each predicate, with its gloss."""
        return tuple(a.text for a in self.premises)

    @property
    def predicate(self) -> sp.Boolean:
        """All premises joined by ``&``: what ``derive`` assumes."""
        return conjunction(self.premises)


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
