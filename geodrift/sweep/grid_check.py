"""A grid file checked whole before any run starts: bounded parsing, then every value's type and range.

``geodrift sweep GRID`` used to start the sweep on the first table it could build and let each run
fail on a bad value one by one (``lr = "fast"``, ``seeds = [2**70]``, an unknown data set), or die
in the parser (deep nesting, bytes that are not UTF-8). Here the file is

- refused before it is opened when it is not a regular file (a FIFO would block the read), or
  larger than :data:`MAX_GRID_BYTES`;
- decoded as strict UTF-8 and parsed with its nesting bounded (:data:`MAX_DEPTH`);
- then every field of every table is checked against its dataclass type and the range the command
  line enforces for the same option (:data:`RANGES`), seeds as ``--seeds``, data sets as ``--data``,
  activations as ``--ablation activation=...``, and the sweep's size (:data:`MAX_JOBS`) and each
  model's parameter count (:data:`MAX_PARAMETERS`) against fixed bounds.

Each refusal is one line naming the file, the key and the value expected.

Example:
    >>> check_field("lr", "fast", "float", "--grid g.toml: configs[0].train")
    Traceback (most recent call last):
    ...
    geodrift.errors.GeodriftError: --grid g.toml: configs[0].train.lr: expected a number > 0, got 'fast'
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from geodrift.errors import GeodriftError
from geodrift.io.checks import check_file, check_seed

MAX_GRID_BYTES = 1 << 20
MAX_DEPTH = 16
MAX_JOBS = 100_000
MAX_PARAMETERS = 1 << 31  # 8 GiB of float32 weights, before gradients and optimiser state
# field -> (lowest, highest, whether the lowest is allowed): the command line's rules for the same values.
RANGES: dict[str, tuple[float, float, bool]] = {
    "d_model": (2, 1 << 16, True), "n_layers": (1, 10_000, True), "n_heads": (1, 1 << 12, True),
    "n_kv_heads": (1, 1 << 12, True), "d_ff": (1, 1 << 20, True), "init_std": (0, math.inf, False),
    "rope_theta": (0, math.inf, False), "norm_eps": (0, 1, False),
    "lr": (0, math.inf, False), "beta1": (0, 1, True), "beta2": (0, 1, True), "eps": (0, 1, False),
    "weight_decay": (0, math.inf, True), "momentum": (0, 1, True), "batch_size": (1, 1 << 20, True),
    "steps": (1, 10**9, True), "warmup_steps": (0, 10**9, True), "min_lr_ratio": (0, 1, True),
    "grad_clip": (0, math.inf, True), "epoch_steps": (1, 10**9, True),
    "every": (0, 10**9, True), "k": (1, 1 << 12, True), "null_draws": (2, 100_000, True),
    "reference_step": (0, 10**9, True), "eval_every": (0, 10**9, True), "final_k": (1, 1 << 12, True),
    "final_null_draws": (2, 100_000, True), "ema_betas": (0, 1, True),
}


def read_grid_file(path: Path, where: str) -> Any:
    """The parsed payload of a ``.toml`` or ``.json`` grid file, read with every bound of the module docstring.

    Raises:
        GeodriftError: naming the file: not a regular file, too large, not UTF-8 (with the byte
            offset), not valid TOML/JSON, nested deeper than :data:`MAX_DEPTH`.
    """
    if path.suffix not in (".toml", ".json"):
        raise GeodriftError(f"{where}: a grid file ends in .toml or .json")
    if not path.exists() and not path.is_symlink():
        raise GeodriftError(f"{where}: cannot read the grid file (no such file); check the path")
    size = check_file(path, "grid file").st_size
    if size > MAX_GRID_BYTES:
        raise GeodriftError(f"{where}: {size} bytes is more than the {MAX_GRID_BYTES} a grid file may hold; "
                            "list configurations, not runs")
    try:
        raw = path.read_bytes()
        text = raw.decode("utf-8")
    except OSError as error:
        raise GeodriftError(f"{where}: cannot read the grid file ({error.strerror or error})") from None
    except UnicodeDecodeError as error:
        raise GeodriftError(f"{where}: not UTF-8 text (byte {error.start}: {raw[error.start:error.start + 1]!r}); "
                            "save the file as UTF-8") from None
    try:
        if path.suffix == ".toml":
            import tomllib

            payload: Any = tomllib.loads(text)
        else:
            payload = json.loads(text)
    except ValueError as error:  # tomllib.TOMLDecodeError and JSONDecodeError are ValueErrors
        raise GeodriftError(f"{where}: not a valid {path.suffix[1:].upper()} file ({error})") from None
    except RecursionError:
        raise GeodriftError(f"{where}: nested deeper than the parser allows; a grid is at most "
                            f"{MAX_DEPTH} levels deep") from None
    if _depth(payload) > MAX_DEPTH:
        raise GeodriftError(f"{where}: nested {_depth(payload)} levels deep; a grid is at most {MAX_DEPTH} levels deep")
    return payload


def check_field(name: str, value: Any, kind: str, where: str) -> Any:
    """``value`` if it has the dataclass field's type ``kind`` (``"int | None"``...) and lies in :data:`RANGES`.

    Returns:
        The value as the dataclass takes it (a list of floats as a tuple).

    Raises:
        GeodriftError: ``<where>.<name>: expected ..., got <value>``.
    """
    key = f"{where} {name}" if where.endswith(":") else f"{where}.{name}"
    optional = kind.endswith("| None")
    base = kind.replace("| None", "").strip()
    if value is None and optional:
        return None
    if base == "bool":
        if not isinstance(value, bool):
            raise GeodriftError(f"{key}: expected true or false, got {value!r}")
        return value
    if base == "str":
        if not isinstance(value, str) or not value or len(value) > 200:
            raise GeodriftError(f"{key}: expected a name (text, 1-200 characters), got {_show(value)}")
        return value
    if base.startswith("tuple"):
        if not isinstance(value, list):
            raise GeodriftError(f"{key}: expected a list of numbers, got {_show(value)}")
        return tuple(check_field(f"{name}[{i}]", v, "float", where) for i, v in enumerate(value))
    integer = base == "int"
    is_number = isinstance(value, int) if integer else isinstance(value, (int, float))
    lo, hi, closed = RANGES.get(name.split("[")[0], (-math.inf, math.inf, True))
    expected = ("an integer" if integer else "a number") + _range_text(lo, hi, closed) + (" or none" if optional else "")
    if isinstance(value, bool) or not is_number or (isinstance(value, float) and not math.isfinite(value)) or not (
            (lo <= value if closed else lo < value) and value <= hi):
        raise GeodriftError(f"{key}: expected {expected}, got {_show(value)}")
    return value


def check_seeds(value: Any, where: str) -> list[int]:
    """The grid's seeds: an integer or a list of them, each as ``--seeds`` takes it ([0, 2**64 - 1])."""
    values = value if isinstance(value, list) else [value]
    if not values:
        raise GeodriftError(f"{where}: expected an integer or a list of integers, got []")
    for v in values:
        if isinstance(v, bool) or not isinstance(v, int):
            raise GeodriftError(f"{where}: expected an integer or a list of integers, got {_show(value)}")
        check_seed(v, where)
    return list(values)


def check_size(model: Any, vocab: int, where: str) -> None:
    """Refuse a model whose parameter count exceeds :data:`MAX_PARAMETERS` (before any run allocates it)."""
    d, layers = model.d_model, model.n_layers
    if hasattr(model, "d_ff"):
        count = layers * (4 * d * d + 3 * d * model.d_ff) + 2 * vocab * d
    else:
        count = layers * d * d + (784 + 10) * d
    if count > MAX_PARAMETERS:
        raise GeodriftError(f"{where}: a model of about {count:.2e} parameters (d_model {d}, n_layers {layers}) is "
                            f"more than the {MAX_PARAMETERS:.2e} a sweep run may allocate; make it smaller")


def _range_text(lo: float, hi: float, closed: bool) -> str:
    if lo == -math.inf and hi == math.inf:
        return ""
    low = f"{'>=' if closed else '>'} {lo:g}"
    return f" {low}" if hi == math.inf else f" {low} and <= {hi:g}"


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _depth(value: Any, level: int = 0) -> int:
    if level > MAX_DEPTH:
        return level
    if isinstance(value, dict):
        return max((_depth(v, level + 1) for v in value.values()), default=level + 1)
    if isinstance(value, list):
        return max((_depth(v, level + 1) for v in value), default=level + 1)
    return level
