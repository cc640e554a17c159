"""The canonical view (``--view canonical``): each layer of a checkpoint at the canonical point of its gauge orbit.

The maths is :mod:`geodrift.gauge.canonical`; this module streams it. The folded projections of
one layer (:mod:`geodrift.scanner.fold`) are read together and canonicalised in the folded basis (every
per-layer map commutes with the residual rotation; the signs read rows against the token embedding's mean,
computed once); the layer is kept while its seven projections are handed out one by one (at most two layers
resident: the scan reads the next matrix on a second thread). No residual basis is computed: every number the
scan reads off the residual side is basis-free (adjacent ``|cos|``, and the rotation null there:
:func:`geodrift.gauge.status.null_kind`), so the matrices stay in the folded basis. Every reader hands Q/K rows
over in Hugging Face's half-split rotary order (the GGUF reader undoes llama.cpp's interleaving,
:func:`geodrift.scanner.gguf_reader.unpermute_qk`), so the RoPE pairs are the same for every format.

Only architectures whose gauge group geodrift has derived are accepted (:data:`CANONICAL_ARCHITECTURES`);
the others are refused with the symmetry that is not derived.
"""

from __future__ import annotations

import functools
import threading
from collections import OrderedDict
from collections.abc import Callable

import torch

from geodrift.errors import GeodriftError
from geodrift.gauge.canonical import PROJECTIONS, canonical_layer
from geodrift.gauge.orbit import GaugeShape
from geodrift.scanner.checkpoint import Checkpoint
from geodrift.scanner.fold import INPUT_SIDE
from geodrift.weights import TRANSFORMER_ROLES, WeightEntry, WeightSet

# Llama-family attention (RoPE, GQA, no per-head q/k norm), pre-norm RMSNorm, gated MLP.
CANONICAL_ARCHITECTURES = ("llama", "mistral", "qwen2")
# The norm gains the canonical view folds (the inputs of Q, K, V, Gate, Up).
_READ_NORMS = tuple(sorted({INPUT_SIDE[role] for role in TRANSFORMER_ROLES if role in INPUT_SIDE}))
ROLE_OF: dict[str, str] = dict(zip(PROJECTIONS, TRANSFORMER_ROLES, strict=True))
NAME_OF: dict[str, str] = {role: name for name, role in ROLE_OF.items()}
# What keeps an architecture's group underived, by the norms its checkpoint holds.
_UNDERIVED_NORMS = {
    "norm_q": "per-head q/k norm gains sit between Q/K and RoPE (the Q/K gauge is not derived)",
    "norm_k": "per-head q/k norm gains sit between Q/K and RoPE (the Q/K gauge is not derived)",
    "norm_attn_post": "sandwich norms sit between O and the residual stream (the residual rotation is not derived)",
    "norm_mlp_post": "sandwich norms sit between Down and the residual stream (the residual rotation is not derived)",
}


def canonical_refusal(ckpt: Checkpoint) -> str | None:
    """Why the canonical view cannot read ``ckpt`` (the symmetry geodrift has not derived, or what is missing), or
    None when it can; read from the headers only.

    Example:
        >>> from geodrift.scanner.readers import open_checkpoint
        >>> canonical_refusal(open_checkpoint(None)) is None
        True
    """
    kinds = {kind for kind, _ in ckpt.plan}
    for kind, why in _UNDERIVED_NORMS.items():
        if kind in kinds:
            return why
    if "router" in kinds:
        return "a mixture of experts (the experts' permutation and each expert's group are not derived for the scan yet)"
    if ckpt.architecture not in CANONICAL_ARCHITECTURES:
        return (f"the gauge group of {ckpt.architecture!r} is not derived (known: {', '.join(CANONICAL_ARCHITECTURES)}; "
                "e.g. LayerNorm's centring and biases in gpt2, fused or partial-rotary attention)")
    if not ckpt.config.get("n_heads"):
        return ("the head counts are unknown (the V/O and Q/K gauges act per head); pass the model's config "
                "(config.json beside the weights, or config= in geodrift.scan)")
    if ("embed", None) not in ckpt.plan:
        return "no token embedding, which signs the canonical factors (map it in --names as 'embed')"
    embed = ckpt.canonical_shape(("embed", None))
    reads = ckpt.canonical_shape(next(key for key in sorted(ckpt.plan, key=str) if key[0] == "attn_q"
                                      and key[1] is not None)) if any(k[0] == "attn_q" for k in ckpt.plan) else None
    if reads is not None and (len(embed) != 2 or embed[1] != reads[1]):
        return (f"the token embedding is {'x'.join(map(str, embed))} but the projections read {reads[1]}-wide "
                "vectors (the embedding must be as wide as the residual stream)")
    layers = sorted({layer for (role, layer) in ckpt.plan if layer is not None and role in TRANSFORMER_ROLES})
    missing = [f"{kind}[{layer}]" for layer in layers
               for kind in (*TRANSFORMER_ROLES, *_READ_NORMS)
               if (kind, layer) not in ckpt.plan]
    if missing:
        return (f"no tensor for {', '.join(missing[:4])}{' ...' if len(missing) > 4 else ''} (every layer needs its "
                "seven projections and both norm gains: a layer's gauges tie them together)")
    return None


def check_canonical(ckpt: Checkpoint) -> GaugeShape:
    """The gauge shape of a checkpoint the canonical view can read, or a one-line refusal.

    Raises:
        GeodriftError: an architecture whose gauge group is not derived (naming the symmetry), a mixture
            of experts, no head counts, or a missing projection/norm/embedding (:func:`canonical_refusal`).

    Example:
        >>> from geodrift.scanner.readers import open_checkpoint
        >>> check_canonical(open_checkpoint(None))
        GaugeShape(n_layers=30, n_heads=9, n_kv_heads=3, head_dim=64)
    """
    why = canonical_refusal(ckpt)
    if why is not None:
        raise GeodriftError(f"--view canonical: {ckpt.label} ({ckpt.architecture}): {why}; geodrift has not derived "
                            "this model's gauge group for the scan - use --view folded or raw")
    return GaugeShape.from_config(ckpt.config)


def resolve_view(ckpt: Checkpoint, view: str | None) -> tuple[str, str | None]:
    """The view a scan of ``ckpt`` reads, and the note its report carries: ``view=None`` is the default,
    ``canonical`` where geodrift has derived the model's gauge group (numbers and verdicts that exact
    reparametrisations leave unchanged), else ``raw`` with a note naming the symmetry not derived.
    A view named explicitly is returned as it is (``canonical`` is then checked, and refused, by
    :func:`check_canonical`).

    Args:
        ckpt: the open checkpoint (headers only are read).
        view: ``"raw"``, ``"folded"``, ``"canonical"`` or None (the default).

    Returns:
        ``(view, note)``: the note is None unless the default fell back to ``raw``.

    Example:
        >>> from geodrift.scanner.readers import open_checkpoint
        >>> resolve_view(open_checkpoint(None), None), resolve_view(open_checkpoint(None), "raw")
        (('canonical', None), ('raw', None))
    """
    if view is not None:
        return view, None
    why = canonical_refusal(ckpt)
    if why is None:
        return "canonical", None
    return "raw", (f"view: raw, the default where geodrift has not derived the gauge group - {ckpt.architecture}: "
                   f"{why}; these numbers and verdicts can move under an exact reparametrisation of the weights")


# An embedding mean below this share of its rows' RMS norm signs nothing (then the norm-weighted mean is tried).
_ZERO_MEAN = 1e-6


class CanonicalLayers:
    """Canonical layers computed on demand from folded loaders; thread-safe, at most ``keep`` layers cached.

    Args:
        loaders: ``(role, layer) -> folded loader`` for all seven projections of every layer.
        embedding: loads the token embedding (its mean signs the factors, computed on first use).
        shape: the heads.
        keep: layers kept (the scan reads ahead one matrix).
        label: names the checkpoint in errors.
    """

    def __init__(self, loaders: dict[tuple[str, int], Callable[[], torch.Tensor]],
                 embedding: Callable[[], torch.Tensor], shape: GaugeShape, keep: int = 2, label: str = "") -> None:
        self.loaders, self.embedding, self.shape, self.keep, self.label = loaders, embedding, shape, keep, label
        self._lock = threading.Lock()
        self._layers: OrderedDict[int, dict[str, torch.Tensor]] = OrderedDict()
        self._reference: torch.Tensor | None = None

    def sign_reference(self) -> torch.Tensor:
        """The token embedding's mean row (float64; where it is zero, the mean weighted by each row's squared norm):
        the canonical factors are signed against it. Rotation-equivariant, so the signs are too.

        Raises:
            GeodriftError: both means are zero (a zero embedding, or one symmetric under negation): nothing in
                the weights signs the factors, and the head-side numbers would depend on the SVD's signs.
        """
        if self._reference is None:
            embedding = self.embedding().to(torch.float32)
            energy = embedding.pow(2).sum(1, dtype=torch.float64)
            rms = float(energy.mean().sqrt()) if embedding.numel() else 0.0
            means = (lambda: embedding.sum(0, dtype=torch.float64) / max(embedding.shape[0], 1),
                     lambda: (energy @ embedding.double()) / max(float(energy.sum()), 1e-300))
            for mean_of in means:
                mean = mean_of()
                if float(mean.norm()) > _ZERO_MEAN * rms:
                    self._reference = mean
                    break
            else:
                raise GeodriftError(f"--view canonical: the token embedding of {self.label or 'the model'} has a zero "
                                    "mean (also weighted by norm), so nothing signs its canonical factors; use "
                                    "--view folded")
        return self._reference

    def folded(self, layer: int) -> dict[str, torch.Tensor]:
        """The folded projections of ``layer`` (float32), by Hugging Face name."""
        return {NAME_OF[r]: self.loaders[(r, layer)]().to(torch.float32) for r in TRANSFORMER_ROLES}

    def compute(self, layer: int) -> dict[str, torch.Tensor]:
        """The canonical projections of ``layer`` (float32), by Hugging Face name."""
        done = canonical_layer(self.folded(layer), self.shape, self.sign_reference())
        return {key: value.to(torch.float32) for key, value in done.items()}

    def load(self, role: str, layer: int) -> torch.Tensor:
        """The canonical ``(role, layer)`` projection, float32, in the folded residual basis.

        Each projection is handed over once, not copied (the caller owns it); asking for it again computes
        its layer again.
        """
        name = NAME_OF[role]
        with self._lock:
            cached = self._layers.get(layer)
            if cached is None or name not in cached:
                cached = self._layers[layer] = self.compute(layer)
                while len(self._layers) > self.keep:
                    self._layers.popitem(last=False)
            value = cached.pop(name)
            if not cached:
                self._layers.pop(layer, None)
            return value


def canonical_weightset(ckpt: Checkpoint, folded: WeightSet, embedding: Callable[[], torch.Tensor],
                        source: CanonicalLayers | None = None) -> WeightSet:
    """The canonical view of ``ckpt`` from its folded WeightSet (same keys, shapes and sources).

    Args:
        ckpt: the checkpoint (checked by :func:`check_canonical`).
        folded: its folded WeightSet (all seven projections of every layer).
        embedding: loads the token embedding.
        source: computes the layers (default: :class:`CanonicalLayers`; the series' alignment passes its own).

    Returns:
        A WeightSet with ``view="canonical"``.

    Raises:
        GeodriftError: see :func:`check_canonical`; a layer without all seven projections; (on first use) an
            embedding that signs nothing (:meth:`CanonicalLayers.sign_reference`).
    """
    shape = check_canonical(ckpt)
    layers = sorted({layer for _, layer in folded.entries})
    missing = [f"{role}[{layer}]" for layer in layers for role in TRANSFORMER_ROLES if (role, layer) not in folded.entries]
    if missing:
        raise GeodriftError(f"--view canonical: {ckpt.label} lacks {', '.join(missing[:4])}; every layer needs all "
                            "seven projections (a layer's gauges tie them together) - use --view folded")
    # Each folded matrix read through the WeightSet's checks (NaN/Inf, a corrupt outlier): balancing would hide an
    # outlier in its layer's product, so it is refused (or skipped, with its layer) by the name of its tensor.
    if source is None:
        source = CanonicalLayers({key: functools.partial(folded.__getitem__, key) for key in folded.entries},
                                 embedding, shape, label=ckpt.label)
    entries = {key: WeightEntry(entry.shape, f"{entry.source} (canonical)", _loader(source.load, *key))
               for key, entry in folded.entries.items()}
    return WeightSet(entries, origin=folded.origin, view="canonical")


def _loader(load: Callable[[str, int], torch.Tensor], role: str, layer: int) -> Callable[[], torch.Tensor]:
    return lambda: load(role, layer)
