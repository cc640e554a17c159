"""More distinct training images from a small set: seeded random affine augmentation.

``augment(x, y, total, seed)`` keeps the ``n`` originals and appends ``total - n`` images, each a
random affine transform of one original (cycling through the originals in order): a rotation
uniform in ``±max_rotation_deg`` and a shift uniform in ``±max_shift`` pixels per axis, applied with
``torch.nn.functional.affine_grid`` / ``grid_sample`` (bilinear, zero padding). Every draw comes
from ``torch.Generator().manual_seed(seed)``, so the same call gives the same images (bitwise, CPU).

Data set names: ``<base>-aug<N>`` with base ``mnist5k`` or ``digits`` and ``N`` the training-set
size (``60000``, or ``60k``), e.g. ``--data mnist5k-aug60k``. Only the training split is augmented;
the test split stays the base set's held-out images.

Example:
    >>> x = torch.rand(10, 64) * 16; y = torch.arange(10)
    >>> xa, ya = augment(x, y, 25, seed=0)
    >>> xa.shape, ya.shape
    (torch.Size([25, 64]), torch.Size([25]))
"""

from __future__ import annotations

import math
import re

import torch
import torch.nn.functional as F

from geodrift.errors import GeodriftError

AUGMENT_SEED = 0
MAX_ROTATION_DEG = 15.0
MAX_SHIFT_PX = 2.0
_NAME = re.compile(r"^(mnist5k|digits)-aug(\d+)(k?)$")


def parse_augmented(name: str) -> tuple[str, int] | None:
    """``"mnist5k-aug60k"`` -> ``("mnist5k", 60000)``; None when ``name`` is not an augmented set's name."""
    match = _NAME.match(name)
    if match is None:
        return None
    total = int(match.group(2)) * (1000 if match.group(3) else 1)
    return match.group(1), total


def augment(x: torch.Tensor, y: torch.Tensor, total: int, seed: int = AUGMENT_SEED, *,
            max_rotation_deg: float = MAX_ROTATION_DEG, max_shift_px: float = MAX_SHIFT_PX,
            chunk: int = 4096) -> tuple[torch.Tensor, torch.Tensor]:
    """The originals followed by ``total - n`` seeded affine variants.

    Args:
        x: ``(n, side*side)`` square images (raw pixel scale), float32; y: ``(n,)`` labels.
        total: the size of the returned set (>= n).
        seed: the generator's seed (the draws: rotation, then x and y shift, per new image).
        max_rotation_deg, max_shift_px: uniform ranges of the rotation and of each shift.
        chunk: images transformed at a time (memory).

    Returns:
        ``x (total, side*side)`` float32 and ``y (total,)`` int64.

    Raises:
        GeodriftError: non-square images or ``total < n``.
    """
    n, dim = x.shape
    side = int(round(math.sqrt(dim)))
    if side * side != dim:
        raise GeodriftError(f"augmentation needs square images; got {dim} pixels per image")
    if total < n:
        raise GeodriftError(f"-aug{total}: the augmented set must be at least the {n} original images")
    extra = total - n
    gen = torch.Generator().manual_seed(seed)
    angle = (torch.rand(extra, generator=gen, dtype=torch.float64) * 2 - 1) * math.radians(max_rotation_deg)
    shift = (torch.rand(extra, 2, generator=gen, dtype=torch.float64) * 2 - 1) * (2 * max_shift_px / side)
    source = torch.arange(extra) % n
    cos, sin = torch.cos(angle), torch.sin(angle)
    # (extra, 2, 3): rotation about the centre, then the shift (normalised coordinates, [-1, 1] = the image)
    theta = torch.stack([torch.stack([cos, -sin, shift[:, 0]], 1), torch.stack([sin, cos, shift[:, 1]], 1)], 1)
    images = x.reshape(n, 1, side, side).float()
    out = [x.float()]
    for start in range(0, extra, chunk):
        part = slice(start, min(extra, start + chunk))
        grid = F.affine_grid(theta[part].float(), [part.stop - part.start, 1, side, side], align_corners=False)
        moved = F.grid_sample(images[source[part]], grid, mode="bilinear", padding_mode="zeros", align_corners=False)
        out.append(moved.reshape(-1, dim))
    return torch.cat(out), torch.cat([y, y[source]]).long()
