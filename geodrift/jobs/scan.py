"""The scan job: ``geodrift scan`` and ``geodrift.scan(...)`` both build a :class:`ScanRequest` and call
:func:`run_scan`, so their defaults, checks, errors and numbers are one.

The job checks everything before the work - the request's types, the selection, the figure options,
every output file (named and derived), then, from the model's headers, the layers, the rule for ``k``
and the memory estimate - scans, and stamps the provenance. It writes nothing: the faces render the
result (``geodrift.render.files.write_scan_outputs`` writes the JSON, CSV and figures a request names).

Example:
    >>> result = run_scan(ScanRequest(roles="k", layers="0-2", k=1, null_draws=4))
    >>> result.report.role("attn_k").layers, result.gauge is None
    ([0, 1, 2], True)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from geodrift.errors import GeodriftError
from geodrift.jobs import request as checks
from geodrift.jobs.outputs import experts_plot_path, scan_outputs
from geodrift.jobs.request import DEFAULT_MAX_MEMORY as DEFAULT_MAX_MEMORY
from geodrift.jobs.request import MeasureOptions

if TYPE_CHECKING:  # imported by the CLI before the options are checked: torch loads only once they pass
    from geodrift.continuity import Report
    from geodrift.gauge.diagnose import GaugeDiagnosis


@dataclass(frozen=True)
class ScanRequest(MeasureOptions):
    """Every option of ``geodrift scan`` and of ``geodrift.scan``: the shared ones
    (:class:`~geodrift.jobs.request.MeasureOptions`: selection, measurement, view, names, OV, backend, memory,
    outputs) and the scan's own.

    Attributes:
        model: None (the embedded SmolLM2-135M-Instruct), a path (GGUF, safetensors, a Hugging Face
            folder, a PyTorch pickle), an ``nn.Module`` or a (wrapped) state dict.
        architecture, config: for models whose files (or memory) do not say them.
        full_spectrum, device: the measurement (:class:`~geodrift.continuity.MeasureSpec`).
        skip_nonfinite: skip (and note) matrices holding NaN/Inf instead of refusing the model.
        full: also the gauge diagnosis (``--full``).
        call: the command line or the Python call, for the report's provenance.
    """

    model: Any = None
    architecture: str | None = field(default=None, kw_only=True)
    config: Mapping[str, Any] | None = field(default=None, kw_only=True)
    full_spectrum: bool = field(default=False, kw_only=True)
    device: str = field(default="cpu", kw_only=True)
    skip_nonfinite: bool = field(default=False, kw_only=True)
    full: bool = field(default=False, kw_only=True)
    call: str = field(default="geodrift.jobs.scan.run_scan", kw_only=True)


@dataclass
class ScanResult:
    """What :func:`run_scan` returns: the continuity Report and, with ``full``, the gauge diagnosis (or the
    one line saying why there is none)."""

    report: Report
    gauge: GaugeDiagnosis | str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The JSON report (kind ``continuity_report``): the Report's fields, and ``gauge_diagnosis`` when there is one."""
        from geodrift.gauge.diagnose import GaugeDiagnosis

        diagnosis = {"gauge_diagnosis": self.gauge.to_dict()} if isinstance(self.gauge, GaugeDiagnosis) else {}
        return self.report.to_dict() | diagnosis

    @classmethod
    def from_dict(cls, payload: dict[str, Any]) -> ScanResult:
        """Inverse of :meth:`to_dict`: a ``geodrift scan --json-out`` file's document (``--full`` too), or its payload.

        Raises:
            GeodriftError: not a continuity report.
        """
        from geodrift.io.documents import from_jsonable, read_document

        if "kind" in payload and "schema_version" in payload:
            payload = read_document(payload, kinds=("continuity_report",))
        raw = payload.get("gauge_diagnosis")
        gauge = from_jsonable(GaugeDiagnosis, raw, "/gauge_diagnosis") if isinstance(raw, dict) else None
        return cls(Report.from_dict(payload), gauge)


def check_request(request: ScanRequest, progress: Any = None) -> None:
    """The request's types and the options checked without the model, before anything is opened - and before
    torch is imported: a model path that does not exist, a ``--plot`` suffix, ``--dpi``, ``--max-memory``, ``--view``
    are refused in a fraction of a second (``benchmarks/bench_cli_startup.py``).

    Raises:
        GeodriftError: one line naming the option (``--k: must be an integer ...``).
    """
    checks.existing_model("model", request.model)
    checks.check_options(request, progress, flags=("full_spectrum", "skip_nonfinite", "full"))
    checks.check_architecture(request.architecture, request.names)
    checks.check_text("device", request.device, "cpu", optional=False)
    checks.check_config(request.config)
    checks.memory_limit(request.max_memory)
    checks.check_figure_options(request.plot, request.dpi)


def run_scan(request: ScanRequest, progress: Callable[[str], None] | None = None,
             on_total: Callable[[int], None] | None = None) -> ScanResult:
    """Check, open, scan and stamp: the one scan behind both faces.

    Args:
        request: the options.
        progress: called with ``"role[layer]"`` after each matrix.
        on_total: called once with the number of matrices, before the first.

    Returns:
        ScanResult: the Report (with ``.provenance``: ``request.call``, the time, the model's fingerprint)
        and, with ``request.full``, the gauge diagnosis.

    Raises:
        GeodriftError: any unreadable input or out-of-range option, before the work starts; the message
            names the command-line option.
    """
    check_request(request, progress)  # before anything heavy is imported (a missing file: under a second)
    from geodrift.continuity import MeasureSpec
    from geodrift.io.provenance import report_provenance
    from geodrift.scanner.distributed import RaySource, check_backend
    from geodrift.scanner.gauge_diagnosis import diagnose_checkpoint
    from geodrift.scanner.scan import scan

    roles, layers = checks.role_list(request.roles), checks.layer_list(request.layers)
    check_backend(request.backend, request.address)
    _check_backend(request)
    spec = MeasureSpec(k=request.k, null_draws=request.null_draws, seed=request.seed,
                       full_spectrum=request.full_spectrum, device=request.device)
    limit = checks.memory_limit(request.max_memory)
    checks.check_figure_options(request.plot, request.dpi)
    checks.claim(scan_outputs(request.json_out, request.csv_out, request.plot, experts=False, gauge=request.full),
                 request, (request.model,), every=scan_outputs(request.json_out, request.csv_out, request.plot,
                                                                 gauge=request.full))
    ckpt, ws, heads = _open(request, roles, layers, spec, limit)
    skipped: list[str] = []
    if request.skip_nonfinite:
        ws, skipped = ws.without_bad_tensors()
    if on_total is not None:
        on_total(len(ws))
    ray = RaySource(request.model, request.view, request.names, roles, request.address) \
        if request.backend == "ray" else None
    report = scan(ws, spec, heads=heads, progress=progress, ray=ray)
    report.notes += skipped
    report.provenance = report_provenance(request.call, _fingerprint(request.model, ckpt))
    gauge = diagnose_checkpoint(ckpt, layers) if request.full else None  # distance from the balanced point
    return ScanResult(report, gauge)


def _check_backend(request: ScanRequest) -> None:
    # What the Ray tasks cannot do: a GPU, skipping corrupt matrices, a model that is not a path.
    if request.backend != "ray":
        return
    if request.device != "cpu":
        raise GeodriftError("--device cuda with --backend ray: the Ray tasks request no GPUs yet; use one of the two")
    if request.skip_nonfinite:
        raise GeodriftError("--skip-nonfinite with --backend ray: the Ray tasks read the model themselves; scan "
                            "locally to skip corrupt matrices")
    if not (request.model is None or isinstance(request.model, (str, Path))):
        raise GeodriftError("--backend ray: every Ray task reads the model from its path; pass a path, not a model "
                            "in memory")


def _open(request: ScanRequest, roles: list[str] | None, layers: list[int] | None, spec: Any,
          limit: int) -> tuple[Any, Any, tuple[int, int] | None]:
    # The model's headers: the layers it has, the selection, the head counts, the rule for k, the memory estimate.
    from geodrift.scanner.open import open_model
    from geodrift.scanner.preflight import check_layers, check_plan
    from geodrift.scanner.readers import weightset
    from geodrift.scanner.scan import heads_of
    from geodrift.weights import split_expert_role

    ckpt = open_model(request.model, request.names, request.architecture, request.config)
    every = weightset(ckpt, view=request.view)
    check_layers(layers, sorted({layer for _, layer in every.entries}), ckpt.label)
    ws = every.select(roles, layers)
    heads = heads_of(ckpt) if request.ov else None
    if request.plot is not None and any(split_expert_role(role) for role in ws.roles()):  # a mixture only
        checks.claim([("--plot", experts_plot_path(request.plot))])
    check_plan(ws, spec, heads, limit)
    return ckpt, ws, heads


def _fingerprint(model: Any, ckpt: Any) -> dict[str, Any]:
    # A path's files as given (a folder's weights and config), or the tensors of a model in memory.
    from geodrift.scanner.embedded import embedded_model_path
    from geodrift.scanner.fingerprint import checkpoint_fingerprint, file_fingerprint

    if model is None or isinstance(model, (str, Path)):
        return file_fingerprint(model if model is not None else embedded_model_path())
    return checkpoint_fingerprint(ckpt)
