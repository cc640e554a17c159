"""The jobs over several checkpoints: ``geodrift drift`` (a training series) and ``geodrift compare`` (two models).

Each command builds a request (:class:`DriftRequest`, :class:`CompareRequest`) and calls one job
(:func:`run_drift`, :func:`run_compare`), which checks the request (types, selection, figure options,
every output file), then reads and measures each checkpoint once (:mod:`geodrift.scanner.series`, which
checks the layers, shapes, ``k`` and memory from the headers before any SVD). A Python caller gets the
same checks and numbers: the requests take models in memory (``nn.Module``, state dicts) as well as paths.

Example:
    >>> rep = run_drift(DriftRequest([None, None], roles="k", layers="0-2", k=1, null_draws=4))
    >>> [round(row.abs_cos, 6) for row in rep.rotation][:2]  # the same checkpoint twice: nothing rotated
    [1.0, 1.0]
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from geodrift.jobs import request as checks
from geodrift.jobs.outputs import compare_outputs, drift_outputs
from geodrift.jobs.request import MeasureOptions

if TYPE_CHECKING:  # imported by the CLI before the options are checked: torch loads only once they pass
    from geodrift.continuity import MeasureSpec
    from geodrift.jobs.series_results import CompareResult, DriftResult


@dataclass(frozen=True, kw_only=True)
class SeriesOptions(MeasureOptions):
    """What ``drift`` and ``compare`` share: the measuring options (:class:`~geodrift.jobs.request.MeasureOptions`)
    and ``align``, which brings every model into the first one's gauge first (llama/mistral), with the per-head
    maps ``head_maps`` (``orthogonal``, ``general`` or ``none``; :data:`geodrift.gauge.align.DEFAULT_HEAD_MAPS`)."""

    align: bool = False
    head_maps: str = "orthogonal"


@dataclass(frozen=True)
class DriftRequest(SeriesOptions):
    """``geodrift drift CKPT1 CKPT2 ...``: two or more checkpoints of one training run, in order (paths, modules
    or state dicts); ``k`` defaults to 4 (vectors kept per checkpoint)."""

    checkpoints: Sequence[Any] = ()
    k: int = field(default=4, kw_only=True)

    def __post_init__(self) -> None:
        object.__setattr__(self, "checkpoints", tuple(self.checkpoints))


@dataclass(frozen=True)
class CompareRequest(SeriesOptions):
    """``geodrift compare A B``: two models (paths, modules or state dicts); ``k`` is the subspace dimension."""

    a: Any = None
    b: Any = None


def check_request(request: DriftRequest | CompareRequest, progress: Any = None) -> None:
    """The request's types, its models' paths and the options checked without the models - before torch is imported.

    Raises:
        GeodriftError: one line naming the option or the missing file.
    """
    models = request.checkpoints if isinstance(request, DriftRequest) else (request.a, request.b)
    for model in models:
        checks.existing_model("model", model)
    checks.check_options(request, progress, flags=("align",))
    checks.memory_limit(request.max_memory)
    checks.check_figure_options(request.plot, request.dpi)


def _check(options: DriftRequest | CompareRequest, progress: Any) -> tuple[MeasureSpec, dict[str, Any]]:
    # The request checked (check_request), then the measurement and the series options.
    check_request(options, progress)
    from geodrift.continuity import MeasureSpec

    spec = MeasureSpec(k=options.k, null_draws=options.null_draws, seed=options.seed)
    series = {"roles": checks.role_list(options.roles), "layers": checks.layer_list(options.layers),
              "view": options.view, "ov": options.ov, "names": options.names,
              "max_memory": checks.memory_limit(options.max_memory)}
    return spec, series


def run_drift(request: DriftRequest, progress: Callable[[str], None] | None = None) -> DriftResult:
    """A training series: each checkpoint's continuity and each layer's v1/u1 rotation from the first.

    Args:
        request: the checkpoints and options.
        progress: called after each matrix (``"role[layer]"``).

    Returns:
        DriftResult: the :func:`geodrift.scanner.series.drift` report, its rows marked with the view, the gauge
        fixing and each space's gauge status (:mod:`geodrift.jobs.series_results`).

    Raises:
        GeodriftError: a bad option or output file (before anything is read), fewer than 2 checkpoints, an
            unreadable checkpoint, checkpoints of different shapes or layers (from the headers).
    """
    spec, series = _check(request, progress)
    from geodrift.jobs.series_results import DriftResult
    from geodrift.scanner.series import drift

    checks.claim(drift_outputs(request.json_out, request.csv_out, request.plot), request, tuple(request.checkpoints))
    return DriftResult.of(drift(list(request.checkpoints), spec, progress=progress, backend=request.backend,
                                address=request.address, align=request.align, head_maps=request.head_maps, **series))


def run_compare(request: CompareRequest, progress: Callable[[str], None] | None = None) -> CompareResult:
    """Two models: per projection, space and layer, the principal angles between their top-k subspaces.

    Args:
        request: the models and options.
        progress: called after each matrix.

    Returns:
        CompareResult: the :func:`geodrift.scanner.series.compare` report, marked as :func:`run_drift`'s.

    Raises:
        GeodriftError: a bad option or output file (before anything is read), an unreadable model, shared
            projections of different shapes, no projection in common.
    """
    spec, series = _check(request, progress)
    from geodrift.jobs.series_results import CompareResult
    from geodrift.scanner.series import compare

    checks.claim(compare_outputs(request.json_out, request.csv_out, request.plot), request, (request.a, request.b))
    return CompareResult.of(compare(request.a, request.b, spec, progress=progress, backend=request.backend,
                                    address=request.address, align=request.align, head_maps=request.head_maps,
                                    **series))
