"""The Python API's arguments checked up front: a wrong type or value is one GeodriftError naming the keyword.

``geodrift.scan(..., k=2.5)`` would otherwise end in a TypeError deep in the measurement, and
``roles=["q", 3]`` in an AttributeError in the name parser. :func:`check_scan_arguments` runs before
anything is opened; the value ranges themselves (``k >= 1``, ``null_draws`` in [2, 2^40], a seed of
64 bits, known roles and layers) are the CLI's own checks (``MeasureSpec``, ``parse_roles``,
``parse_layers``), which run next and are renamed to the keyword by ``geodrift.scanner.api.keyword_errors``.

Example:
    >>> check_scan_arguments(k=2.5)
    Traceback (most recent call last):
    geodrift.errors.GeodriftError: k=2.5: must be an integer (e.g. k=8), got a float
"""

from __future__ import annotations

import errno
import numbers
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from geodrift.errors import GeodriftError

_INTEGERS = {"k": "k=8", "null_draws": "null_draws=100", "seed": "seed=0"}
_FLAGS = ("ov", "full_spectrum")


def check_scan_arguments(**given: Any) -> None:
    """Check the types of :func:`geodrift.scan`'s keyword arguments (those given; others are skipped).

    Args:
        given: keyword -> value as the caller passed it (``roles``, ``layers``, ``k``, ``null_draws``,
            ``seed``, ``model`` (a path is checked for NUL characters), ``names``, ``architecture``, ``config``, ``ov``, ``full_spectrum``, ``progress``).

    Raises:
        GeodriftError: ``<keyword>=<value>: <what was expected>, got <what was found>``.

    Example:
        >>> check_scan_arguments(roles="q,k", layers=[0, 1], k=2, progress=print)
        >>> check_scan_arguments(roles=["q", 3])
        Traceback (most recent call last):
        geodrift.errors.GeodriftError: roles=['q', 3]: must be a string like "q,k" or a list of role names (strings), \
got an int in the list
    """
    for name in ("model", "names"):
        if isinstance(given.get(name), (str, Path)):
            _usable_path(name, given[name])
    for name, example in _INTEGERS.items():
        if name in given:
            _integer(name, given[name], example)
    for name in _FLAGS:
        if name in given and not isinstance(given[name], bool):
            raise _error(name, given[name], f"must be True or False, got {_kind(given[name])}")
    if "roles" in given:
        _text_or_list("roles", given["roles"], 'a string like "q,k" or a list of role names (strings)', str)
    if "layers" in given:
        _text_or_list("layers", given["layers"], 'a string like "0-9,20" or a list of layer indices', numbers.Integral)
    if "architecture" in given and not isinstance(given["architecture"], (str, type(None))):
        raise _error("architecture", given["architecture"], f"must be a string such as 'llama', got "
                     f"{_kind(given['architecture'])}")
    if "names" in given:
        _names(given["names"])
    if "config" in given:
        _config(given["config"])
    if "progress" in given and given["progress"] is not None and not callable(given["progress"]):
        raise _error("progress", given["progress"], "must be a function taking one string (e.g. print) or None, "
                     f"got {_kind(given['progress'])}")


def _usable_path(name: str, value: str | Path) -> None:
    # A path the OS can look up (a missing one is reported later, by what reads it): no NUL, not too long.
    if "\x00" in str(value):
        raise _error(name, value, "a path cannot hold a NUL character")
    try:
        os.stat(Path(value).expanduser())
    except FileNotFoundError:
        return
    except OSError as error:
        if error.errno in (errno.ENAMETOOLONG, errno.ELOOP, errno.EACCES, errno.ENOTDIR):
            raise _error(name, value, f"not a usable path ({error.strerror})") from None


def _integer(name: str, value: Any, example: str) -> None:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise _error(name, value, f"must be an integer (e.g. {example}), got {_kind(value)}")


def _text_or_list(name: str, value: Any, what: str, item: type | Any) -> None:
    if value is None or isinstance(value, str):
        return
    if not isinstance(value, (list, tuple)):
        raise _error(name, value, f"must be {what}, got {_kind(value)}")
    bad = [x for x in value if not isinstance(x, item) or isinstance(x, bool)]
    if bad:
        raise _error(name, value, f"must be {what}, got {_kind(bad[0])} in the list")


def _names(value: Any) -> None:
    from geodrift.scanner.mapping import NameRule

    if value is None or isinstance(value, (str, Path)):
        return
    if isinstance(value, list) and all(isinstance(rule, NameRule) for rule in value):
        return
    raise _error("names", value, "must be the path of a JSON mapping (regex -> role) or a list of NameRule, got "
                 f"{_kind(value)}")


def _config(value: Any) -> None:
    if value is None:
        return
    if not isinstance(value, Mapping):
        raise _error("config", value, f"must be a dict of config.json keys (e.g. {{'num_attention_heads': 32}}), got "
                     f"{_kind(value)}")
    bad = [key for key in value if not isinstance(key, str)]
    if bad:
        raise _error("config", value, f"keys must be strings (config.json keys), got {_kind(bad[0])}")


def _kind(value: Any) -> str:
    name = type(value).__name__
    return f"an {name}" if name[:1].lower() in "aeiou" else f"a {name}"


def _error(name: str, value: Any, what: str) -> GeodriftError:
    return GeodriftError(f"{name}={_shown(value)}: {what}")


def _shown(value: Any) -> str:
    # An argument as a call would show it: short reprs as they are, long lists elided, other objects by type.
    if isinstance(value, (list, tuple)) and len(value) > 6:
        return f"[{', '.join(map(repr, value[:3]))}, ... ({len(value)} in all)]"
    if value is None or isinstance(value, (str, int, float, bool, list, tuple)):
        text = repr(value)
        return text if len(text) <= 80 else text[:60] + f"... ({len(text)} characters)"
    if isinstance(value, Path):
        return repr(str(value))
    return f"<{type(value).__name__}>"


def claim_figure(path: str | Path | None, dpi: Any, overwrite: Any) -> None:
    """``ScanReport.plot``'s arguments, and the output-file policy of the CLI (:func:`geodrift.io.outdir.claim_outputs`):
    a file geodrift did not write is replaced only with ``overwrite=True``.

    Raises:
        GeodriftError: ``path``, ``dpi`` or ``overwrite`` of the wrong type; an unsupported suffix or dpi; a
            file at ``path`` that geodrift did not write.
    """
    if not isinstance(overwrite, bool):
        raise _error("overwrite", overwrite, f"must be True or False, got {_kind(overwrite)}")
    _integer("dpi", dpi, "dpi=300")
    if path is None:
        return
    if not isinstance(path, (str, Path)):
        raise _error("path", path, f"must be a file name (.png, .pdf or .svg), got {_kind(path)}")
    _usable_path("path", path)
    from geodrift.io.outdir import claim_outputs
    from geodrift.render.figures import check_dpi, figure_format

    named = f"plot(path={_shown(path)})"
    figure_format(path, named.removesuffix(")") + ", ...):")
    try:
        check_dpi(int(dpi))
    except GeodriftError as error:
        raise GeodriftError(str(error).replace("--dpi:", f"dpi={dpi}:")) from None
    claim_outputs([(named, Path(path))], overwrite=overwrite,
                  fix="pass overwrite=True to replace it, or choose another name (nothing was written)")


API_MEMORY_LIMIT = 8 << 30  # the CLI's default --max-memory


def check_memory(ws: Any, spec: Any, heads: tuple[int, int] | None, limit: int = API_MEMORY_LIMIT) -> None:
    """The CLI's memory estimate (``geodrift.scanner.preflight``) for a Python call, before any matrix is read: a
    ``null_draws=10**12`` is refused in one line, not an allocation that never ends.

    Raises:
        GeodriftError: naming the keywords and the estimate.
    """
    from geodrift.continuity.budget import estimate_bytes
    from geodrift.io.checks import format_size
    from geodrift.scanner.preflight import plan_shapes

    estimate = estimate_bytes(plan_shapes(ws, heads), spec)
    if estimate > limit:
        raise GeodriftError(f"null_draws={spec.null_draws}, k={spec.k}: this scan would need about "
                            f"{format_size(estimate)}, above the {format_size(limit)} a Python call may use; lower "
                            "null_draws (or k, layers)")
