"""Affine augmentation: seeded and deterministic, originals kept, identity when the ranges are zero."""

from __future__ import annotations

import pytest
import torch

from geodrift.errors import GeodriftError
from geodrift.sim.augment import augment, parse_augmented
from geodrift.sim.data import load_dataset, training_images


def _digits_like(n: int = 12, side: int = 8) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(3)
    x = torch.zeros(n, side, side)
    x[:, 2:6, 3:5] = torch.rand(n, 4, 2, generator=g) * 16  # a bar away from the border
    return x.reshape(n, -1), torch.arange(n) % 10


def test_the_same_seed_gives_the_same_images_and_another_seed_other_ones():
    x, y = _digits_like()
    a, ya = augment(x, y, 40, seed=5)
    b, _ = augment(x, y, 40, seed=5)
    c, _ = augment(x, y, 40, seed=6)
    assert torch.equal(a, b) and not torch.equal(a[12:], c[12:])
    assert torch.equal(a[:12], x) and torch.equal(ya[12:], y[torch.arange(28) % 12])


def test_zero_ranges_reproduce_the_sources_and_small_shifts_keep_the_ink():
    x, y = _digits_like()
    same, _ = augment(x, y, 36, max_rotation_deg=0.0, max_shift_px=0.0)
    assert torch.allclose(same[12:], x[torch.arange(24) % 12], atol=1e-4)
    moved, _ = augment(x, y, 36, seed=1)
    assert not torch.allclose(moved[12:], same[12:], atol=1e-2)
    # the bar stays inside the 8x8 frame under ±2 px, ±15°: bilinear resampling keeps most of the ink
    ratio = moved[12:].sum(1) / x[torch.arange(24) % 12].sum(1)
    assert ratio.min() > 0.7 and ratio.max() < 1.3


def test_augmented_set_names_and_errors():
    assert parse_augmented("mnist5k-aug60k") == ("mnist5k", 60000)
    assert parse_augmented("digits-aug5000") == ("digits", 5000)
    assert parse_augmented("mnist5k") is None
    assert training_images("mnist5k-aug60k") == 60000
    data = load_dataset("digits-aug3000")
    plain = load_dataset("digits")
    assert len(data.y_train) == 3000 and torch.equal(data.y_test, plain.y_test)
    with pytest.raises(GeodriftError, match="at least the"):
        load_dataset("digits-aug100")
