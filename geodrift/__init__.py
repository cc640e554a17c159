"""geodrift: geometric continuity of weight singular vectors across depth.

Python API: ``geodrift.scan(model_or_path, ...) -> ScanReport`` and ``geodrift.merge(A, B, out=...)``
(``geodrift.api``), ``geodrift.drift([...]) -> Drift`` and ``geodrift.compare(a, b) -> Comparison``
(``geodrift.api_series``), loaded on first use - ``import geodrift`` imports neither torch nor any subpackage.

Importing this package has no side effects (no logging set-up, no device probing), with one
exception for source checkouts, described below.
"""

import os as _os

__version__ = "0.1.0"

# In the source checkout, ``cli/`` and ``proofs/`` are top-level folders that setuptools installs
# as ``geodrift.cli`` / ``geodrift.proofs`` (``package-dir`` in pyproject.toml); a built wheel or an
# editable install maps them for you. But ``python -m pytest`` (or ``python -m geodrift``) run from
# the checkout puts the checkout first on sys.path, so *this* folder shadows the installed package
# and ``geodrift.cli`` would not resolve. Only in that layout (sibling ``cli/__init__.py`` and
# ``proofs/__init__.py`` next to pyproject.toml, and no ``geodrift/cli`` here) the checkout root is
# appended to the package path, so ``geodrift.cli`` / ``geodrift.proofs`` load from the checkout,
# consistent with the rest of ``geodrift`` loading from it. Installed copies never take this branch.
_here = _os.path.dirname(_os.path.abspath(__file__))
_root = _os.path.dirname(_here)
if (
    not _os.path.exists(_os.path.join(_here, "cli"))
    and _os.path.isfile(_os.path.join(_root, "cli", "__init__.py"))
    and _os.path.isfile(_os.path.join(_root, "proofs", "__init__.py"))
    and _os.path.isfile(_os.path.join(_root, "pyproject.toml"))
):
    __path__.append(_root)
del _os, _here, _root


def __getattr__(name: str) -> object:
    # PEP 562: ``geodrift.scan(...)`` works after a bare ``import geodrift`` without importing the
    # scanner (or torch) at import time. ``ScanReport`` is the type geodrift.scan returns. The face
    # itself lives in ``geodrift.api`` (above the scanner, ``geodrift.scanner``, and the renderers).
    import importlib

    if name in ("scan", "ScanReport", "merge", "read"):
        return getattr(importlib.import_module("geodrift.api"), name)
    if name in ("drift", "compare", "Drift", "Comparison"):  # geodrift drift / compare, the same way
        return getattr(importlib.import_module("geodrift.api_series"), name)
    raise AttributeError(f"module 'geodrift' has no attribute {name!r}")
