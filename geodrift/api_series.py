"""The Python face of ``geodrift drift`` and ``geodrift compare``: ``geodrift.drift(...)`` and ``geodrift.compare(...)``.

Each builds the request its command builds (:class:`~geodrift.jobs.series.DriftRequest`,
:class:`~geodrift.jobs.series.CompareRequest`) and runs the same job (``run_drift``, ``run_compare``): the same
defaults, checks and numbers; errors name the keyword (``k=2.5: ...``). It returns a :class:`Drift` or a
:class:`Comparison`: the job's report (``.to_dict()``, the JSON's fields) with ``summary()`` and ``to_frame()``
(pandas DataFrames whose rows name the view, the gauge fixing and each space's ``gauge``: ``aligned`` rows are not
measurements) and ``plot()`` (the ``--plot`` figures).

Example::

    import geodrift
    series = geodrift.drift(["step-0", "step-100", "step-200"], layers="0-9")
    series.summary()                # per projection and space: the rotation from #0, with its null
    series.plot("drift.png")        # the rotation figure; kind="continuity" the other one
    pair = geodrift.compare("base", "finetuned")
    pair.summary()                  # per projection and space: the subspace overlap, its null and k/d
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from geodrift.api import claim_figure, keyword_errors, progress_bar, shown
from geodrift.errors import GeodriftError
from geodrift.jobs.series import CompareRequest, DriftRequest, run_compare, run_drift
from geodrift.jobs.series_results import CompareResult, DriftResult
from geodrift.scanner.mapping import NameRule

DRIFT_FIGURES = ("rotation", "continuity")


@dataclass(repr=False)
class Drift(DriftResult):
    """What :func:`drift` returns: the series (``.reports``, ``.rotation``, ``.to_dict()``), ``summary()``,
    ``to_frame(kind="rotation" | "continuity")`` and :meth:`plot`."""

    @classmethod
    def of(cls, rep: Any) -> Drift:
        """``rep`` (the job's DriftResult) as a Drift."""
        return cls(**{f.name: getattr(rep, f.name) for f in fields(rep)})

    def plot(self, path: str | Path | None = None, *, kind: str = "rotation", dpi: int = 300,
             overwrite: bool = False) -> Any:
        """The figures of ``geodrift drift --plot NAME.EXT``: ``kind="rotation"`` is ``NAME_rotation`` (each layer's
        angle from #0, Fig. 2's analogue), ``"continuity"`` is ``NAME_continuity`` (continuity across depth along
        the series).

        Args:
            path: also write the figure there (.png, .pdf or .svg, atomically); None: only return it.
            kind: ``"rotation"`` or ``"continuity"``.
            dpi: resolution of a written raster figure.
            overwrite: replace ``path`` even when geodrift did not write it.

        Returns:
            The ``matplotlib.figure.Figure``.

        Raises:
            GeodriftError: an unknown ``kind``, an unsupported suffix or dpi, a ``path`` geodrift did not write.
        """
        if kind not in DRIFT_FIGURES:
            raise GeodriftError(f"plot(kind={kind!r}): unknown kind; use one of {', '.join(DRIFT_FIGURES)}")
        from geodrift.render.series import rotation_figure, series_continuity_figure

        return _draw(rotation_figure if kind == "rotation" else series_continuity_figure, self, path, dpi, overwrite)


@dataclass(repr=False)
class Comparison(CompareResult):
    """What :func:`compare` returns: the pair (``.reports``, ``.subspaces``, ``.to_dict()``), ``summary()``,
    ``to_frame()`` and :meth:`plot`."""

    @classmethod
    def of(cls, rep: Any) -> Comparison:
        """``rep`` (the job's CompareResult) as a Comparison."""
        return cls(**{f.name: getattr(rep, f.name) for f in fields(rep)})

    def plot(self, path: str | Path | None = None, *, dpi: int = 300, overwrite: bool = False) -> Any:
        """The figure of ``geodrift compare --plot``: per projection, the two models' subspace overlap across
        layers with its permutation null and ``k/d`` (arguments and errors as :meth:`Drift.plot`)."""
        from geodrift.render.series import compare_figure

        return _draw(compare_figure, self, path, dpi, overwrite)


def _draw(figure: Callable[[Any], Any], rep: Any, path: str | Path | None, dpi: int, overwrite: bool) -> Any:
    claim_figure(path, dpi, overwrite)
    from geodrift.render.figures import save_figure, style

    with style():
        fig = figure(rep)
        if path is not None:
            save_figure(fig, path, dpi, close=False)
    return fig


def drift(checkpoints: Sequence[Any], *, roles: str | list[str] | None = None, layers: str | list[int] | None = None,
          k: int = DriftRequest.k, view: str | None = None, null_draws: int = DriftRequest.null_draws,
          seed: int = DriftRequest.seed, names: str | Path | list[NameRule] | None = None, ov: bool = DriftRequest.ov,
          align: bool = DriftRequest.align, head_maps: str = DriftRequest.head_maps,
          max_memory: str | int = DriftRequest.max_memory,
          progress: bool | Callable[[str], None] | None = None) -> Drift:
    """A training series, as ``geodrift drift CKPT1 CKPT2 ...``: each layer's v1/u1 rotation from the first
    checkpoint and each checkpoint's continuity across depth, with noise floors.

    Args:
        checkpoints: two or more checkpoints of one run, in order: paths, ``nn.Module`` s or state dicts.
        roles, layers, k, view, null_draws, seed, names, ov, max_memory: as :func:`geodrift.scan` (``k`` here: the
            vectors kept per checkpoint, default 4).
        align, head_maps: bring every checkpoint into the first one's gauge first (``--align``, ``--head-maps``).
        progress: ``True`` a bar, a function called with each matrix's label, None/False silent.

    Returns:
        Drift: ``.summary()``, ``.to_frame()``, ``.plot()``, ``.to_dict()`` (the ``--json`` fields), ``.view`` and
        the gauge fixing (``.to_dict()["gauge_fixing"]``).

    Raises:
        GeodriftError: a bad argument (named as its keyword) or checkpoint, before the work.
    """
    given: dict[str, Any] = {"roles": roles, "layers": layers, "k": k, "view": view, "null_draws": null_draws,
                             "seed": seed, "names": names, "ov": ov, "align": align, "head_maps": head_maps,
                             "max_memory": max_memory}
    with keyword_errors({**given, "progress": progress}), \
            progress_bar(progress, f"reading {len(checkpoints)} checkpoints") as (advance, _):
        if isinstance(checkpoints, (str, Path)) or not isinstance(checkpoints, Sequence):
            raise GeodriftError(f"checkpoints={shown(checkpoints)}: must be a list of two or more checkpoints")
        return Drift.of(run_drift(DriftRequest(list(checkpoints), **given), advance))


def compare(a: Any, b: Any, *, roles: str | list[str] | None = None, layers: str | list[int] | None = None,
            k: int = CompareRequest.k, view: str | None = None, null_draws: int = CompareRequest.null_draws,
            seed: int = CompareRequest.seed, names: str | Path | list[NameRule] | None = None,
            ov: bool = CompareRequest.ov, align: bool = CompareRequest.align, head_maps: str = CompareRequest.head_maps,
            max_memory: str | int = CompareRequest.max_memory,
            progress: bool | Callable[[str], None] | None = None) -> Comparison:
    """Two models, as ``geodrift compare A B``: per projection, space and layer, the principal angles between their
    top-``k`` subspaces, with a permutation null and ``k/d``.

    Args:
        a, b: the models (paths, ``nn.Module`` s or state dicts); ``b`` is compared with ``a``.
        roles, layers, k, view, null_draws, seed, names, ov, align, head_maps, max_memory, progress: as
            :func:`drift` (``k``: the subspace dimension, default 8).

    Returns:
        Comparison: ``.summary()``, ``.to_frame()``, ``.plot()``, ``.to_dict()`` (the ``--json`` fields).

    Raises:
        GeodriftError: a bad argument (named as its keyword) or model, before the work.
    """
    given: dict[str, Any] = {"roles": roles, "layers": layers, "k": k, "view": view, "null_draws": null_draws,
                             "seed": seed, "names": names, "ov": ov, "align": align, "head_maps": head_maps,
                             "max_memory": max_memory}
    with keyword_errors({**given, "progress": progress}), progress_bar(progress, "reading 2 models") as (advance, _):
        return Comparison.of(run_compare(CompareRequest(a, b, **given), advance))
