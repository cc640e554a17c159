"""Run records and checkpoints, shared by every simulator.

A run writes ``<out>/<slug(label)>/seed<seed>/run.json`` (atomically):

- ``config``: the run's ``RunSpec.to_dict()`` (simulator, label, model, data, train, track),
- ``seed``, ``data``, ``device``, ``versions`` (python, torch, numpy, geodrift), ``git_revision``,
- ``series``: the tidy time series, ``{"columns": SERIES_COLUMNS, "rows": [[...], ...]}``, one row
  per (step, source, role, metric, space, k, layer); ``source`` is ``W`` (weights), ``G`` (this
  step's gradient), ``Gcum``/``EMA<beta>`` (gradient statistics), ``train``/``test``/``eval``;
  ``role`` the projection (``block`` for the MLP, ``attn_q`` ... for the transformer, None for
  losses); ``layer=None`` marks a mean over layers (or adjacent pairs),
- ``summary``: the headline numbers (final values, first-backward-pass values),
- ``timing``: seconds spent training and tracking, ``status``: ``"complete"`` or ``"partial"``,
- ``vectors``: small per-layer vectors for plots (the MLP stores W's v1 at step 0 and at the end).

``report.json`` next to it is the final weights' continuity report (``geodrift.continuity.Report``,
the same table as ``geodrift scan``). ``checkpoint.pt`` holds model, optimiser, scheduler and
tracker state plus the next step, so an interrupted run resumes exactly (bitwise on CPU).
``load_record`` reloads a run for re-rendering without training.

Example:
    >>> rec = RunRecord(label="Res+ReLU", seed=42, config={}, data="mnist5k", device="cpu")
    >>> rec.add_rows([(0, 0.0, "W", "block", "cont", "v", 1, None, 0.05)])
    >>> rec.value("W", "block", "cont", space="v", k=1)
    0.05
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from geodrift.errors import GeodriftError
from geodrift.io.atomic import document, payload_of, write_json, write_stream
from geodrift.io.provenance import git_revision, library_versions

SERIES_COLUMNS = ("step", "epoch", "source", "role", "metric", "space", "k", "layer", "value")
_VALUE = SERIES_COLUMNS.index("value")


@dataclass
class RunRecord:
    """Everything one (configuration, seed) run produced."""

    label: str
    seed: int
    config: dict[str, Any]
    data: str
    device: str
    preset: str | None = None
    versions: dict[str, str] = field(default_factory=lambda: software_versions())
    git_revision: str | None = field(default_factory=lambda: git_revision())
    rows: list[list[Any]] = field(default_factory=list)
    summary: dict[str, float | None] = field(default_factory=dict)
    timing: dict[str, float] = field(default_factory=dict)
    status: str = "partial"
    vectors: dict[str, list[list[float]]] = field(default_factory=dict)

    def add_rows(self, rows: list[Any]) -> None:
        self.rows.extend(list(r) for r in rows)

    def select(self, source: str, role: str | None, metric: str, space: str | None = None, k: int | None = None,
               layer: int | None | str = None) -> list[tuple[int, float]]:
        """``(step, value)`` pairs of one series; ``layer="all"`` keeps every layer's row."""
        return [(r[0], r[_VALUE]) for r in self.rows
                if r[2] == source and r[3] == role and r[4] == metric and r[5] == space and r[6] == k
                and (layer == "all" or r[7] == layer)]

    def value(self, source: str, role: str | None, metric: str, space: str | None = None, k: int | None = None,
              step: int | None = None) -> float:
        """The value at ``step`` (default: the last tracked step); NaN when absent."""
        pairs = self.select(source, role, metric, space, k)
        if step is not None:
            pairs = [p for p in pairs if p[0] == step]
        return float(pairs[-1][1]) if pairs and pairs[-1][1] is not None else float("nan")

    def to_dict(self) -> dict[str, Any]:
        payload = asdict(self)
        payload["series"] = {"columns": list(SERIES_COLUMNS), "rows": payload.pop("rows")}
        return payload

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunRecord:
        data = payload_of(data)
        series = data.pop("series")
        if list(series["columns"]) != list(SERIES_COLUMNS):
            raise GeodriftError(f"run.json: unknown series columns {series['columns']}; written by another version")
        rows = [[float("nan") if (i == _VALUE and v is None) else v for i, v in enumerate(r)] for r in series["rows"]]
        return cls(rows=rows, **data)


def slug(label: str) -> str:
    """A folder-safe name for a label (``Adam β1=0`` -> ``Adam_beta1=0``)."""
    greek: dict[str, str | int | None] = {"β": "beta", "ε": "eps", "σ": "sigma"}
    label = label.translate(str.maketrans(greek))
    return re.sub(r"[^A-Za-z0-9+.=_-]+", "_", label).strip("_") or "run"


def run_dir(out: str | Path, label: str, seed: int) -> Path:
    return Path(out) / slug(label) / f"seed{seed}"


def write_record(out: str | Path, record: RunRecord) -> Path:
    """Write ``run.json`` atomically under ``out``; returns its path."""
    path = run_dir(out, record.label, record.seed) / "run.json"
    write_json(path, document("run_record", record.to_dict()))
    return path


def load_record(path: str | Path) -> RunRecord:
    """Reload a ``run.json`` (or the folder holding it).

    Raises:
        GeodriftError: missing or unreadable file.
    """
    path = Path(path)
    if path.is_dir():
        path = path / "run.json"
    try:
        return RunRecord.from_dict(json.loads(path.read_text(encoding="utf-8")))
    except FileNotFoundError:
        raise GeodriftError(f"{path}: no run record here; run `geodrift simulate mlp|transformer --out DIR` first") from None
    except (json.JSONDecodeError, KeyError, TypeError) as error:
        raise GeodriftError(f"{path}: not a geodrift run record ({error}); delete it and re-run") from None


def load_records(out: str | Path) -> list[RunRecord]:
    """All records under ``out`` (sorted by path)."""
    return [load_record(p) for p in sorted(Path(out).rglob("run.json"))]


def save_checkpoint(path: str | Path, state: dict[str, Any]) -> None:
    """Atomically ``torch.save`` a resumable state (tensors, numbers, strings, lists, dicts)."""
    write_stream(path, lambda file: torch.save(state, file))


def load_checkpoint(path: str | Path) -> dict[str, Any]:
    """Load a checkpoint written by ``save_checkpoint``.

    Raises:
        GeodriftError: unreadable checkpoint.
    """
    try:
        return torch.load(path, map_location="cpu", weights_only=True)  # type: ignore[no-any-return]
    except Exception as error:  # torch raises several types for a corrupt file
        raise GeodriftError(f"{path}: cannot read checkpoint ({type(error).__name__}); delete it to restart") from None


def software_versions() -> dict[str, str]:
    """The versions a run record keeps (python, torch, numpy, geodrift); see :mod:`geodrift.io.provenance`."""
    return library_versions(("torch", "numpy", "geodrift"))
