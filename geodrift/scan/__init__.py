"""The scanner: checkpoints (GGUF, safetensors, HF folders) read as streamed WeightSets and measured.

``readers`` opens any supported file and maps its tensors through the ``names`` tables to canonical
keys; ``fold`` gives the folded (norm gains in) view; ``scan`` runs ``geodrift.continuity.measure``
with the OV composite. ``embedded`` locates the embedded SmolLM2-135M-Instruct GGUF. ``api`` is the
Python API, reached as ``geodrift.scan(model_or_path, ...)``.

This package object is itself callable: ``geodrift.scan(...)`` is ``geodrift.scan.api.scan(...)``.
``geodrift.scan`` has to be both the subpackage (the import system sets that attribute whenever a
``geodrift.scan.*`` module is imported, overwriting any function of the same name) and the API
function; a module subclass with ``__call__`` makes both true without importing torch here.
"""

from __future__ import annotations

import sys
import types
from typing import Any


class _CallablePackage(types.ModuleType):
    def __call__(self, model: Any = None, **options: Any) -> Any:
        """Scan a model: see :func:`geodrift.scan.api.scan` (same arguments, returns a ScanReport)."""
        from geodrift.scan.api import scan

        return scan(model, **options)


sys.modules[__name__].__class__ = _CallablePackage
