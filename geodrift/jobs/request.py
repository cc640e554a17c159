"""What every job checks of its request before any work: types, selections, figure options, output files.

A request (``ScanRequest``, ``DriftRequest`` ...) is built by either face: the CLI from typer's parsed
options, the Python API from keyword arguments. Typer has already checked the CLI's types; a Python
caller may pass anything (``k=2.5``, ``roles=["q", 3]``), which would otherwise end in a TypeError
deep in the measurement. The checks here run first and raise one :class:`~geodrift.errors.GeodriftError`
each, naming the option as the command line spells it (``--k: must be an integer ...``); the Python
face re-words the option as its keyword with the value given (``k=2.5: ...``,
:func:`geodrift.api.keyword_errors`). Options no command line has (``model`` objects, ``config``,
``architecture``, ``progress``) are named as keywords with their value at once.

Example:
    >>> check_integer("k", 2.5)
    Traceback (most recent call last):
    geodrift.errors.GeodriftError: --k: must be an integer (e.g. --k 8), got a float
"""

from __future__ import annotations

import errno
import numbers
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from geodrift.errors import GeodriftError

if TYPE_CHECKING:  # this module is imported before any option is checked: nothing that imports torch
    from geodrift.scanner.mapping import NameRule

# Each request field -> the command-line option that sets it (fields no command line has are absent).
OPTIONS = {"roles": "--roles", "layers": "--layers", "k": "--k", "null_draws": "--null-draws", "seed": "--seed",
           "view": "--view", "names": "--names", "ov": "--ov", "full_spectrum": "--full-spectrum",
           "device": "--device", "skip_nonfinite": "--skip-nonfinite", "max_memory": "--max-memory",
           "backend": "--backend", "address": "--address", "full": "--full", "align": "--align", "head_maps": "--head-maps",
           "json_out": "--json-out", "csv_out": "--csv", "plot": "--plot", "dpi": "--dpi"}
_EXAMPLES = {"k": "8", "null_draws": "100", "seed": "0", "dpi": "300"}
Progress = Callable[[str], None]
DEFAULT_MAX_MEMORY = "8G"  # the CLI's --max-memory default, and the Python call's


@dataclass(frozen=True, kw_only=True)
class MeasureOptions:
    """The options every measuring job shares (``scan``, ``drift``, ``compare``), with the command line's defaults.

    Attributes:
        roles, layers: the selection: ``"q,k"`` or a list of role names; ``"0-9,20"`` or a list of indices
            (None: all).
        k, null_draws, seed: the measurement (:class:`~geodrift.continuity.MeasureSpec`).
        view: ``raw`` (the paper's metric), ``folded`` or ``canonical``; None (the default): canonical where
            geodrift has derived the model's gauge group, else raw with a note
            (:func:`geodrift.scanner.canonical_view.resolve_view`).
        names: a ``--names`` JSON mapping (path) or its rules, for tensor names nothing recognises.
        ov: also the OV composite ``W_O W_V`` (needs the head counts).
        backend, address: ``local``, or ``ray`` at ``address``; Ray tasks read the models from their paths.
        max_memory: the memory estimate's limit (``"8G"`` or bytes).
        json_out, csv_out, plot, dpi: the files to write (claimed by the job, written by the renderer).
    """

    roles: str | list[str] | tuple[str, ...] | None = None
    layers: str | list[int] | tuple[int, ...] | None = None
    k: int = 8
    view: str | None = None
    null_draws: int = 100
    seed: int = 0
    names: str | Path | list[NameRule] | None = None
    ov: bool = True
    backend: str = "local"
    address: str | None = None
    max_memory: str | int = DEFAULT_MAX_MEMORY
    json_out: str | Path | None = None
    csv_out: str | Path | None = None
    plot: str | Path | None = None
    dpi: int = 300


def check_options(options: MeasureOptions, progress: Any, flags: tuple[str, ...] = ()) -> None:
    """The types of the shared options (and of the job's own ``flags``), before anything is opened.

    Raises:
        GeodriftError: one line naming the option (``--k: must be an integer ...``).
    """
    check_names(options.names)
    for name in ("k", "null_draws", "seed"):
        check_integer(name, getattr(options, name))
    for name in ("ov", *flags):
        check_flag(name, getattr(options, name))
    check_selection(options.roles, options.layers)
    check_view(options.view)
    check_text("backend", options.backend, "local", optional=False)
    check_text("address", options.address, "auto")
    check_progress(progress)
    for name in ("json_out", "csv_out"):
        check_path(name, getattr(options, name))


def option(field: str) -> str:
    """How a message names a request field: its command-line option (``k`` -> ``--k``), or the keyword."""
    return OPTIONS.get(field, field)


def shown(value: Any) -> str:
    """An argument as a call would show it: short reprs as they are, long ones cut, long lists elided, other
    objects by their type.

    Example:
        >>> shown(list(range(94))), shown(Path("m.gguf")), shown(object())
        ('[0, 1, 2, ... (94 in all)]', "'m.gguf'", '<object>')
    """
    if isinstance(value, (list, tuple)) and len(value) > 6:
        return f"[{', '.join(map(repr, value[:3]))}, ... ({len(value)} in all)]"
    if value is None or isinstance(value, (str, int, float, bool, list, tuple)):
        text = repr(value)
        return text if len(text) <= 80 else text[:60] + f"... ({len(text)} characters)"
    if isinstance(value, Path):
        return repr(str(value))
    return f"<{type(value).__name__}>"


def kind_of(value: Any) -> str:
    """``a float``, ``an int``: the type of a wrong value, for a message."""
    name = type(value).__name__
    return f"an {name}" if name[:1].lower() in "aeiou" else f"a {name}"


def refuse(field: str, value: Any, what: str) -> GeodriftError:
    """The one-line error of a wrong field: ``--k: what`` for an option, ``config={...}: what`` for a keyword."""
    return GeodriftError(f"{OPTIONS[field]}: {what}" if field in OPTIONS else f"{field}={shown(value)}: {what}")


def check_integer(field: str, value: Any) -> None:
    """An integer (not a bool).

    Raises:
        GeodriftError: e.g. ``--k: must be an integer (e.g. --k 8), got a float``.
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        example = f"{option(field)} {_EXAMPLES.get(field, '1')}"
        raise refuse(field, value, f"must be an integer (e.g. {example}), got {kind_of(value)}")


def check_flag(field: str, value: Any) -> None:
    """True or False.

    Raises:
        GeodriftError: e.g. ``--ov: must be True or False, got a str``.
    """
    if not isinstance(value, bool):
        raise refuse(field, value, f"must be True or False, got {kind_of(value)}")


def check_text(field: str, value: Any, example: str, optional: bool = True) -> None:
    """A string (or None when ``optional``).

    Raises:
        GeodriftError: e.g. ``architecture=3: must be a string such as 'llama', got an int``.
    """
    if not (isinstance(value, str) or (optional and value is None)):
        raise refuse(field, value, f"must be a string such as {example!r}, got {kind_of(value)}")


def check_path(field: str, value: Any, what: str = "a file name", optional: bool = True) -> None:
    """A path: a str or a Path (or None when ``optional``). Whether it can be written is the output
    policy's question (:func:`claim`), whether it can be read its reader's.

    Raises:
        GeodriftError: e.g. ``--json-out: must be a file name, got an int``.
    """
    if not (isinstance(value, (str, Path)) or (optional and value is None)):
        raise refuse(field, value, f"must be {what}, got {kind_of(value)}")
    if value is not None and (not str(value) or not Path(value).name):
        raise refuse(field, value, f"must be {what}, got {shown(str(value))}")
    if value is not None and "\x00" in str(value):
        raise refuse(field, value, "a path cannot hold a NUL character")


def existing_model(field: str, value: Any) -> None:
    """A model given as a path must exist (refused here, before torch is imported, with the readers' message);
    a model in memory (a module, a state dict) and None (the embedded model) pass.

    Raises:
        GeodriftError: ``nope.gguf: no such file or folder; pass a .gguf/.safetensors file or a model folder``.
    """
    if not isinstance(value, (str, Path)):
        return
    usable_path(field, value)
    if not Path(value).expanduser().exists():
        from geodrift.io.checks import missing_model

        raise missing_model(Path(value).expanduser())


def usable_path(field: str, value: str | Path) -> None:
    """A path the OS can look up (a missing one is reported later, by what reads it): no NUL, not too long.

    Raises:
        GeodriftError: ``model='a\\x00b': a path cannot hold a NUL character``.
    """
    if "\x00" in str(value):
        raise refuse(field, value, "a path cannot hold a NUL character")
    try:
        os.stat(Path(value).expanduser())
    except FileNotFoundError:
        return
    except OSError as error:
        if error.errno in (errno.ENAMETOOLONG, errno.ELOOP, errno.EACCES, errno.ENOTDIR):
            raise refuse(field, value, f"not a usable path ({error.strerror})") from None


def check_selection(roles: Any, layers: Any) -> None:
    """``roles`` and ``layers`` as either face gives them: None, a string (``"q,k"``, ``"0-9,20"``) or a list.

    Raises:
        GeodriftError: ``--roles: must be a string like "q,k" or a list of role names (strings), got an int in
            the list``.
    """
    _text_or_list("roles", roles, 'a string like "q,k" or a list of role names (strings)', str)
    _text_or_list("layers", layers, 'a string like "0-9,20" or a list of layer indices', numbers.Integral)


def _text_or_list(field: str, value: Any, what: str, item: type | Any) -> None:
    if value is None or isinstance(value, str):
        return
    if not isinstance(value, (list, tuple)):
        raise refuse(field, value, f"must be {what}, got {kind_of(value)}")
    bad = [x for x in value if not isinstance(x, item) or isinstance(x, bool)]
    if bad:
        raise refuse(field, value, f"must be {what}, got {kind_of(bad[0])} in the list")


def check_view(view: Any) -> None:
    """One of the views the scanner reads weights in (``geodrift.scanner.readers.VIEWS``), or None (the default).

    Raises:
        GeodriftError: ``--view: 'cooked' is not a view; use raw, folded or canonical``.
    """
    from geodrift.io.checks import VIEWS

    if view is not None and (not isinstance(view, str) or view not in VIEWS):
        raise GeodriftError(f"--view: {view!r} is not a view; use {', '.join(VIEWS[:-1])} or {VIEWS[-1]}")


def role_list(roles: str | list[str] | tuple[str, ...] | None) -> list[str] | None:
    """The canonical roles of a ``--roles`` string or a list of role names (None = all).

    Example:
        >>> role_list(["q", "gate"]), role_list("k")
        (['attn_q', 'mlp_gate'], ['attn_k'])
    """
    from geodrift.scanner.scan import parse_roles

    return parse_roles(roles if isinstance(roles, str) or roles is None else ",".join(roles))


def layer_list(layers: str | list[int] | tuple[int, ...] | None) -> list[int] | None:
    """The layers of a ``--layers`` string (``"0-9,20"``) or a list of indices, sorted (None = all).

    Raises:
        GeodriftError: ``--layers: [-1] are not layer indices (integers >= 0); ...``.

    Example:
        >>> layer_list([3, 1, 3]), layer_list("0-2")
        ([1, 3], [0, 1, 2])
    """
    from geodrift.scanner.scan import parse_layers

    if layers is None or isinstance(layers, str):
        return parse_layers(layers)
    bad = [x for x in layers if not isinstance(x, numbers.Integral) or isinstance(x, bool) or x < 0]
    if bad:
        raise GeodriftError(f"--layers: {shown(bad)} are not layer indices (integers >= 0); "
                            "pass e.g. [0, 1, 2] or \"0-9,20\"")
    return sorted({int(x) for x in layers})


def check_names(value: Any) -> None:
    """A ``--names`` mapping: a JSON file's path or a list of :class:`~geodrift.scanner.mapping.NameRule`.

    Raises:
        GeodriftError: ``--names: must be the path of a JSON mapping (regex -> role) or a list of NameRule, ...``.
    """
    if value is None:
        return
    if isinstance(value, (str, Path)):
        usable_path("names", value)
        if not Path(value).expanduser().exists():  # the mapping reader's words, before torch is imported
            raise GeodriftError(f"{Path(value).expanduser()}: name mapping file not found; pass an existing JSON file "
                                "to --names")
        return
    from geodrift.scanner.mapping import NameRule

    if isinstance(value, list) and all(isinstance(rule, NameRule) for rule in value):
        return
    raise refuse("names", value, "must be the path of a JSON mapping (regex -> role) or a list of NameRule, got "
                 f"{kind_of(value)}")


def check_architecture(value: Any, names: Any) -> None:
    """``architecture=``: a string, and - without a ``names`` mapping to map its tensors - one geodrift has names for.

    Raises:
        GeodriftError: ``architecture='foo': unknown architecture; the known ones are llama, mistral, ...``.

    Example:
        >>> check_architecture("gemma2", None)
    """
    check_text("architecture", value, "llama")
    from geodrift.scanner.names import ARCHITECTURE_ALIASES, ARCHITECTURES

    if value is None or names is not None or value in ARCHITECTURES or value in ARCHITECTURE_ALIASES:
        return
    raise refuse("architecture", value, f"unknown architecture; the known ones are {', '.join(ARCHITECTURES)} - "
                 "or pass names= (a mapping of tensor names to roles) to scan one geodrift does not know")


def check_config(value: Any) -> None:
    """config.json-style hyperparameters for a model in memory: a dict with string keys (or None).

    Raises:
        GeodriftError: ``config=['x']: must be a dict of config.json keys (...), got a list``.
    """
    if value is None:
        return
    if not isinstance(value, Mapping):
        raise refuse("config", value, "must be a dict of config.json keys (e.g. {'num_attention_heads': 32}), got "
                     f"{kind_of(value)}")
    bad = [key for key in value if not isinstance(key, str)]
    if bad:
        raise refuse("config", value, f"keys must be strings (config.json keys), got {kind_of(bad[0])}")


def check_progress(value: Any) -> None:
    """A progress callback: a function that can be called with one string, or None - checked before any work, so a
    callback of the wrong signature is named, not found by a TypeError after the first matrix.

    Raises:
        GeodriftError: ``progress='x': must be a function taking one string (e.g. print) or None, got a str``.

    Example:
        >>> check_progress(lambda: None)
        Traceback (most recent call last):
        geodrift.errors.GeodriftError: progress=<function>: must be a function taking one string (e.g. print), but it \
cannot be called with one argument (takes 0 positional arguments but 1 was given)
    """
    if value is not None and not callable(value):
        raise refuse("progress", value, f"must be a function taking one string (e.g. print) or None, got "
                     f"{kind_of(value)}")
    if value is None:
        return
    import inspect

    try:
        signature = inspect.signature(value)
    except (TypeError, ValueError):  # a builtin or an extension's callable without one: trusted
        return
    try:
        signature.bind("attn_q[0]")
    except TypeError as error:
        shown_value = "<function>" if inspect.isfunction(value) or inspect.ismethod(value) else shown(value)
        raise GeodriftError(f"progress={shown_value}: must be a function taking one string (e.g. print), but it "
                            f"cannot be called with one argument ({_arguments_error(error)})") from None


def _arguments_error(error: TypeError) -> str:
    # inspect's "missing a required argument: 'b'" / "too many positional arguments", as Python's own call says it.
    text = str(error)
    return {"too many positional arguments": "takes 0 positional arguments but 1 was given"}.get(text, text)


def as_path(value: Any) -> Any:
    """A path-like object (``os.PathLike``) or a bytes path as a Path; any other value as it is.

    Example:
        >>> as_path(b"models/m.gguf"), as_path(3)
        (PosixPath('models/m.gguf'), 3)
    """
    if isinstance(value, (bytes, os.PathLike)) and not isinstance(value, Path):
        try:
            return Path(os.fsdecode(os.fspath(value)))
        except (TypeError, ValueError):
            return value
    return value


def memory_limit(value: Any) -> int:
    """``--max-memory`` in bytes: a size text (``"8G"``, ``"512M"``) or a positive number of bytes.

    Raises:
        GeodriftError: ``--max-memory: ...`` for anything else.

    Example:
        >>> memory_limit("1K"), memory_limit(2048)
        (1024, 2048)
    """
    from geodrift.io.checks import parse_size

    if isinstance(value, str):
        return parse_size(value)
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value <= 0:
        raise refuse("max_memory", value, f"must be a size such as '8G' or a positive number of bytes, got "
                     f"{shown(value)}")
    return int(value)


def check_figure_options(plot: Any, dpi: Any) -> None:
    """``--plot``'s suffix and ``--dpi``, before the work rather than after it.

    Raises:
        GeodriftError: ``--plot f.gif: cannot tell the figure format ...``, ``--dpi: 5 is outside 50-1200 ...``.
    """
    check_path("plot", plot, "a file name ending .png, .pdf or .svg")
    check_integer("dpi", dpi)
    if plot is not None:
        from geodrift.io.checks import check_dpi, figure_format

        figure_format(plot)
        check_dpi(int(dpi))


def claim(outputs: list[tuple[str, Path]], options: MeasureOptions | None = None, inputs: tuple[Any, ...] = (),
          every: list[tuple[str, Path]] | None = None) -> None:
    """Claim every output file, named and derived, before the work (:func:`geodrift.io.outdir.claim_outputs`):
    no two resolving to one file, none an input, each writable and absent or geodrift's own.

    Args:
        outputs: the files claimed now.
        options: the request, whose ``--json-out``/``--csv``/``--plot`` the messages quote.
        inputs: the models read (paths; other objects are skipped).
        every: every file the run may write, when more than ``outputs`` (checked to be distinct).

    Raises:
        GeodriftError: naming the options and the user's paths.
    """
    from geodrift.io.outdir import check_distinct, claim_outputs

    named = {} if options is None else {"--json-out": options.json_out, "--csv": options.csv_out,
                                        "--plot": options.plot}
    paths = [item for item in inputs if isinstance(item, (str, Path))]
    if every is not None:
        check_distinct(every, named, paths)
    claim_outputs(outputs, named=named, inputs=paths)
