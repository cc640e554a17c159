"""The permutation bank: the random draws every null of one report shares.

Policy: one permutation per adjacent pair and draw for each shape ``(pairs, d)``, drawn on first use
from the report's generator and shared by every statistic of that shape: Eq. 1 and Eq. 2 of every
role and space, the trajectory's EVR and lag nulls (through :meth:`PermutationBank.layer_permutations`)
and the series' paired nulls. Each statistic still gets an exact permutation null; sharing only
correlates the nulls of different statistics, and a report pays for each shape's permutations once.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any

import torch

from geodrift import metrics


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

    def get(self, draws: int, n_pairs: int, dim: int) -> torch.Tensor:
        """``(>= draws, n_pairs, dim)`` permutations, drawn on first use of the shape."""
        bank = self._banks.get((n_pairs, dim))
        if bank is None or bank.shape[0] < draws:
            bank = metrics.random_permutations(draws, n_pairs, dim, self.generator)
            self.rows_generated += draws * n_pairs
            self._banks[(n_pairs, dim)] = bank
            self._flat.pop((n_pairs, dim), None)
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
            ``(stop - start, L, d)`` int64.
        """
        stop = draws if stop is None else stop
        pairs = self.get(draws, n_layers - 1, dim)[start:stop]  # (n, L-1, d)
        layers = [torch.arange(dim, dtype=torch.int64).expand(stop - start, dim)]
        for layer in range(n_layers - 1):
            layers.append(torch.gather(pairs[:, layer], 1, layers[-1]))
        return torch.stack(layers, 1)

    def memo(self, key: Hashable, make: Callable[[], Any]) -> Any:
        """``make()`` once per key: other per-shape draws the report's stacks share (e.g. a random floor)."""
        if key not in self._memo:
            self._memo[key] = make()
        return self._memo[key]
