"""Simulator plots: the PCA trajectory helper (Eq. 6 sign alignment) and PNG files."""

from __future__ import annotations

import numpy as np
from sim_helpers import smoke_result, smoke_spec

from geodrift.render.sim_plots import pca_trajectory, write_plots
from geodrift.sim.reproduce import assemble


def test_pca_of_a_smooth_curve_is_low_dimensional_and_sign_flips_do_not_matter():
    t = np.linspace(0, 1, 16)[:, None]
    basis = np.linalg.qr(np.random.default_rng(0).normal(size=(64, 3)))[0].T  # (3, 64)
    curve = np.hstack([np.cos(t), np.sin(t), t]) @ basis + 2.0 * basis[0]
    flipped = curve * np.where(np.arange(16) % 2, -1.0, 1.0)[:, None]
    _, evr = pca_trajectory(curve.copy())
    _, evr_flipped = pca_trajectory(flipped.copy())
    assert evr.sum() > 0.999 and np.allclose(evr, evr_flipped)
    _, evr_random = pca_trajectory(np.random.default_rng(1).normal(size=(16, 4096)))
    assert evr_random.sum() < 0.5


def test_write_plots_creates_three_pngs(tmp_path):
    rep = assemble("mlp", "smoke", [smoke_spec(0), smoke_spec(1)], [smoke_result(0), smoke_result(1)], [42])
    paths = write_plots(rep, tmp_path)
    assert [p.name for p in paths] == ["smoke_continuity.png", "smoke_rotation.png", "smoke_pca_v1.png"]
    assert all(p.read_bytes()[:4] == b"\x89PNG" and p.stat().st_size > 1000 for p in paths)
    assert not list(tmp_path.glob("*.tmp"))
