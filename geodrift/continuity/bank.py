"""The permutation bank: the random draws every null of one report shares.

Policy: one permutation per adjacent pair and draw for each shape ``(pairs, d)``, drawn on first use
from the report's generator and shared by every statistic of that shape: Eq. 1 and Eq. 2 of every
role and space, the trajectory's EVR and lag nulls (through :meth:`PermutationBank.layer_permutations`)
and the series' paired nulls. Each statistic still gets an exact permutation null; sharing only
correlates the nulls of different statistics, and a report pays for each shape's permutations once.
The layer-order null (:func:`geodrift.continuity.trajectory.order_null`) likewise shares one sequence of
random layer orders per layer count (:meth:`PermutationBank.order_pairs`) among every stack of that depth.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any

import numpy as np
import torch

from geodrift import metrics

# Composed per-layer permutations (int64) are kept for reuse by later stacks up to this size in all
# (SmolLM2's three widths: 55 MB; an 8B's would be 0.5 GB - its 14336-wide ones are recomposed instead).
LAYER_MEMO_BYTES = 64 << 20


class PermutationBank:
    """Permutations shared by every null statistic of one shape ``(pairs, d)`` within a report.

    Args:
        generator: the report's only source of randomness.

    Example:
        >>> bank = PermutationBank(torch.Generator().manual_seed(0))
        >>> bank.get(4, 2, 5).shape, bank.get(3, 2, 5) is bank.get(4, 2, 5)
        (torch.Size([4, 2, 5]), True)
    """

    def __init__(self, generator: torch.Generator) -> None:
        self.generator = generator
        self._banks: dict[tuple[int, int], torch.Tensor] = {}
        self._flat: dict[tuple[int, int], torch.Tensor] = {}
        self._memo: dict[Hashable, Any] = {}
        #: ``(draws, pairs, d)`` rows generated so far (the structural guard counts them).
        self.rows_generated = 0
        #: random layer orders generated so far by :meth:`order_pairs` (counted by the guard too).
        self.orders_generated = 0
        self._orders: dict[tuple[int, int], list[np.ndarray]] = {}
        self._layer_perms: dict[tuple[int, int, int, int, int], torch.Tensor] = {}
        self._order_rng: np.random.Generator | None = None

    def get(self, draws: int, n_pairs: int, dim: int) -> torch.Tensor:
        """``(>= draws, n_pairs, dim)`` permutations, drawn on first use of the shape."""
        bank = self._banks.get((n_pairs, dim))
        if bank is None or bank.shape[0] < draws:
            bank = metrics.random_permutations(draws, n_pairs, dim, self.generator)
            self.rows_generated += draws * n_pairs
            self._banks[(n_pairs, dim)] = bank
            self._flat.pop((n_pairs, dim), None)
            for key in [key for key in self._layer_perms if key[:2] == (n_pairs, dim)]:
                del self._layer_perms[key]  # composed from the replaced bank
        return bank

    def index(self, draws: int, n_pairs: int, dim: int) -> torch.Tensor:
        """``(>= draws, n_pairs * dim)`` flat gather indices of :meth:`get`'s permutations, built once."""
        bank = self.get(draws, n_pairs, dim)
        flat = self._flat.get((n_pairs, dim))
        if flat is None:
            flat = self._flat[(n_pairs, dim)] = metrics.flat_permutation_index(bank)
        return flat

    def layer_permutations(self, draws: int, n_layers: int, dim: int, start: int = 0,
                           stop: int | None = None) -> torch.Tensor:
        """Per-layer permutations ``P_l`` of draws ``start:stop``, composed from the pair bank ``(L-1, d)``.

        ``P_0 = id`` and ``P_{l+1} = Q_l[P_l]``, so permuting every layer's coordinates by its ``P_l``
        (``y_l = x_l[P_l]``) gives each adjacent pair exactly the pair bank's relative permutation
        ``Q_l``: the lag-1 samples are the Eq. 1 ones. For any lag ``k``, ``P_l^-1 P_{l+k}`` over the
        pairs ``(l, l+k)`` are independent uniform permutations (the pairs form disjoint chains).

        Args:
            draws: the draws the bank must hold (``stop`` defaults to it).
            n_layers: ``L >= 2``; dim: ``d``.
            start, stop: the draws wanted (chunks bound memory at large ``d``).

        Returns:
            ``(stop - start, L, d)`` int64, kept for the next stack of the shape (the v and u stacks, and every
            role's, share it; do not modify it) while the kept ones hold at most ``LAYER_MEMO_BYTES`` in all.
        """
        stop = draws if stop is None else stop
        pairs = self.get(draws, n_layers - 1, dim)[start:stop]  # (n, L-1, d)
        key = (n_layers - 1, dim, draws, start, stop)
        if key in self._layer_perms:
            return self._layer_perms[key]
        layers = [torch.arange(dim, dtype=torch.int64).expand(stop - start, dim)]
        for layer in range(n_layers - 1):
            layers.append(torch.gather(pairs[:, layer].long(), 1, layers[-1]))  # the bank is int32
        composed = torch.stack(layers, 1)
        size = composed.numel() * composed.element_size()
        if sum(t.numel() * t.element_size() for t in self._layer_perms.values()) + size <= LAYER_MEMO_BYTES:
            self._layer_perms[key] = composed
        return composed

    def order_pairs(self, n_layers: int, batch: int, size: int) -> torch.Tensor:
        """:meth:`order_pairs_array`'s batch as an int64 tensor (for ``torch.take``)."""
        return torch.from_numpy(self.order_pairs_array(n_layers, batch, size)).long()

    def order_pairs_array(self, n_layers: int, batch: int, size: int) -> np.ndarray:
        """Batch ``batch`` of ``size`` uniformly random layer orders, as their adjacent pairs, shared by every stack.

        For an order ``o`` of ``range(L)``, row ``t`` holds ``o[t] * L + o[t + 1]``: the flat index of the
        pair ``(o[t], o[t + 1])`` in an ``(L, L)`` matrix, so ``torch.take(matrix, pairs)`` reads its
        entries along the order. Orders are drawn on first use, batch after batch, by numpy's Fisher-Yates
        shuffle (``Generator.permuted``: exactly uniform, no ties) from a stream seeded by the report's seed
        alone, so a stack's orders do not depend on which stack asked first; stored in the smallest integer
        type that holds ``L * L``.

        Args:
            n_layers: ``L >= 2``.
            batch: which batch (0, 1, ...); earlier batches are drawn first if missing.
            size: orders per batch (part of the key: another size is another sequence).

        Returns:
            ``(size, L - 1)`` flat indices (int16 when ``L * L`` fits it, else int64), stored by the bank: read only.

        Example:
            >>> bank = PermutationBank(torch.Generator().manual_seed(0))
            >>> pairs = bank.order_pairs_array(4, 0, 3)
            >>> order = [int(pairs[0, 0]) // 4] + [int(i) % 4 for i in pairs[0]]
            >>> sorted(order), bool((bank.order_pairs_array(4, 0, 3) == pairs).all()), bank.orders_generated
            ([0, 1, 2, 3], True, 3)
        """
        if self._order_rng is None:
            self._order_rng = np.random.default_rng([self.generator.initial_seed(), 0x6F72646572])  # "order"
        drawn = self._orders.setdefault((n_layers, size), [])
        dtype = np.int16 if n_layers * n_layers <= np.iinfo(np.int16).max else np.int64
        while len(drawn) <= batch:
            identity = np.broadcast_to(np.arange(n_layers, dtype=dtype), (size, n_layers))
            orders = self._order_rng.permuted(identity, axis=1)
            drawn.append(orders[:, :-1] * dtype(n_layers) + orders[:, 1:])
            self.orders_generated += size
        return drawn[batch]

    def memo(self, key: Hashable, make: Callable[[], Any]) -> Any:
        """``make()`` once per key: other per-shape draws the report's stacks share (e.g. a random floor)."""
        if key not in self._memo:
            self._memo[key] = make()
        return self._memo[key]
