"""Shared parts of the gauge-group numeric twins: tiny models, random group elements, the verdict.

A twin applies a map to a real model's state dict and measures the relative change of its logits,
``max |logits' - logits| / max |logits|``, on fixed random tokens. A map the proofs call exact must
stay within float tolerance (:data:`EXACT_TOL`, by dtype); a map they call broken must move the
logits by more than :data:`BROKEN_FLOOR`. The transformers models (Qwen2, Gemma 2/3, GPT-2, Mixtral)
are random small ones built from their configs, in float64, with random norm gains; without
transformers installed their twins are skipped and say so.
"""

from __future__ import annotations

import copy
import importlib.util
from collections.abc import Callable
from typing import Any

import torch

from geodrift.prove.symmetry import NumericResult, orthogonal_qr

StateDict = dict[str, torch.Tensor]
# Exact maps: float64 round-off of the tiny models; float32 (and RMSNorm's float32 cast) for the Llamas.
EXACT_TOL = {torch.float64: 1e-9, torch.float32: 1e-4}
BROKEN_FLOOR = 1e-3


def has_transformers() -> bool:
    """Whether ``transformers`` is importable (the test extra installs it)."""
    return importlib.util.find_spec("transformers") is not None


def token_ids(vocab: int, generator: torch.Generator, length: int = 12) -> torch.Tensor:
    """``(2, length)`` random token ids."""
    return torch.randint(0, vocab, (2, length), generator=generator)


def logits_of(model: torch.nn.Module, ids: torch.Tensor) -> torch.Tensor:
    """Logits of a geodrift Llama (a tensor) or a transformers model (``.logits``)."""
    with torch.no_grad():
        out = model(ids)
    return out if isinstance(out, torch.Tensor) else out.logits


def relative_change(model: torch.nn.Module, state: StateDict, ids: torch.Tensor,
                    before: torch.Tensor | None = None, work: torch.nn.Module | None = None) -> float:
    """``max |logits' - logits| / max |logits|`` with ``state`` loaded into a copy of ``model``.

    Args:
        model: the original (unchanged).
        state: the moved state dict.
        ids: the input.
        before: the original's logits, if known.
        work: a same-shaped model to load ``state`` into instead of a fresh copy (large models).

    Example:
        >>> m = torch.nn.Linear(3, 2).double(); x = torch.ones(1, 3, dtype=torch.float64)
        >>> relative_change(m, m.state_dict(), x)
        0.0
    """
    base = logits_of(model, ids) if before is None else before
    moved = copy.deepcopy(model) if work is None else work
    moved.load_state_dict(state)
    return float((logits_of(moved, ids) - base).abs().max() / base.abs().max())


def conditioned(n: int, condition: float, generator: torch.Generator, dtype: torch.dtype) -> torch.Tensor:
    """``U diag(s) V^T`` with singular values log-spaced from 1 to ``1/condition`` (Haar ``U``, ``V``)."""
    s = torch.logspace(0, -torch.log10(torch.tensor(condition)).item(), n, dtype=torch.float64)
    u, v = orthogonal_qr(n, generator), orthogonal_qr(n, generator)
    return ((u * s) @ v.T).to(dtype)


def orthogonal_fixing_ones(d: int, generator: torch.Generator) -> torch.Tensor:
    """A Haar-random orthogonal ``R`` of the complement of ``1``, with ``R 1 = 1`` (LayerNorm's group).

    Example:
        >>> r = orthogonal_fixing_ones(5, torch.Generator().manual_seed(0))
        >>> bool(torch.allclose(r @ torch.ones(5, dtype=r.dtype), torch.ones(5, dtype=r.dtype)))
        True
    """
    basis = torch.cat([torch.ones(d, 1, dtype=torch.float64), torch.randn(d, d - 1, generator=generator,
                                                                          dtype=torch.float64)], 1)
    q, _ = torch.linalg.qr(basis)
    inner = torch.eye(d, dtype=torch.float64)
    inner[1:, 1:] = orthogonal_qr(d - 1, generator)
    return q @ inner @ q.T


def pair_rows(head_dim: int, pair: int) -> tuple[int, int]:
    """Rows of frequency pair ``pair`` of a head in Hugging Face's half-split rotary layout."""
    return pair, pair + head_dim // 2


def weight_change(model: torch.nn.Module, state: StateDict) -> float:
    """The largest relative change of any tensor of ``model`` in ``state``: a map that moves nothing would
    make its twin vacuous.

    Example:
        >>> m = torch.nn.Linear(2, 2); weight_change(m, {k: 2 * v for k, v in m.state_dict().items()})
        1.0
    """
    changes = [float((state[k].to(v.dtype) - v).abs().max() / v.abs().max().clamp_min(1e-300))
               for k, v in model.state_dict().items()
               if k in state and state[k].shape == v.shape and state[k].data_ptr() != v.data_ptr()]
    return max(changes, default=0.0)


def proof_label(facts: dict[str, Any], name: str) -> str | None:
    """What the symbolic derivation says of a twin's map: ``"exact"``, ``"broken"`` or None (not named).

    ``name`` is ``family:claim.map`` or ``family:claim.activation.map``; activation-dependent MLP maps are
    read from the derivation's per-activation table (``facts["table"]``), the others from its
    ``facts["exact"]`` / ``facts["broken"]`` lists.

    Example:
        >>> proof_label({"exact": ["a"], "broken": ["b"]}, "toy:claim.b")
        'broken'
    """
    parts = name.split(":", 1)[-1].split(".")
    key = parts[-1]
    if len(parts) == 3 and "table" in facts:
        act = {"gelu_new": "gelu"}.get(parts[1], parts[1])
        row = facts["table"].get(act, {})
        groups = row.get("gated_gate" if key == "gate_scaling" else "plain_hidden", "")
        needs = {"positive_scaling": "positive", "positive_diagonal": "positive", "gate_scaling": "positive",
                 "sign_flip": "signed", "permutation": "permutations"}.get(key)
        if needs is not None and groups:
            return "exact" if needs in groups else "broken"
    if key in facts.get("exact", ()):
        return "exact"
    if key in facts.get("broken", ()):
        return "broken"
    return None


def judge(changes: dict[str, float], expected: dict[str, str], tol: dict[str, float], skipped: list[str],
          label: str, moved: dict[str, float] | None = None, proof: dict[str, str | None] | None = None) -> NumericResult:
    """Pass iff every ``exact`` map stays below its tolerance and every ``broken`` one above the floor,
    every map moved the weights (by more than :data:`BROKEN_FLOOR`, relative) and every map's expectation
    is what the symbolic derivation says of it (``proof``, when given: a map it does not name fails).

    Args:
        changes: map name -> relative logit change.
        expected: map name -> ``"exact"`` | ``"broken"`` (the proofs' classification).
        tol: map name -> tolerance of an exact map (by the model's dtype).
        skipped: families not run (named in the summary).
        label: what was run, for the summary.

    Returns:
        The result; its metrics hold the changes, the expectations and the tolerances.
    """
    moved = moved if moved is not None else {k: 1.0 for k in changes}
    agree = {k: not ((expected[k] == "exact" and not v < tol[k]) or (expected[k] == "broken" and not v > BROKEN_FLOOR)
                     or not moved[k] > BROKEN_FLOOR or (proof is not None and proof.get(k) != expected[k]))
             for k, v in changes.items()}
    wrong = [k for k, ok in agree.items() if not ok]
    exact = [v for k, v in changes.items() if expected[k] == "exact"]
    broken = [v for k, v in changes.items() if expected[k] == "broken"]
    summary = (f"{label}: {len(exact)} exact maps, max rel. logit change {max(exact, default=0.0):.1e}; "
               f"{len(broken)} non-symmetries, min change {min(broken, default=float('nan')):.1e}")
    if wrong:
        summary += f"; disagree: {', '.join(wrong)}"
    if skipped:
        summary += f"; skipped ({', '.join(skipped)}): transformers not installed"
    return NumericResult(not wrong and bool(changes), summary,
                         {"changes": changes, "expected": expected, "tolerance": tol, "skipped": skipped,
                          "weights_moved": moved, "proof": proof, "agree": agree})


class Twin:
    """Collects one claim's measurements: ``twin.run(name, expected, model, state)``.

    Example:
        >>> t = Twin(); m = torch.nn.Linear(2, 2).double(); x = torch.ones(1, 2, dtype=torch.float64)
        >>> t.run("double", "broken", m, {k: 2 * v for k, v in m.state_dict().items()}, x)
        >>> t.result("toy").passed
        True
    """

    def __init__(self, facts: dict[str, Any] | None = None) -> None:
        self.facts = facts
        self.proof: dict[str, str | None] = {}
        self.changes: dict[str, float] = {}
        self.expected: dict[str, str] = {}
        self.tol: dict[str, float] = {}
        self.moved: dict[str, float] = {}
        self.skipped: list[str] = []

    def run(self, name: str, expected: str, model: torch.nn.Module, state: StateDict, ids: torch.Tensor,
            before: torch.Tensor | None = None, *, work: torch.nn.Module | None = None,
            float32_norms: bool = False) -> None:
        """Measure one map (``expected``: ``"exact"`` or ``"broken"``).

        ``float32_norms``: the model's RMSNorm computes in float32 even in a float64 model (Hugging
        Face's and geodrift's do), so an exact map is held to the float32 tolerance.
        """
        dtype = torch.float32 if float32_norms else next(model.parameters()).dtype
        self.changes[name] = relative_change(model, state, ids, before, work)
        self.moved[name] = weight_change(model, state)
        if self.facts is not None:
            self.proof[name] = proof_label(self.facts, name)
        self.expected[name] = expected
        self.tol[name] = EXACT_TOL[dtype]

    def family(self, name: str, body: Callable[[], Any], needs_transformers: bool = True) -> None:
        """Run ``body`` (which calls :meth:`run`) unless it needs transformers and it is missing."""
        if needs_transformers and not has_transformers():
            self.skipped.append(name)
            return
        body()

    def result(self, label: str) -> NumericResult:
        """The verdict over everything measured (see :func:`judge`)."""
        return judge(self.changes, self.expected, self.tol, self.skipped, label, self.moved,
                     self.proof if self.facts is not None else None)
