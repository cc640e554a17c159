"""Plumbing shared by every command: files written atomically, output folders and their manifests, the
provenance stamp, literal text, stdout kept for the report, signals, the Ray cluster and option checks.

Nothing here knows about weights or continuity; the maths lives at the package root (``linalg``,
``krylov``, ``metrics``, ``weights``) and in the subpackages. The one error type, ``geodrift.errors``,
stays at the root: it is the public exception users catch.
"""
