"""Option checks shared by every command: ranges named after their command-line option.

Each function raises :class:`geodrift.errors.GeodriftError` with one line naming the option, what
was expected and what was given, so a bad option fails before any work starts.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

from geodrift.errors import GeodriftError

# torch.Generator.manual_seed accepts [-2**63, 2**64 - 1]; geodrift's seeds are the non-negative part.
SEED_MAX = 2**64 - 1
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)i?b?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}
_KINDS = {stat.S_IFIFO: "a FIFO (named pipe)", stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device",
          stat.S_IFSOCK: "a socket", stat.S_IFDIR: "a folder"}
# The figure formats, by file suffix (``--plot`` and every other figure option).
FORMATS = {".png": "png", ".pdf": "pdf", ".svg": "svg"}


def check_seed(seed: int, option: str = "--seed") -> int:
    """``seed`` if it is in ``[0, 2**64 - 1]`` (what a torch generator takes).

    Example:
        >>> check_seed(42)
        42
    """
    if not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed <= SEED_MAX:
        raise GeodriftError(f"{option}: must be an integer in [0, 2**64 - 1], got {seed}")
    return seed


def check_count(value: int | None, option: str, minimum: int = 1, what: str = "") -> int | None:
    """``value`` if it is None or at least ``minimum``; ``what`` explains a special value (``0 = off``).

    Example:
        >>> check_count(5, "--steps")
        5
    """
    if value is not None and value < minimum:
        note = f" ({what})" if what else ""
        raise GeodriftError(f"{option}: must be >= {minimum}{note}, got {value}")
    return value


def parse_size(text: str, option: str = "--max-memory") -> int:
    """``"8G"``, ``"512MB"``, ``"1.5GiB"`` or a plain byte count -> bytes (binary units).

    Example:
        >>> parse_size("2G")
        2147483648
    """
    match = _SIZE.match(text)
    if match is None:
        raise GeodriftError(f"{option}: cannot read {text!r}; write a size like 8G, 512M or 2.5G")
    size = int(float(match.group(1)) * _UNITS[match.group(2).lower()])
    if size <= 0:
        raise GeodriftError(f"{option}: must be a positive size, got {text!r}")
    return size


def format_size(n_bytes: float) -> str:
    """Bytes in the largest binary unit that keeps the number >= 1 (``"3.2 GiB"``)."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if abs(n_bytes) < 1024 or unit == "PiB":
            return f"{n_bytes:.0f} {unit}" if unit == "B" else f"{n_bytes:.1f} {unit}"
        n_bytes /= 1024
    return f"{n_bytes:.1f} PiB"


# What --view accepts (geodrift.scanner.readers.VIEWS is this; cli/choices.py View mirrors it).
VIEWS = ("raw", "folded", "canonical")


def missing_model(path: str | Path) -> GeodriftError:
    """The one error for a model path that does not exist (the readers' and the jobs' early check).

    Example:
        >>> print(missing_model("nope.gguf"))
        nope.gguf: no such file or folder; pass a .gguf/.safetensors file or a model folder
    """
    return GeodriftError(f"{path}: no such file or folder; pass a .gguf/.safetensors file or a model folder")


def check_file(path: Path, what: str = "checkpoint file") -> os.stat_result:
    """``os.stat`` of ``path``, refusing anything but a regular file (never opens it).

    Args:
        path: the file about to be opened.
        what: how to name it in the message (``"shard"``, ``"config.json"`` ...).

    Returns:
        The stat result (``st_size`` is the file's size).

    Raises:
        GeodriftError: a missing path, or a FIFO, device, socket or folder where a file is expected.
    """
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise GeodriftError(f"{path}: {what} not found; check the path (or re-download the model)") from None
    except OSError as error:
        raise GeodriftError(f"{path}: cannot stat the {what} ({error.strerror}); check the path") from None
    if not stat.S_ISREG(info.st_mode):
        kind = _KINDS.get(stat.S_IFMT(info.st_mode), "not a regular file")
        raise GeodriftError(f"{path}: expected the {what} to be a regular file, found {kind}; pass the file itself")
    return info


def check_device(name: str, option: str = "--device") -> str:
    """The torch device ``name`` stands for: ``cpu``, ``cuda``/``cuda:N`` (when present) or ``auto``.

    Raises:
        GeodriftError: CUDA asked for but not available, a CUDA index out of range, or an unknown name.

    Example:
        >>> check_device("cpu")
        'cpu'
    """
    import torch

    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    kind, _, index = name.partition(":")
    if kind == "cpu" and not index:
        return "cpu"
    if kind != "cuda" or (index and not index.isdigit()):
        raise GeodriftError(f"{option}: unknown {name!r}; use cpu, cuda (cuda:N) or auto")
    if not torch.cuda.is_available():
        raise GeodriftError(f"{option} {name}: no CUDA device is available to this torch build; use {option} cpu")
    if index and int(index) >= torch.cuda.device_count():
        raise GeodriftError(f"{option} {name}: this machine has {torch.cuda.device_count()} CUDA device(s); "
                            f"use cuda:0 .. cuda:{torch.cuda.device_count() - 1}")
    return name


def figure_format(path: str | Path, option: str = "--plot") -> str:
    """The format named by ``path``'s suffix.

    Raises:
        GeodriftError: for a suffix other than .png, .pdf, .svg (the message names ``option``).

    Example:
        >>> figure_format("fig.PDF")
        'pdf'
    """
    suffix = Path(path).suffix.lower()
    if suffix not in FORMATS:
        raise GeodriftError(f"{option} {path}: cannot tell the figure format from {suffix or 'a name without suffix'!r};"
                            " end the file name with .png, .pdf or .svg")
    return FORMATS[suffix]


def check_dpi(dpi: int) -> int:
    """``dpi`` if it is a sensible resolution (50-1200).

    Raises:
        GeodriftError: otherwise, naming ``--dpi``.
    """
    if not 50 <= dpi <= 1200:
        raise GeodriftError(f"--dpi: {dpi} is outside 50-1200; 300 suits print, 150 a screen")
    return dpi
