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
from geodrift.jobs.options import check_fields, flags, kind_of, option, shown

if TYPE_CHECKING:  # this module is imported before any option is checked: nothing that imports torch
    from geodrift.scanner.mapping import NameRule

_EXAMPLES = {"k": "8", "null_draws": "100", "seed": "0", "dpi": "300"}
Progress = Callable[[str], None]
DEFAULT_MAX_MEMORY = "8G"  # the CLI's --max-memory default, and the Python call's
VIEW_HELP = ("raw weights (the paper's metric), folded (norm gains folded in), or canonical (folded, each layer at "
             "the canonical point of its gauge orbit: numbers and verdicts exact reparametrisations leave unchanged). "
             "Default: canonical where geodrift has derived the model's gauge group, else raw with a note.")


# The declared options' own checks, check(field, value) (geodrift.jobs.options.Option.check).
def check_roles(field: str, value: Any) -> None:
    """``--roles``: None, a string or a list of role names."""
    _text_or_list(field, value, 'a string like "q,k" or a list of role names (strings)', str)


def check_layers(field: str, value: Any) -> None:
    """``--layers``: None, a string or a list of layer indices."""
    _text_or_list(field, value, 'a string like "0-9,20" or a list of layer indices', numbers.Integral)


def check_names_option(field: str, value: Any) -> None:
    """``--names``: :func:`check_names`."""
    check_names(value)


def check_view_option(field: str, value: Any) -> None:
    """``--view``: :func:`check_view`."""
    check_view(value)


def check_memory_option(field: str, value: Any) -> None:
    """``--max-memory``: :func:`memory_limit`."""
    memory_limit(value)


def check_plot(field: str, value: Any) -> None:
    """``--plot``: a file name whose suffix names a figure format (its ``--dpi`` is checked with it, after)."""
    check_path(field, value, "a file name ending .png, .pdf or .svg")
    if value is not None:
        from geodrift.io.checks import figure_format

        figure_format(value)


def check_config_option(field: str, value: Any) -> None:
    """``config=``: :func:`check_config`."""
    check_config(value)


@dataclass(frozen=True, kw_only=True)
class MeasureOptions:
    """The options every measuring job shares (``scan``, ``drift``, ``compare``), each declared once
    (:func:`geodrift.jobs.options.option`: its flag, help, default and check make the command line's option, the
    Python keyword and the error wording).

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

    roles: str | list[str] | tuple[str, ...] | None = option(
        None, "--roles", "Projections, e.g. q,k,v,o,gate,up,down; in a mixture of experts also router, expert_gate, "
        "experts (default all).", check=check_roles, cli_type=str | None)
    layers: str | list[int] | tuple[int, ...] | None = option(
        None, "--layers", "Layers, e.g. 0-9,20 (default all).", check=check_layers, cli_type=str | None)
    k: int = option(8, "--k", "Singular vectors per space (k = 1..K).", example="8")
    view: str | None = option(None, "--view", VIEW_HELP, choices=("raw", "folded", "canonical"), check=check_view_option)
    null_draws: int = option(100, "--null-draws", "Permutation-null draws per statistic.", example="100")
    seed: int = option(0, "--seed", "Seed of the permutation null.", example="0")
    names: str | Path | list[NameRule] | None = option(
        None, "--names", "JSON mapping of tensor-name regex -> role, roles named as in --roles.", check=check_names_option,
        cli_type=Path | None)
    ov: bool = option(True, "--ov", "Also measure the OV composite W_O W_V per layer.", cli_decls=("--ov/--no-ov",))
    backend: str = option(
        "local", "--backend", "local (this process) or ray: the checkpoints (drift, compare) or ranges of layers "
        "(scan) as Ray tasks (Ray comes with the sweep extra of geodrift); the numbers are the local run's, bitwise.",
        choices=("local", "ray"), python=False)
    address: str | None = option(
        None, "--address", "With --backend ray: an existing Ray cluster (auto or HOST:PORT); every node must read the "
        "checkpoints at the same paths. Default: a local cluster of this machine's CPUs.", example="auto", python=False)
    max_memory: str | int = option(
        DEFAULT_MAX_MEMORY, "--max-memory", "Refuse to start a run whose memory estimate exceeds this (e.g. 8G, 512M); "
        "raise it to allow larger --null-draws/--k.", check=check_memory_option, cli_type=str)
    json_out: str | Path | None = option(None, "--json-out", "Also write the JSON report here.", python=False,
                                         cli_type=Path | None)
    csv_out: str | Path | None = option(None, "--csv", "Write the result's tidy rows to this CSV.", python=False,
                                        cli_type=Path | None)
    plot: str | Path | None = option(None, "--plot", "Write the figures (.png, .pdf or .svg).", check=check_plot,
                                     python=False, cli_type=Path | None)
    dpi: int = option(300, "--dpi", "Resolution of PNG figures, dots per inch (and of any raster part of a PDF/SVG).",
                      example="300", python=False)


# Each request field -> the command-line option that sets it (fields no command line has are absent).
OPTIONS = flags(MeasureOptions)


def check_options(options: MeasureOptions, events: Any) -> None:
    """Every field of a measuring request (:func:`geodrift.jobs.options.check_fields`) and the progress
    (:func:`geodrift.jobs.events.check_events`), before anything is opened.

    Raises:
        GeodriftError: one line naming the option (``--k: must be an integer ...``).
    """
    from geodrift.jobs.events import check_events

    check_fields(options)
    check_events(events)


def flag_of(field: str) -> str:
    """How a message names a request field: its command-line option (``k`` -> ``--k``), or the keyword."""
    return OPTIONS.get(field, field)


def refuse(field: str, value: Any, what: str) -> GeodriftError:
    """The one-line error of a wrong field: ``--k: what`` for an option, ``config={...}: what`` for a keyword."""
    return GeodriftError(f"{OPTIONS[field]}: {what}" if field in OPTIONS else f"{field}={shown(value)}: {what}")


def check_integer(field: str, value: Any) -> None:
    """An integer (not a bool).

    Raises:
        GeodriftError: e.g. ``--k: must be an integer (e.g. --k 8), got a float``.
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        example = f"{flag_of(field)} {_EXAMPLES.get(field, '1')}"
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
