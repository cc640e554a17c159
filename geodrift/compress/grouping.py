"""Which layers share a basis: adjacent groups, random groups, or groups of the most-overlapping subspaces.

The overlap of two layers in one space at rank r is ``||Q_a^T Q_b||_F^2 / r`` (the mean squared
cosine of their principal angles; 1 = the same subspace, ``r / d`` expected for random ones), where
``Q_l (d, r)`` is an orthonormal basis of the subspace layer l's own whitened rank-r truncation
(SVD-LLM, :func:`geodrift.compress.lowrank.private_unit`) lives in:

- output space: its left vectors ``U_r`` (exactly what a shared output basis must contain);
- input space: the row space of ``U_r^T W_l``, whitened by the mean second moment of that input
  over all layers (``S^T W_l^T U_r``, orthonormalised), so that directions the data never excites
  do not count.

:func:`matched_groups` pairs layers by a maximum-weight matching on the overlaps (networkx, exact;
groups larger than 2 are grown greedily), without looking at depth: if continuity along depth
matters, the matching finds adjacent layers by itself.
"""

from __future__ import annotations

import torch

from geodrift.compress.lowrank import Unit


def adjacent_groups(n_layers: int, size: int) -> list[tuple[int, ...]]:
    """``(0..g-1), (g..2g-1), ...`` (the last group may be shorter).

    Example:
        >>> adjacent_groups(5, 2)
        [(0, 1), (2, 3), (4,)]
    """
    return [tuple(range(s, min(s + size, n_layers))) for s in range(0, n_layers, size)]


def random_groups(n_layers: int, size: int, seed: int) -> list[tuple[int, ...]]:
    """Groups of a uniform random permutation of the layers (``torch.Generator().manual_seed(seed)``), each sorted.

    Example:
        >>> sorted(layer for g in random_groups(6, 2, 0) for layer in g)
        [0, 1, 2, 3, 4, 5]
    """
    order = torch.randperm(n_layers, generator=torch.Generator().manual_seed(seed)).tolist()
    return sorted(tuple(sorted(order[s: s + size])) for s in range(0, n_layers, size))


def subspace(unit: Unit, space: str, r: int, root: torch.Tensor | None = None) -> torch.Tensor:
    """Orthonormal ``(d, r)`` basis of a private unit's rank-r truncation in ``space`` (see the module docstring).

    Args:
        unit: a private unit.
        space: ``"output"`` or ``"input"``.
        r: the operating rank.
        root: ``S (d_in, d_in)`` of the mean input moment (input space only).
    """
    second, first = unit.factors(r)[unit.layers[0]]
    if space == "output":
        return second.double()
    rows = first.double().T  # (d_in, r): W_l^T U_r
    if root is not None:
        rows = root.T.double() @ rows
    q, _ = torch.linalg.qr(rows)
    return q


def overlaps(bases: list[torch.Tensor]) -> torch.Tensor:
    """``(L, L)`` matrix of ``||Q_a^T Q_b||_F^2 / r`` between orthonormal bases ``(d, r)`` (diagonal 1).

    Example:
        >>> e = torch.eye(4, dtype=torch.float64)
        >>> overlaps([e[:, :2], e[:, :2], e[:, 2:]]).tolist()
        [[1.0, 1.0, 0.0], [1.0, 1.0, 0.0], [0.0, 0.0, 1.0]]
    """
    # ||Q_a^T Q_b||_F^2 = <P_a, P_b>_F with P = Q Q^T: L d^2 r + L^2 d^2 operations instead of L^2 d r^2.
    r = bases[0].shape[1]
    flat = torch.stack([(q @ q.T).float().flatten() for q in bases])  # (L, d^2)
    return (flat @ flat.T).double() / r


def matched_groups(overlap: torch.Tensor, size: int) -> list[tuple[int, ...]]:
    """Groups of ``size`` layers maximising the summed within-group overlap.

    Pairs: networkx's maximum-weight matching with maximum cardinality (exact); an odd layer out
    stays alone. Larger groups: each matched pair is grown by the free layer with the highest mean
    overlap with it, best pair first (greedy).

    Example:
        >>> o = torch.tensor([[1, .1, .9, .1], [.1, 1, .1, .8], [.9, .1, 1, .1], [.1, .8, .1, 1]])
        >>> matched_groups(o, 2)
        [(0, 2), (1, 3)]
    """
    import networkx as nx

    n = overlap.shape[0]
    graph = nx.Graph()
    graph.add_nodes_from(range(n))
    graph.add_weighted_edges_from((a, b, float(overlap[a, b])) for a in range(n) for b in range(a + 1, n))
    pairs = sorted((tuple(sorted(p)) for p in nx.max_weight_matching(graph, maxcardinality=True)),
                   key=lambda p: -float(overlap[p[0], p[1]]))
    free = sorted(set(range(n)) - {i for p in pairs for i in p})
    groups = [list(p) for p in pairs]
    if size > 2:
        groups = groups[: -(-n // size)]  # as many seeds as groups; the rest of the pairs return to the pool
        free = sorted(set(range(n)) - {i for g in groups for i in g})
        for g in groups:
            while len(g) < size and free:
                best = max(free, key=lambda c: float(overlap[c, g].mean()))
                g.append(best)
                free.remove(best)
    return sorted([tuple(sorted(g)) for g in groups] + [(i,) for i in free])
