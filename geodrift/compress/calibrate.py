"""One calibration pass: the second moment of every projection's input, on the one loaded model.

Four inputs per decoder layer feed the seven projections (:data:`INPUT_OF`): the attention's
normed input (Q, K, V), its head outputs (O), the MLP's normed input (Gate, Up) and the MLP's
``act(gate x) * up x`` (Down). Forward pre-hooks on one reader of each input add ``X^T X``
(float64, summed over every token of every calibration window) while the decoder stack runs; the
LM head is not run. Moments are cached on disk per calibration set (:func:`cached_moments`): the
key hashes the model's weights and the calibration token ids.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from geodrift.compress.model import BATCH
from geodrift.errors import GeodriftError
from geodrift.io.atomic import write_with
from geodrift.lm.llama import LlamaLM

INPUT_OF = {"attn_q": "attn_in", "attn_k": "attn_in", "attn_v": "attn_in", "attn_o": "attn_out",
            "mlp_gate": "mlp_in", "mlp_up": "mlp_in", "mlp_down": "mlp_mid"}
_READER = {"attn_in": "attn_q", "attn_out": "attn_o", "mlp_in": "mlp_gate", "mlp_mid": "mlp_down"}


@dataclass
class Moments:
    """Second moments of the projections' inputs on one calibration set.

    Attributes:
        second: ``{(input, layer): X^T X (d_in, d_in) float64}``, ``input`` a value of :data:`INPUT_OF`.
        tokens: calibration tokens summed over.
        key: hex digest of the model's weights and the calibration ids (the cache key).
    """

    second: dict[tuple[str, int], torch.Tensor]
    tokens: int
    key: str

    def of(self, role: str, layer: int) -> torch.Tensor:
        """``X^T X`` of the input of projection ``role`` in ``layer``."""
        return self.second[(INPUT_OF[role], layer)]


def model_digest(model: LlamaLM) -> str:
    """sha256 of every parameter's name and bytes (the model part of the cache key)."""
    h = hashlib.sha256()
    for name, p in model.state_dict().items():
        h.update(name.encode())
        h.update(p.detach().contiguous().cpu().numpy().tobytes())
    return h.hexdigest()


def check_calibration(model: LlamaLM, windows: torch.Tensor) -> None:
    """Raise before any work when the calibration set has fewer tokens than the widest projection input.

    Raises:
        GeodriftError: naming ``--calib-windows`` and the number needed.
    """
    tokens = windows.shape[0] * (windows.shape[1] - 1)
    width = max(model.projection(role, 0).weight.shape[1] for role in INPUT_OF)
    if tokens < width:
        need = -(-width // (windows.shape[1] - 1))
        raise GeodriftError(f"--calib-windows {windows.shape[0]}: {tokens} calibration tokens are fewer than the "
                            f"widest projection input ({width}), so its second moment is singular; use at least "
                            f"{need} windows of {windows.shape[1] - 1} tokens")


@torch.no_grad()
def collect_moments(model: LlamaLM, windows: torch.Tensor, key: str = "",
                    progress: Callable[[int, int], None] | None = None) -> Moments:
    """Run the decoder stack on ``windows (W, T + 1)`` and sum ``X^T X`` at every projection input.

    Args:
        model: the model (unchanged; hooks are removed on return).
        windows: calibration windows (their first T tokens are the inputs).
        key: stored as :attr:`Moments.key`.
        progress: called with ``(windows done, windows total)``.

    Returns:
        Moments.

    Example:
        >>> m = LlamaLM(vocab_size=50, d_model=16, n_layers=2, n_heads=2, d_ff=32)
        >>> mom = collect_moments(m, torch.randint(0, 50, (3, 9), generator=torch.Generator().manual_seed(0)))
        >>> mom.tokens, tuple(mom.of("mlp_down", 1).shape), tuple(mom.of("attn_k", 0).shape)
        (24, (32, 32), (16, 16))
    """
    n_layers = len(model.model.layers)
    second: dict[tuple[str, int], torch.Tensor] = {}
    handles = []

    def hook(slot: tuple[str, int]) -> Callable[[torch.nn.Module, tuple[torch.Tensor, ...]], None]:
        def add(_module: torch.nn.Module, args: tuple[torch.Tensor, ...]) -> None:
            x = args[0].reshape(-1, args[0].shape[-1])
            xx = (x.T @ x).double()  # float32 products within a batch (2x faster), float64 sums across batches
            xx = (xx + xx.T) / 2  # float32 rounding leaves X^T X slightly asymmetric; the moment is symmetric
            second[slot] = second[slot] + xx if slot in second else xx
        return add

    for kind, reader in _READER.items():
        for layer in range(n_layers):
            handles.append(model.projection(reader, layer).register_forward_pre_hook(hook((kind, layer))))
    try:
        for i in range(0, windows.shape[0], BATCH):
            model.run_layers(model.model.embed_tokens(windows[i: i + BATCH, :-1]), range(n_layers))
            if progress is not None:
                progress(min(i + BATCH, windows.shape[0]), windows.shape[0])
    finally:
        for h in handles:
            h.remove()
    return Moments(second, windows.shape[0] * (windows.shape[1] - 1), key)


def cached_moments(model: LlamaLM, windows: torch.Tensor, cache: str | Path | None,
                   progress: Callable[[int, int], None] | None = None) -> tuple[Moments, bool]:
    """:func:`collect_moments`, read from / written to ``cache`` (a folder; None: no disk cache).

    The file ``moments-<key>.safetensors`` holds every moment (float64) and the token count; the key
    hashes the model's parameters and the calibration ids, so another model or calibration set never
    reads it.

    Returns:
        ``(moments, from_cache)``.
    """
    from safetensors.torch import load_file, save_file

    h = hashlib.sha256(model_digest(model).encode())
    h.update(windows.to(torch.int64).contiguous().numpy().tobytes())
    key = h.hexdigest()
    path = Path(cache) / f"moments-{key[:24]}.safetensors" if cache is not None else None
    if path is not None and path.is_file():
        data = load_file(str(path))
        tokens = int(data.pop("tokens").item())
        second = {(name.split(".")[0], int(name.split(".")[1])): t for name, t in data.items()}
        return Moments(second, tokens, key), True
    moments = collect_moments(model, windows, key, progress)
    if path is not None:
        tensors = {f"{kind}.{layer}": t.contiguous() for (kind, layer), t in moments.second.items()}
        tensors["tokens"] = torch.tensor([moments.tokens], dtype=torch.int64)
        write_with(path, lambda tmp: save_file(tensors, str(tmp), metadata={"key": key}))
    return moments, False
