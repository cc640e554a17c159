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

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from geodrift.api import (
    claim_figure,
    face_signature,
    keyword_errors,
    keywords,
    keywords_doc,
    progress_bar,
    shown,
)
from geodrift.errors import GeodriftError
from geodrift.jobs.series import CompareRequest, DriftRequest, run_compare, run_drift
from geodrift.jobs.series_results import CompareResult, DriftResult

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


def drift(checkpoints: Sequence[Any], **options: Any) -> Drift:
    """A training series, as ``geodrift drift CKPT1 CKPT2 ...``: each layer's v1/u1 rotation from the first
    checkpoint and each checkpoint's continuity across depth, with noise floors.

    Args:
        checkpoints: two or more checkpoints of one run, in order: paths, ``nn.Module`` s or state dicts.
        options: the keywords :class:`~geodrift.jobs.series.DriftRequest` declares for Python (listed below with
            their defaults, from the declarations ``geodrift drift --help`` shows), and ``progress`` (as
            :func:`geodrift.scan`'s).

    Returns:
        Drift: ``.summary()``, ``.to_frame()``, ``.plot()``, ``.to_dict()`` (the ``--json`` fields), ``.view`` and
        the gauge fixing (``.to_dict()["gauge_fixing"]``).

    Raises:
        GeodriftError: a bad argument (named as its keyword) or checkpoint, before the work.
        TypeError: a keyword ``drift`` does not take.
    """
    progress = options.pop("progress", None)
    given = keywords(DriftRequest, options, "drift")
    with keyword_errors({**given, "progress": progress}), progress_bar(progress) as events:
        if isinstance(checkpoints, (str, Path)) or not isinstance(checkpoints, Sequence):
            raise GeodriftError(f"checkpoints={shown(checkpoints)}: must be a list of two or more checkpoints")
        return Drift.of(run_drift(DriftRequest(checkpoints=list(checkpoints), **given), events))


def compare(a: Any, b: Any, **options: Any) -> Comparison:
    """Two models, as ``geodrift compare A B``: per projection, space and layer, the principal angles between their
    top-``k`` subspaces, with a permutation null and ``k/d``.

    Args:
        a, b: the models (paths, ``nn.Module`` s or state dicts); ``b`` is compared with ``a``.
        options: the keywords :class:`~geodrift.jobs.series.CompareRequest` declares for Python (below), and
            ``progress``.

    Returns:
        Comparison: ``.summary()``, ``.to_frame()``, ``.plot()``, ``.to_dict()`` (the ``--json`` fields).

    Raises:
        GeodriftError: a bad argument (named as its keyword) or model, before the work.
        TypeError: a keyword ``compare`` does not take.
    """
    progress = options.pop("progress", None)
    given = keywords(CompareRequest, options, "compare")
    with keyword_errors({**given, "progress": progress}), progress_bar(progress) as events:
        return Comparison.of(run_compare(CompareRequest(a=a, b=b, **given), events))


_POSITIONAL = inspect.Parameter.POSITIONAL_OR_KEYWORD
drift.__signature__ = face_signature(DriftRequest, [inspect.Parameter("checkpoints", _POSITIONAL)])  # type: ignore[attr-defined]
compare.__signature__ = face_signature(  # type: ignore[attr-defined]
    CompareRequest, [inspect.Parameter("a", _POSITIONAL), inspect.Parameter("b", _POSITIONAL)])
drift.__doc__ = (drift.__doc__ or "") + keywords_doc(DriftRequest)
compare.__doc__ = (compare.__doc__ or "") + keywords_doc(CompareRequest)
