"""The Python API: ``geodrift.scan(model_or_path, ...) -> ScanReport``, for notebooks and scripts.

``geodrift.scan`` is this package made callable (see ``geodrift/scanner/__init__.py``): it takes what a
researcher holds - a path (GGUF, safetensors, a Hugging Face folder, a PyTorch pickle), an
``nn.Module`` (its ``state_dict()``; a Hugging Face model's ``config`` gives the head counts for the
OV composite) or a state dict, bare or wrapped (``{"model": ...}``, ``{"state_dict": ...}``) - and
runs the same scan as ``geodrift scan``. ``report.summary()`` is the table of verdicts (one row per
projection and space), ``report.to_frame()`` the tidy per-pair DataFrame, ``report.plot()`` the
``--plot`` figure. Errors name the keyword argument (``layers=``), not the command-line option.

This module is a face of the package, like the CLI: it sits above ``render`` (tests/test_layering.py).

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

from geodrift.continuity import MeasureSpec, Report
from geodrift.errors import GeodriftError
from geodrift.io.provenance import report_provenance
from geodrift.scanner.arguments import check_memory, check_scan_arguments, claim_figure
from geodrift.scanner.checkpoint import Checkpoint
from geodrift.scanner.fingerprint import checkpoint_fingerprint
from geodrift.scanner.mapping import NameRule, load_name_mapping
from geodrift.scanner.preflight import check_k, plan_shapes
from geodrift.scanner.readers import VIEWS, open_checkpoint, weightset
from geodrift.scanner.safetensors_reader import StateDictCheckpoint
from geodrift.scanner.scan import heads_of, parse_layers, parse_roles
from geodrift.scanner.scan import scan as scan_weights
from geodrift.scanner.state_dict import module_config, unwrap_state_dict

# The options of geodrift.scan named as the CLI names them in messages -> their keyword argument.
KEYWORDS = {"--roles": "roles=", "--layers": "layers=", "--k": "k=", "--null-draws": "null_draws=",
            "--seed": "seed=", "--view": "view=", "--names": "names="}
_FLAG = re.compile("|".join(re.escape(flag) + r"\b(?!-)" for flag in sorted(KEYWORDS, key=len, reverse=True)))
# An option followed by a number ("use --k 32 or less") reads as a keyword with its value ("use k=32 or less").
_FLAG_VALUE = re.compile(f"(?:{_FLAG.pattern}) (?=\\d)")
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
            text = f"{name}{_shown(given[name[:-1]])}{text[first.end():]}"
        text = _FLAG_VALUE.sub(lambda m: KEYWORDS[m.group(0)[:-1]], text)
        raise GeodriftError(_FLAG.sub(lambda m: KEYWORDS[m.group(0)], text)) from None


def _shown(value: Any) -> str:
    # An argument as a call shows it; long lists elided.
    if isinstance(value, (list, tuple)) and len(value) > 6:
        return f"[{', '.join(map(repr, value[:3]))}, ... ({len(value)} in all)]"
    if value is None or isinstance(value, (str, int, float, bool, Path, list, tuple)):
        return repr(str(value) if isinstance(value, Path) else value)
    return f"<{type(value).__name__}>"


def _layer_list(layers: str | list[int] | None) -> list[int] | None:
    if layers is None or isinstance(layers, str):
        return parse_layers(layers)
    bad = [x for x in layers if not isinstance(x, int) or isinstance(x, bool) or x < 0]
    if bad:
        raise GeodriftError(f"--layers: {_shown(bad)} are not layer indices (integers >= 0); "
                            "pass e.g. [0, 1, 2] or \"0-9,20\"")
    return sorted(set(layers))


def open_model(model: Any = None, names: str | Path | list[NameRule] | None = None,
               architecture: str | None = None, config: dict[str, Any] | None = None) -> Checkpoint:
    """Open anything :func:`scan` accepts as a Checkpoint (headers only for files; no copy for tensors).

    Args:
        model: None (the embedded SmolLM2-135M), a path, an ``nn.Module`` or a (wrapped) state dict.
        names: a ``--names`` JSON mapping (path or rules) for unknown tensor names.
        architecture: override the detected architecture (e.g. ``"gemma"``).
        config: for an in-memory state dict or module, config.json-style hyperparameters (e.g.
            ``json.load(open("config.json"))``): the head counts enable the OV composite.

    Returns:
        The Checkpoint.

    Raises:
        GeodriftError: an unreadable path, an object that is none of these, a state dict without tensors.
    """
    rules = load_name_mapping(names) if isinstance(names, (str, Path)) else names
    if model is None or isinstance(model, (str, Path)):
        return open_checkpoint(model, names=rules, architecture=architecture)
    import torch

    if isinstance(model, torch.nn.Module):
        label = f"{type(model).__name__} (in memory)"
        return StateDictCheckpoint(unwrap_state_dict(model.state_dict(), label), label,
                                   config if config is not None else module_config(model), rules, architecture)
    if isinstance(model, Mapping):
        label = "state dict (in memory)"
        return StateDictCheckpoint(unwrap_state_dict(model, label), label, config, rules, architecture)
    raise GeodriftError(
        f"geodrift.scan: cannot scan a {type(model).__name__}; pass a path (.gguf, .safetensors, a Hugging Face "
        "folder, a .pt/.bin pickle), an nn.Module or a state dict"
    )


def scan(model: Any = None, *, roles: str | list[str] | None = None, layers: str | list[int] | None = None,
         k: int = 8, null_draws: int = 100, seed: int = 0, view: str | None = None,
         names: str | Path | list[NameRule] | None = None, architecture: str | None = None,
         config: dict[str, Any] | None = None, ov: bool = True, full_spectrum: bool = False,
         progress: Callable[[str], None] | None = None) -> ScanReport:
    """Scan a model: per-projection continuity with noise floors, verdicts and trajectory shape.

    The same measurement as ``geodrift scan`` (one code path): the top-k singular triplets of every
    projection, Eq. 1-3 with the permutation null and the random floor ``sqrt(2/(pi d))``, the
    theory's verdicts with their criteria, and App. A.2's trajectory shape.

    Args:
        model: None (the embedded SmolLM2-135M-Instruct), a path, an ``nn.Module`` or a state dict
            (bare, or wrapped as ``{"model": ...}`` / ``{"state_dict": ...}``).
        roles: ``"q,k,gate"``, ``["q", "attn_k"]``, ``"router,experts"`` (the ``--roles`` names,
            ``geodrift.weights.ROLE_NAMES``, or canonical ones; None = all).
        layers: ``"0-9,20"`` or ``[0, 1, ...]`` (None = all).
        k, null_draws, seed, full_spectrum: as :class:`geodrift.continuity.MeasureSpec`.
        view: ``"raw"`` (the paper's metric), ``"folded"`` (norm gains folded into the projections) or
            ``"canonical"`` (folded, then each layer at the canonical point of its gauge orbit: numbers and
            verdicts that exact reparametrisations leave unchanged; docs/verdicts.md); None (the default):
            canonical where geodrift has derived the model's gauge group, else raw with a note saying why.
        names: a ``--names`` mapping for unknown tensor names; architecture: override the detected one.
        config: config.json-style hyperparameters for an in-memory state dict (head counts for OV).
        ov: also measure the OV composite ``W_O W_V`` (needs the head counts from a config).
        progress: called with ``"role[layer]"`` after each matrix.

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
    given = {"roles": roles, "layers": layers, "k": k, "null_draws": null_draws, "seed": seed, "view": view,
             "architecture": architecture, "ov": ov, "full_spectrum": full_spectrum}
    check_scan_arguments(model=model, names=names, config=config, progress=progress, **given)  # types, up front
    defaults = {"roles": None, "layers": None, "k": 8, "null_draws": 100, "seed": 0, "view": None,
                "architecture": None, "ov": True, "full_spectrum": False}
    call = "geodrift.scan(" + ", ".join([_shown(model)] * (model is not None) + [
        f"{name}={_shown(value)}" for name, value in given.items() if value != defaults[name]]) + ")"
    with keyword_errors(given):
        spec = MeasureSpec(k=k, null_draws=null_draws, seed=seed, full_spectrum=full_spectrum)
        role_list = parse_roles(roles if isinstance(roles, str) or roles is None else ",".join(roles))
        layer_list = _layer_list(layers)
        if view is not None and view not in VIEWS:
            raise GeodriftError(f"--view: {view!r} is not a view; use raw, folded or canonical")
        ckpt = open_model(model, names, architecture, config)
        ws = weightset(ckpt, view=view).select(role_list, layer_list)
        check_k(plan_shapes(ws, heads_of(ckpt) if ov else None), spec, ws.origin)  # the CLI's rule for k
        check_memory(ws, spec, heads_of(ckpt) if ov else None)  # the CLI's estimate, before any matrix is read
        report = ScanReport.of(scan_weights(ws, spec, progress=progress, heads=heads_of(ckpt) if ov else None))
    report.provenance = report_provenance(call, checkpoint_fingerprint(ckpt))
    return report
