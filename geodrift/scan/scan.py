"""The scan job: open a checkpoint, stream its projections, and build the continuity report."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from geodrift.analysis import ScanReport, analyze_weightset
from geodrift.errors import GeodriftError
from geodrift.scan.readers import open_checkpoint, weightset
from geodrift.weights import TRANSFORMER_ROLES, WeightSet

ROLE_ALIASES = {
    "q": "attn_q", "k": "attn_k", "v": "attn_v", "o": "attn_o",
    "gate": "mlp_gate", "up": "mlp_up", "down": "mlp_down",
}


def parse_roles(text: str | None) -> list[str] | None:
    """``"q,k,gate"`` or ``"attn_q,mlp_up"`` -> canonical roles (None = all).

    Raises:
        GeodriftError: on an unknown name.
    """
    if not text:
        return None
    roles = []
    for item in text.split(","):
        name = item.strip().lower()
        role = ROLE_ALIASES.get(name, name)
        if role not in TRANSFORMER_ROLES:
            raise GeodriftError(
                f"--roles: unknown projection {item!r}; use any of {', '.join(ROLE_ALIASES)} "
                f"(or {', '.join(TRANSFORMER_ROLES)})"
            )
        roles.append(role)
    return roles


def parse_layers(text: str | None) -> list[int] | None:
    """``"0-9,20,25-29"`` -> ``[0, ..., 9, 20, 25, ..., 29]`` (None = all).

    Raises:
        GeodriftError: on a malformed range.
    """
    if not text:
        return None
    layers: list[int] = []
    try:
        for part in text.split(","):
            lo, _, hi = part.strip().partition("-")
            layers.extend(range(int(lo), int(hi) + 1) if hi else [int(lo)])
    except ValueError:
        raise GeodriftError(f"--layers: cannot read {text!r}; write ranges like 0-9,20,25-29") from None
    return sorted(set(layers))


def check_options(k: int, null_draws: int) -> None:
    """Reject bad numeric options before any file is read.

    Raises:
        GeodriftError: naming the option and its valid range.
    """
    if k < 1:
        raise GeodriftError(f"--k: must be at least 1, got {k}")
    if null_draws < 2:
        raise GeodriftError(f"--null-draws: must be at least 2, got {null_draws}")


def load_weights(
    model: str | Path | None, view: str = "raw", names: str | Path | None = None,
    roles: list[str] | None = None, layers: list[int] | None = None,
) -> WeightSet:
    """The projections of ``model`` (None = the embedded SmolLM2-135M) as a lazy WeightSet.

    Raises:
        GeodriftError: on any unreadable input or an unknown role/layer selection.
    """
    if view not in ("raw", "folded"):
        raise GeodriftError(f"--view: {view!r} is not a view; use raw or folded")
    ckpt = open_checkpoint(model, names=names)
    return weightset(ckpt, view=view).select(roles, layers)


def scan(
    ws: WeightSet,
    *,
    k: int = 8,
    null_draws: int = 100,
    seed: int = 0,
    progress: Callable[[str], None] | None = None,
    full_spectrum: bool = False,
) -> ScanReport:
    """Per-projection geometric continuity of a checkpoint's projections.

    Args:
        ws: the projections, from :func:`load_weights` (streamed: one matrix resident at a time).
        k: singular vectors per space.
        null_draws: permutation-null draws.
        seed: seed of the permutation null.
        progress: called after each matrix.
        full_spectrum: full SVD of every matrix, so Eq. 2 is exact rather than bounded.

    Returns:
        ScanReport.

    Raises:
        GeodriftError: bad options, fewer than 2 layers, NaN/Inf in a tensor.

    Example:
        >>> report = scan(load_weights(None), k=4)  # doctest: +SKIP
    """
    check_options(k, null_draws)
    if all(len(ws.layers(role)) < 2 for role in ws.roles()):
        raise GeodriftError(
            f"{ws.origin}: every projection has fewer than 2 layers; continuity compares adjacent "
            "layers - scan a model (or a --layers selection) with at least 2 layers"
        )
    return analyze_weightset(ws, k=k, null_draws=null_draws, seed=seed, progress=progress,
                             full_spectrum=full_spectrum)
