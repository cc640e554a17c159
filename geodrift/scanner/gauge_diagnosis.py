"""``geodrift scan --full``'s gauge diagnosis: each layer's distance from its balanced point, read layer by layer.

The numbers are :mod:`geodrift.gauge.diagnose`'s; this module streams a checkpoint's layers into
it (one layer's tensors resident at a time) for the families whose gauge group is derived
(:data:`geodrift.scanner.aligned.ALIGNABLE_ARCHITECTURES`); the flags compare the median over the layers
diagnosed with the band of whole trained models.
"""

from __future__ import annotations

from pathlib import Path

from geodrift.errors import GeodriftError
from geodrift.gauge.diagnose import GaugeDiagnosis, diagnose, layer_gauge
from geodrift.gauge.orbit import GaugeShape, layer_key
from geodrift.scanner.aligned import check_alignable
from geodrift.scanner.checkpoint import Checkpoint
from geodrift.scanner.readers import load_canonical, open_checkpoint
from geodrift.weights import HF_LLAMA_PROJECTIONS

_NORMS = {"norm_attn": "input_layernorm", "norm_mlp": "post_attention_layernorm"}


def diagnose_checkpoint(ckpt: Checkpoint, layers: list[int] | None = None) -> GaugeDiagnosis | str:
    """The gauge diagnosis of a llama-family checkpoint, or why there is none (one line).

    Args:
        ckpt: an open checkpoint.
        layers: the layers to diagnose (None: all).

    Returns:
        A GaugeDiagnosis, or a note saying why it was skipped (another family, no head counts).

    Example:
        >>> from geodrift.scanner.readers import open_checkpoint
        >>> diag = diagnose_checkpoint(open_checkpoint(None), layers=[0, 1])
        >>> len(diag.layers), sorted(diag.medians)
        (2, ['attn_in', 'mlp', 'mlp_in', 'qk', 'residual', 'vo'])
    """
    try:
        n_heads, n_kv = check_alignable(ckpt, "gauge diagnosis")
    except GeodriftError as why:
        return str(why)
    cfg = ckpt.config
    d_model, n_layers = int(cfg["d_model"]), int(cfg["n_layers"])
    shape = GaugeShape(n_layers, n_heads, n_kv, int(cfg.get("head_dim") or d_model // n_heads))
    chosen = layers if layers is not None else list(range(n_layers))
    out = diagnose([], shape, ckpt.label)
    for layer in chosen:
        tensors = {layer_key(layer, _NORMS[k]): load_canonical(ckpt, (k, layer)) for k in _NORMS}
        for role, name in HF_LLAMA_PROJECTIONS.items():
            tensors[layer_key(layer, name.split(".")[1])] = load_canonical(ckpt, (role, layer))
        out.layers.append(layer_gauge(tensors, shape, layer))
    return out.judge()



def diagnose_model(model: str | Path | None, names: str | Path | None = None,
                   layers: list[int] | None = None) -> GaugeDiagnosis | str:
    """:func:`diagnose_checkpoint` of a path (None: the embedded SmolLM2), as ``geodrift scan --full`` runs it."""
    return diagnose_checkpoint(open_checkpoint(model, names), layers)
