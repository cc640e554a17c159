"""Rigorous interval enclosures of closed-form real constants (sympy expression -> mpmath interval).

Used to certify that a witness difference is nonzero: the enclosure is computed with outward-rounded
interval arithmetic (``mpmath.iv``), and erf by its alternating Taylor series with the first omitted
term as a rigorous remainder bound. Supported: rationals, pi, E, +, *, integer and half-integer
powers, exp, log, sqrt, tanh (via exp), erf, Abs. Anything else raises ``ValueError`` - the caller
then reports the step as undecided, never as certified.
"""

from __future__ import annotations

import sympy as sp
from mpmath import iv

_PREC = 120


def enclose(expr: sp.Expr) -> tuple[float, float]:
    """Return ``(lo, hi)`` floats with ``lo <= expr <= hi`` rigorously (rounded outward).

    Args:
        expr: a real constant sympy expression (no free symbols).

    Returns:
        The enclosure as two Python floats (outward-rounded from the 120-bit interval).

    Raises:
        ValueError: if ``expr`` has free symbols or an unsupported function.

    Example:
        >>> lo, hi = enclose(sp.tanh(1) - sp.Rational(3, 4)); lo > 0
        True
    """
    if expr.free_symbols:
        raise ValueError(f"enclose needs a constant, got free symbols {expr.free_symbols}")
    iv.prec = _PREC
    box = _iv(sp.sympify(expr))
    lo, hi = float(box.a), float(box.b)
    # float() rounds to nearest; widen by one ulp each way to stay outward.
    import math

    return math.nextafter(lo, -math.inf), math.nextafter(hi, math.inf)


def certify_nonzero(expr: sp.Expr) -> tuple[bool | None, tuple[float, float] | None]:
    """Certify ``expr != 0`` by an enclosure excluding 0.

    Returns:
        ``(True, (lo, hi))`` if the enclosure excludes 0; ``(None, (lo, hi))`` if it does not
        (undecided); ``(None, None)`` if the expression is not supported.
    """
    exact = sp.nsimplify(expr) if expr.is_Rational else expr
    try:
        lo, hi = enclose(exact)
    except ValueError:
        return None, None
    return (True if (lo > 0 or hi < 0) else None), (lo, hi)


def _iv(e: sp.Expr):  # -> iv.mpf
    if e.is_Integer or e.is_Rational:
        p, q = sp.fraction(e)
        return iv.mpf(int(p)) / iv.mpf(int(q))
    if e is sp.pi:
        return iv.pi
    if e is sp.E:
        return iv.exp(iv.mpf(1))
    if e.is_Add:
        out = iv.mpf(0)
        for a in e.args:
            out = out + _iv(a)
        return out
    if e.is_Mul:
        out = iv.mpf(1)
        for a in e.args:
            out = out * _iv(a)
        return out
    if e.is_Pow:
        base, ex = e.args
        if ex.is_Integer:
            b = _iv(base)
            return b ** int(ex) if ex >= 0 else iv.mpf(1) / (b ** int(-ex))
        if ex.is_Rational and ex.q == 2:
            root = iv.sqrt(_iv(base))
            return root ** int(ex.p) if ex.p > 0 else iv.mpf(1) / (root ** int(-ex.p))
        raise ValueError(f"unsupported power {e}")
    if isinstance(e, sp.exp):
        return iv.exp(_iv(e.args[0]))
    if isinstance(e, sp.log):
        return iv.log(_iv(e.args[0]))
    if isinstance(e, sp.tanh):
        return _iv(e.rewrite(sp.exp))
    if isinstance(e, sp.Abs):
        return abs(_iv(e.args[0]))
    if isinstance(e, sp.erf):
        return _erf(_iv(e.args[0]))
    raise ValueError(f"unsupported expression {e!r}")


def _erf_point(r):  # r: degenerate-or-thin interval; alternating series with remainder bound
    # erf(r) = 2/sqrt(pi) * sum_n (-1)^n r^(2n+1) / (n! (2n+1)); for n >= r^2 the terms decrease
    # in magnitude, so the first omitted term bounds the remainder.
    rmax = max(abs(float(r.a)), abs(float(r.b)))
    if rmax > 4:
        raise ValueError("erf enclosure implemented for |x| <= 4")
    total = iv.mpf(0)
    term_pow = r
    fact = iv.mpf(1)
    n_terms = 80
    for n in range(n_terms):
        if n > 0:
            term_pow = term_pow * r * r
            fact = fact * n
        term = term_pow / (fact * (2 * n + 1))
        total = total + term if n % 2 == 0 else total - term
    n = n_terms
    nxt = abs(term_pow * r * r / (fact * n * (2 * n + 1)))
    total = total + iv.mpf([-float(nxt.b) * 2, float(nxt.b) * 2])
    return total * 2 / iv.sqrt(iv.pi)


def _erf(x):
    # erf is increasing: enclose at both endpoints.
    lo = _erf_point(iv.mpf(x.a))
    hi = _erf_point(iv.mpf(x.b))
    return iv.mpf([lo.a, hi.b])
