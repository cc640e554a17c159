"""The Python API: ``geodrift.scan(model_or_path, ...) -> ScanReport``, for notebooks and scripts.

``geodrift.scan`` (reached as ``geodrift.scan`` through ``geodrift/__init__.py``) takes what a
researcher holds - a path (GGUF, safetensors, a Hugging Face folder, a PyTorch pickle), an
``nn.Module`` (its ``state_dict()``; a Hugging Face model's ``config`` gives the head counts for the
OV composite) or a state dict, bare or wrapped (``{"model": ...}``, ``{"state_dict": ...}``) - and
builds the :class:`~geodrift.jobs.scan.ScanRequest` that ``geodrift scan`` builds and runs the same job,
:func:`~geodrift.jobs.scan.run_scan`: the defaults, checks, errors and numbers of the two faces are one. ``report.summary()`` is the table of verdicts (one row per
projection and space), ``report.to_frame()`` the tidy per-pair DataFrame, ``report.plot()`` the
``--plot`` figure. Errors name the keyword argument (``layers=``), not the command-line option.

This module is a face of the package, like the CLI: it sits above ``render`` and ``jobs`` (tests/test_layering.py).

Example::

    import geodrift
    report = geodrift.scan("path/to/model", layers="0-9")
    report.summary()
    report.plot("scan.png")
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from geodrift.continuity import Report
from geodrift.errors import GeodriftError
from geodrift.jobs.request import as_path, check_integer, kind_of, shown, usable_path
from geodrift.jobs.scan import DEFAULT_MAX_MEMORY, ScanRequest, run_scan
from geodrift.scanner.mapping import NameRule

# The options of geodrift.scan named as the CLI names them in messages -> their keyword argument.
KEYWORDS = {"--roles": "roles=", "--layers": "layers=", "--k": "k=", "--null-draws": "null_draws=",
            "--seed": "seed=", "--view": "view=", "--names": "names=", "--ov": "ov=", "--full-spectrum": "full_spectrum=",
            "--device": "device=", "--skip-nonfinite": "skip_nonfinite=", "--max-memory": "max_memory=",
            "--dpi": "dpi=", "--align": "align=", "--head-maps": "head_maps="}
_FLAG = re.compile("|".join(re.escape(flag) + r"\b(?!-)" for flag in sorted(KEYWORDS, key=len, reverse=True)))
# An option followed by a number or a device ("use --k 32 or less", "use --device cpu") reads as a keyword with
# its value ("use k=32 or less", "use device=cpu").
# Switches a message advises turning on ("skip it with --skip-nonfinite") read as the keyword set to True.
_SWITCHES = {"--skip-nonfinite": "skip_nonfinite=True", "--full-spectrum": "full_spectrum=True"}
_FLAG_VALUE = re.compile(f"(?:{_FLAG.pattern}) (?=\\d|cuda|cpu)")
FIGURE_KINDS = ("continuity", "trajectory", "experts")


@dataclass(repr=False)
class ScanReport(Report):
    """What :func:`scan` returns: the continuity :class:`~geodrift.continuity.Report` (``.summary()``,
    ``.to_frame()``, ``.role("q")``, ``.to_dict()``) with its figure, :meth:`plot`."""

    @classmethod
    def of(cls, report: Report) -> ScanReport:
        """``report`` (e.g. ``Report.from_dict`` of a ``geodrift scan --json`` file) as a ScanReport."""
        return cls(**{f.name: getattr(report, f.name) for f in fields(Report)})

    def plot(self, path: str | Path | None = None, *, kind: str = "continuity", dpi: int = 300,
             overwrite: bool = False) -> Any:
        """The figures of ``geodrift scan --plot`` (matplotlib, imported now): ``kind="continuity"`` is
        ``--plot FILE``, ``"trajectory"`` its ``FILE_trajectory`` figure, ``"experts"`` (a mixture of
        experts) its ``FILE_experts`` figure.

        Args:
            path: also write the figure there (.png, .pdf or .svg, atomically); None: only return it.
            kind: ``"continuity"`` (|cos| of adjacent layers across depth, per projection), ``"trajectory"``
                or ``"experts"`` (each expert across depth, and the experts of each layer compared).
            dpi: resolution of a written raster figure.
            overwrite: replace ``path`` even when geodrift did not write it (else such a file is refused).

        Returns:
            The ``matplotlib.figure.Figure`` (open: ``fig.show()``, or shown by a notebook).

        Raises:
            GeodriftError: an unknown ``kind``, a report without a trajectory or without experts, an
                unsupported suffix or dpi, a ``path`` holding a file geodrift did not write (without
                ``overwrite=True``).
        """
        claim_figure(path, dpi, overwrite)
        from geodrift.render.experts_plot import experts_figure
        from geodrift.render.figures import save_figure, style
        from geodrift.render.scan_plot import continuity_figure, trajectory_figure
        from geodrift.weights import split_expert_role

        if kind not in FIGURE_KINDS:
            raise GeodriftError(f"plot(kind={kind!r}): unknown kind; use one of {', '.join(FIGURE_KINDS)}")
        if kind == "trajectory" and not self.trajectory:
            raise GeodriftError("plot(kind='trajectory'): this report has no trajectory (it needs a projection "
                                "with at least 3 layers)")
        if kind == "experts" and not any(split_expert_role(r.role) for r in self.roles):
            raise GeodriftError("plot(kind='experts'): this report has no experts (it is not a mixture of experts, "
                                "or roles= left out the experts' projections)")
        figures = {"continuity": continuity_figure, "trajectory": trajectory_figure, "experts": experts_figure}
        with style():
            fig = figures[kind](self)
            if path is not None:
                save_figure(fig, path, dpi, close=False)
        return fig


@contextlib.contextmanager
def keyword_errors(given: Mapping[str, Any]) -> Iterator[None]:
    """Re-raise a GeodriftError with the options named as :func:`scan`'s keyword arguments: a message that
    starts ``--k: ...`` starts ``k=0: ...`` (the value as given, a long list elided); ``--roles`` elsewhere
    in it reads ``roles=``, and ``--k 32`` reads ``k=32``.

    Example:
        >>> with keyword_errors({"layers": list(range(94))}):
        ...     raise GeodriftError("--layers: 90 not in m.gguf")
        Traceback (most recent call last):
        geodrift.errors.GeodriftError: layers=[0, 1, 2, ... (94 in all)]: 90 not in m.gguf
    """
    try:
        yield
    except GeodriftError as error:
        text = str(error)
        first = _FLAG.match(text)
        if first and text[first.end():first.end() + 1] == ":" and KEYWORDS[first.group(0)][:-1] in given:
            name = KEYWORDS[first.group(0)]
            text = f"{name}{shown(given[name[:-1]])}{text[first.end():]}"
        text = _FLAG_VALUE.sub(lambda m: KEYWORDS[m.group(0)[:-1]], text)
        raise GeodriftError(_FLAG.sub(lambda m: _SWITCHES.get(m.group(0), KEYWORDS[m.group(0)]), text)) from None


def scan(model: Any = None, *, roles: str | list[str] | None = None, layers: str | list[int] | None = None,
         k: int = ScanRequest.k,
         null_draws: int = ScanRequest.null_draws, seed: int = ScanRequest.seed, view: str | None = ScanRequest.view,
         names: str | Path | list[NameRule] | None = None, architecture: str | None = None,
         config: dict[str, Any] | None = None, ov: bool = ScanRequest.ov,
         full_spectrum: bool = ScanRequest.full_spectrum, device: str = ScanRequest.device,
         skip_nonfinite: bool = ScanRequest.skip_nonfinite, max_memory: str | int = DEFAULT_MAX_MEMORY,
         progress: bool | Callable[[str], None] | None = None) -> ScanReport:
    """Scan a model: per-projection continuity with noise floors, verdicts and trajectory shape.

    The same job as ``geodrift scan`` (:func:`geodrift.jobs.scan.run_scan`, one code path, the same defaults
    and checks): the top-k singular triplets of every projection, Eq. 1-3 with the permutation null and the
    random floor ``sqrt(2/(pi d))``, the theory's verdicts with their criteria, and App. A.2's trajectory shape.

    Args:
        model: None (the embedded SmolLM2-135M-Instruct), a path (str, bytes or any ``os.PathLike``), an
            ``nn.Module`` or a state dict (bare, or wrapped as ``{"model": ...}`` / ``{"state_dict": ...}``) whose
            values are tensors, numpy arrays or lists of numbers (converted; anything else at a weight's name is
            refused).
        roles: ``"q,k,gate"``, ``["q", "attn_k"]``, ``"router,experts"`` (the ``--roles`` names,
            ``geodrift.weights.ROLE_NAMES``, or canonical ones; None = all).
        layers: ``"0-9,20"`` or ``[0, 1, ...]`` (None = all).
        k, null_draws, seed, full_spectrum, device: as :class:`geodrift.continuity.MeasureSpec`.
        view: ``"raw"`` (the paper's metric), ``"folded"`` (norm gains folded into the projections) or
            ``"canonical"`` (folded, then each layer at the canonical point of its gauge orbit: numbers and
            verdicts that exact reparametrisations leave unchanged; docs/verdicts.md); None (the default):
            canonical where geodrift has derived the model's gauge group, else raw with a note saying why.
        names: a ``--names`` mapping for unknown tensor names; architecture: override the detected one.
        config: config.json-style hyperparameters for an in-memory state dict (head counts for OV).
        ov: also measure the OV composite ``W_O W_V`` (needs the head counts from a config).
        skip_nonfinite: skip (and list in ``.notes``) matrices holding NaN/Inf instead of refusing the model.
        max_memory: refuse a scan whose memory estimate exceeds this (``"8G"``, ``"512M"`` or bytes).
        progress: ``True``: a progress bar (tqdm's - the notebook widget in Jupyter - where tqdm is installed, else
            geodrift's on stderr; :class:`geodrift.render.progress.PythonProgress`); a function: called with
            ``"role[layer]"`` after each matrix (checked first: it must take one argument); None or False (the default): silent.

    Returns:
        ScanReport (a ``geodrift.continuity.Report``): ``.roles``, ``.role("q")``, ``.summary()``, ``.plot()``,
        ``.to_frame()``, ``.to_dict()``, ``.provenance`` (this call, the time, the model's fingerprint,
        ``geodrift.scanner.fingerprint``); for a mixture of experts, each expert's roles among ``.roles`` and the
        experts of each layer compared in ``.across_experts`` (docs/models.md).

    Raises:
        GeodriftError: any unreadable input or out-of-range option, checked before the work starts; the
            message names the keyword argument (``layers=``).

    Example:
        >>> import geodrift  # doctest: +SKIP
        >>> k = geodrift.scan(layers="0-3", null_draws=20).role("attn_k")  # doctest: +SKIP
        >>> k.verdict, k.path_verdict  # shared frame; depth path: 4 layers are too few to judge  # doctest: +SKIP
        ('holds', 'n/a')
    """
    model, names = as_path(model), as_path(names)  # a path-like object or a bytes path is a path
    given: dict[str, Any] = {"roles": roles, "layers": layers, "k": k, "null_draws": null_draws, "seed": seed, "view": view,
             "architecture": architecture, "ov": ov, "full_spectrum": full_spectrum, "device": device,
             "skip_nonfinite": skip_nonfinite, "max_memory": max_memory}
    defaults = {f.name: f.default for f in fields(ScanRequest)}
    call = "geodrift.scan(" + ", ".join([shown(model)] * (model is not None) + [
        f"{name}={shown(value)}" for name, value in given.items() if _differs(value, defaults[name])]) + ")"
    request = ScanRequest(model=model, names=names, config=config, call=call, **given)
    with keyword_errors({**given, "names": names, "config": config, "progress": progress}), \
            progress_bar(progress, "scanning") as (advance, on_total):
        return ScanReport.of(run_scan(request, advance, on_total).report)


@contextlib.contextmanager
def progress_bar(progress: Any, title: str) -> Iterator[tuple[Any, Callable[[int], None] | None]]:
    """The job's callbacks for a ``progress=`` keyword: ``True`` draws a bar (:class:`~geodrift.render.progress.PythonProgress`,
    counting matrices), a function is called with each matrix's label, None or False is silent; anything else
    reaches the job's own check (``progress=...: must be ...``)."""
    if progress is True:
        from geodrift.render.progress import PythonProgress

        with PythonProgress(title, "matrices") as bar:
            yield bar.advance, bar.set_total
        return
    yield (None if progress is False else progress), None


def _differs(value: Any, default: Any) -> bool:
    # Whether a keyword was given a value other than its default; any object (a tensor's == is elementwise).
    return not (type(value) is type(default) and value == default)


def claim_figure(path: str | Path | None, dpi: Any, overwrite: Any) -> None:
    """``ScanReport.plot``'s arguments, and the output-file policy of the CLI (:func:`geodrift.io.outdir.claim_outputs`):
    a file geodrift did not write is replaced only with ``overwrite=True``.

    Raises:
        GeodriftError: ``path``, ``dpi`` or ``overwrite`` of the wrong type; an unsupported suffix or dpi; a
            file at ``path`` that geodrift did not write.
    """
    from geodrift.io.checks import check_dpi, figure_format
    from geodrift.io.outdir import claim_outputs

    if not isinstance(overwrite, bool):
        raise GeodriftError(f"overwrite={shown(overwrite)}: must be True or False, got {kind_of(overwrite)}")
    with keyword_errors({"dpi": dpi}):
        check_integer("dpi", dpi)
    if path is None:
        return
    if not isinstance(path, (str, Path)):
        raise GeodriftError(f"path={shown(path)}: must be a file name (.png, .pdf or .svg), got {kind_of(path)}")
    named = f"plot(path={shown(path)})"
    with keyword_errors({"path": path}):
        usable_path("path", path)
    figure_format(path, named.removesuffix(")") + ", ...):")
    with keyword_errors({"dpi": dpi}):
        check_dpi(int(dpi))
    claim_outputs([(named, Path(path))], overwrite=overwrite,
                  fix="pass overwrite=True to replace it, or choose another name (nothing was written)")


# geodrift.merge's keywords as the command line names them in messages.
MERGE_KEYWORDS = {"--base": "base=", "--method": "method=", "--align": "align=", "--weights": "weights=", "--t": "t=",
                  "--density": "density=", "--scale": "scale=", "--out": "out=", "--max-memory": "max_memory=",
                  "--force": "force="}
_MERGE_FLAG = re.compile("|".join(re.escape(f) + r"\b(?!-)" for f in sorted(MERGE_KEYWORDS, key=len, reverse=True)))


def merge(*models: str | Path | None, out: str | Path, base: str | Path | None = None, method: str = "linear",
          align: str = "auto", weights: tuple[float, ...] | list[float] | None = None, t: float = 0.5,
          density: float = 0.5, scale: float = 1.0, seed: int = 0, force: bool = False,
          max_memory: str = "8G") -> Any:
    """``geodrift merge`` from Python: the same job (:func:`geodrift.jobs.merge.run_merge`), checks and folder.

    Example::

        import geodrift
        result = geodrift.merge("ft-a", "ft-b", base="base", method="ties", out="merged")
        print("\\n".join(result.lines()))

    Returns:
        The :class:`~geodrift.merging.run.MergeResult` (the pre-merge check per model, the files written).

    Raises:
        GeodriftError: as the command, with options named as keywords (``base=``, ``out=``).
    """
    from geodrift.jobs.merge import MergeRequest, run_merge

    request = MergeRequest(models=tuple(models), out=None if out is None else Path(out), base=base, method=method,
                           align=align, weights=None if weights is None else tuple(float(w) for w in weights), t=t,
                           density=density, scale=scale, seed=seed, force=force, max_memory=max_memory)
    given = {"base": base, "method": method, "align": align, "weights": weights, "t": t, "density": density,
             "scale": scale, "out": out, "max_memory": max_memory, "force": force}
    try:
        return run_merge(request)
    except GeodriftError as error:
        text = str(error)
        first = _MERGE_FLAG.match(text)
        if first and text[first.end():first.end() + 1] == ":":  # "--base: ..." -> "base=None: ..."
            text = f"{MERGE_KEYWORDS[first.group(0)]}{shown(given[MERGE_KEYWORDS[first.group(0)][:-1]])}{text[first.end():]}"
        text = re.sub(f"({_MERGE_FLAG.pattern}) ", lambda m: MERGE_KEYWORDS[m.group(1)], text)  # "--method ties"
        raise GeodriftError(_MERGE_FLAG.sub(lambda m: MERGE_KEYWORDS[m.group(0)], text)) from None


# What each kind of JSON document is read back as: the type its command's job returns.
_READERS = {
    "continuity_report": ("geodrift.jobs.scan", "ScanResult"),
    "drift_report": ("geodrift.scanner.series", "DriftReport"),
    "compare_report": ("geodrift.scanner.series", "CompareReport"),
    "inventory": ("geodrift.jobs.inspect", "Inventory"),
    "proofs": ("geodrift.prove.runner", "ProveReport"),
    "compress_prune": ("geodrift.compress.prune", "PruneResult"),
    "compress_share": ("geodrift.compress.share_run", "ShareResult"),
    "run_record": ("geodrift.sim.record", "RunRecord"),
}


def read(source: str | Path | Mapping[str, Any]) -> Any:
    """Read back any JSON document geodrift wrote, as the object its command returns.

    ``scan --json-out`` (``--full`` too) gives a :class:`~geodrift.jobs.scan.ScanResult` (``.report``, a
    :class:`ScanReport`; ``.gauge``, the gauge diagnosis or None); ``drift``/``compare`` a ``DriftReport`` /
    ``CompareReport``; ``inspect --json`` an ``Inventory``; ``prove --json`` a ``ProveReport``; ``compress
    prune|share`` a ``PruneResult``/``ShareResult``; a run's ``run.json`` a ``RunRecord``. The tables of
    ``simulate``/``sweep``/``reproduce`` (kinds ``reproduction``, ``paper_reproduction``) come back as the JSON
    object. Numbers written as null because they were NaN or infinite come back as they were.

    Args:
        source: the file's path (str, bytes or os.PathLike), or the object ``json.load`` gave.

    Raises:
        GeodriftError: not a geodrift document, a newer MAJOR schema, or a document that does not have the fields of
            its kind - naming the file.

    Example:
        >>> read({"schema_version": "1.2", "kind": "paper_reproduction", "mode": "smoke"})["mode"]
        'smoke'
    """
    import importlib

    from geodrift.io.atomic import payload_of
    from geodrift.io.documents import from_jsonable, read_document

    source = as_path(source)
    doc = read_document(source)
    where = str(source) if isinstance(source, Path) else "the document"
    if doc["kind"] not in _READERS:
        return doc
    module, name = _READERS[doc["kind"]]
    cls = getattr(importlib.import_module(module), name)
    payload = payload_of(doc)
    try:
        if doc["kind"] == "continuity_report":
            result = cls.from_dict(doc)
            result.report = ScanReport.of(result.report)
            return result
        if doc["kind"] == "run_record":
            return cls.from_dict(payload)
        if doc["kind"] == "inventory":
            from geodrift.scanner.inventory import TensorRow

            return cls(**{**{k: payload[k] for k in ("model", "format", "architecture", "summary")},
                          "tensors": from_jsonable(list[TensorRow], payload["tensors"], "/tensors")})
        made = from_jsonable(cls, {**payload, "saved": None} if "saved" in payload else payload)
        if "saved" in payload:
            from geodrift.compress.saved import saved_from_dict

            made.saved = saved_from_dict(doc["kind"].removeprefix("compress_"), payload["saved"])
        return made
    except (KeyError, TypeError) as error:
        raise GeodriftError(f"{where}: a {doc['kind']} document without the fields this geodrift reads ({error})") \
            from None
    except GeodriftError as error:
        raise GeodriftError(f"{where}: {error}") from None
