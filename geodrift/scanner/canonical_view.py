"""The canonical view (``--view canonical``): each layer of a checkpoint at the canonical point of its gauge orbit.

The maths is :mod:`geodrift.gauge.canonical`; this module streams it. The folded projections of
one layer (:mod:`geodrift.scanner.fold`) are read together and canonicalised in the folded basis (every
per-layer map commutes with the residual rotation; the signs read rows against the token embedding's mean,
computed once, the embedding read in blocks of rows); a group of a layer (attention, MLP, experts) is kept while its
projections are handed out one by one (at most two groups resident: the scan reads the next matrix on a second
thread; a gated MLP in two passes, its maps computed on that thread while the attention is decomposed). No residual
basis is computed: every number the scan reads off the residual side is basis-free (adjacent ``|cos|``, and the rotation null there:
:func:`geodrift.gauge.status.null_kind`), so the matrices stay in the folded basis. Every reader hands Q/K rows
over in Hugging Face's half-split rotary order (the GGUF reader undoes llama.cpp's interleaving,
:func:`geodrift.scanner.gguf_reader.unpermute_qk`), so the RoPE pairs are the same for every format.

Only architectures whose row in :data:`geodrift.architectures.ARCHITECTURES` lists canonical steps this module
runs are accepted (:data:`CANONICAL_ARCHITECTURES`); the others are refused with the reason, and their default
view is ``folded`` (:func:`resolve_view`).
"""

from __future__ import annotations

import functools
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor

import torch

from geodrift.architectures import ARCHITECTURES as REGISTRY
from geodrift.architectures import LLAMA_STEPS
from geodrift.errors import GeodriftError
from geodrift.gauge.canonical import PROJECTIONS, canonical_layer
from geodrift.gauge.families import GATED_MLP, GROUPS, STEPS, apply_gated, family_layer, gated_maps, group_of
from geodrift.gauge.orbit import GaugeShape
from geodrift.scanner.checkpoint import Checkpoint
from geodrift.scanner.embedding_rows import embedding_blocks
from geodrift.scanner.fold import INPUT_SIDE
from geodrift.weights import TRANSFORMER_ROLES, WeightEntry, WeightSet, base_role

# The canonical steps this module runs (geodrift.architectures: each row lists its own); a row with a step not here
# is not canonicalised yet and its default view is folded.
IMPLEMENTED_STEPS = STEPS
CANONICAL_ARCHITECTURES = tuple(name for name, row in REGISTRY.items()
                                if row.canonical and set(row.canonical) <= IMPLEMENTED_STEPS and row.gguf_arch)
# The norm gains the canonical view folds (the inputs of Q, K, V, Gate, Up).
_READ_NORMS = tuple(sorted({INPUT_SIDE[role] for role in TRANSFORMER_ROLES if role in INPUT_SIDE}))
ROLE_OF: dict[str, str] = dict(zip(PROJECTIONS, TRANSFORMER_ROLES, strict=True))
ATTENTION_ROLES = ("attn_q", "attn_k", "attn_v", "attn_o")
NAME_OF: dict[str, str] = {role: name for name, role in ROLE_OF.items()}
# Tensors an architecture's row does not expect: the checkpoint is then not that row's group.
_FOREIGN = {
    "norm_q": "per-head q/k norms, which its group does not have",
    "norm_k": "per-head q/k norms, which its group does not have",
    "norm_attn_post": "norms on what its blocks write (sandwich or post-norms), which its group does not have",
    "norm_mlp_post": "norms on what its blocks write (sandwich or post-norms), which its group does not have",
    "router": "a mixture of experts, which its group does not have",
}


def _group_refusal(ckpt: Checkpoint) -> str | None:
    # why the checkpoint's group is not one geodrift canonicalises: the row, its steps, foreign tensors, its config
    row = REGISTRY.get(ckpt.architecture)
    if row is None:
        return f"{ckpt.architecture!r} has no row in the table of architectures (geodrift.architectures)"
    if not row.canonical:
        return row.not_canonical or f"the canonical view of {ckpt.architecture!r} is not derived"
    missing = [step for step in row.canonical if step not in IMPLEMENTED_STEPS]
    if missing:
        return f"the canonical steps {', '.join(missing)} of {ckpt.architecture!r} are not done yet"
    kinds = {kind for kind, _ in ckpt.plan}
    expected = set(row.post_norms) | ({"norm_q", "norm_k"} if {"qk_head_scale", "qk_scale"} & set(row.group) else set())
    expected |= {"router"} if row.moe else set()
    for kind, why in _FOREIGN.items():
        if kind in kinds and kind not in expected:
            return f"it holds {kind} ({why})"
    rotary = ckpt.config.get("raw", {}).get("partial_rotary_factor") if isinstance(ckpt.config.get("raw"), dict) else None
    if rotary not in (None, 1, 1.0):
        return (f"a partial rotary factor {rotary} leaves GL on the unrotated head dimensions, which the canonical "
                "view does not fix")
    return None


def canonical_refusal(ckpt: Checkpoint) -> str | None:
    """Why the canonical view cannot read ``ckpt`` (the group geodrift has not canonicalised, or what is missing), or
    None when it can; read from the headers only.

    Example:
        >>> from geodrift.scanner.readers import open_checkpoint
        >>> canonical_refusal(open_checkpoint(None)) is None
        True
    """
    why = _group_refusal(ckpt)
    if why is not None:
        return why
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
    row = REGISTRY[ckpt.architecture]
    layers = sorted({layer for (role, layer) in ckpt.plan if layer is not None and role in ATTENTION_ROLES})
    missing = [f"{kind}[{layer}]" for layer in layers
               for kind in (*layer_roles(ckpt, layer), *row.pre_norms, *row.post_norms)
               if (kind, layer) not in ckpt.plan]
    if missing:
        return (f"no tensor for {', '.join(missing[:4])}{' ...' if len(missing) > 4 else ''} (every layer needs all "
                "its projections and norm gains: a layer's gauges tie them together)")
    return None


def check_canonical(ckpt: Checkpoint) -> GaugeShape:
    """The gauge shape of a checkpoint the canonical view can read, or a one-line refusal.

    Raises:
        GeodriftError: an architecture whose gauge group is not canonicalised (naming why), no head counts, or a
            missing projection/norm/embedding (:func:`canonical_refusal`).

    Example:
        >>> from geodrift.scanner.readers import open_checkpoint
        >>> check_canonical(open_checkpoint(None))
        GaugeShape(n_layers=30, n_heads=9, n_kv_heads=3, head_dim=64)
    """
    why = canonical_refusal(ckpt)
    if why is not None:
        raise GeodriftError(f"--view canonical: {ckpt.label} ({ckpt.architecture}): {why}; geodrift has no canonical "
                            "form of this model's gauge group for the scan - use --view folded or raw")
    return GaugeShape.from_config(ckpt.config)


def folded_refusal(ckpt: Checkpoint) -> str | None:
    """Why ``--view folded`` cannot read ``ckpt`` (a reader whose input norm no tensor maps to), or None."""
    row = REGISTRY.get(ckpt.architecture)
    for role, layer in ckpt.plan:
        kind = INPUT_SIDE.get(base_role(role))
        if layer is None or kind is None or (row is not None and kind not in row.pre_norms):
            continue
        if (kind, layer) not in ckpt.plan:
            return f"no tensor maps to the {kind} gain of layer {layer} that {role} reads"
    return None


def resolve_view(ckpt: Checkpoint, view: str | None) -> tuple[str, str | None]:
    """The view a scan of ``ckpt`` reads, and the note its report carries: ``view=None`` is the default,
    ``canonical`` where geodrift canonicalises the model's gauge group (numbers and verdicts that exact
    reparametrisations leave unchanged), else ``folded`` (every gain folded: strictly more invariant than raw)
    with a note naming the generators that can still move the numbers, else (no norm tensors) ``raw``.
    A view named explicitly is returned as it is (``canonical`` is then checked, and refused, by
    :func:`check_canonical`).

    Args:
        ckpt: the open checkpoint (headers only are read).
        view: ``"raw"``, ``"folded"``, ``"canonical"`` or None (the default).

    Returns:
        ``(view, note)``: the note is None unless the default fell back.

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
    fallback = "folded" if folded_refusal(ckpt) is None else "raw"
    row = REGISTRY.get(ckpt.architecture)
    moving = row.still_moving(fallback) if row is not None else ()
    named = (f"the exact gauges {', '.join(moving)} (geodrift.architectures) can still move these numbers and "
             "verdicts" if moving else "its gauge group is not in the table, so an exact reparametrisation may move "
             "these numbers and verdicts")
    return fallback, (f"view: {fallback}, the default where geodrift has no canonical form of the gauge group - "
                      f"{ckpt.architecture}: {why}; {named}")


# An embedding mean below this share of its rows' RMS norm signs nothing (then the norm-weighted mean is tried).
_ZERO_MEAN = 1e-6
_MEANS_CHUNK = 1 << 18  # entries of an embedding block summed at a time by embedding_means (in cache)


def embedding_means(blocks: Iterable[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, float]:
    """``(mean row, mean row weighted by each row's squared norm, RMS row norm)`` of an embedding read in blocks of
    rows (float64 sums: one pass, one block resident).

    Example:
        >>> mean, weighted, rms = embedding_means([torch.tensor([[1.0, 0.0]]), torch.tensor([[3.0, 0.0]])])
        >>> mean.tolist(), weighted.tolist(), round(rms, 4)
        ([2.0, 0.0], [2.8, 0.0], 2.2361)
    """
    total = weighted = None
    energy_sum, rows = 0.0, 0
    for whole in blocks:
        whole = whole if whole.dtype == torch.float64 else whole.to(torch.float32)
        # in chunks of _MEANS_CHUNK entries, whose float64 copy stays in cache (10x faster than the whole block's)
        for block in whole.split(max(1, _MEANS_CHUNK // max(whole.shape[1], 1))):
            energy = block.pow(2).sum(1, dtype=torch.float64)
            part, part_weighted = block.sum(0, dtype=torch.float64), energy @ block.double()
            total = part if total is None else total + part
            weighted = part_weighted if weighted is None else weighted + part_weighted
            energy_sum, rows = energy_sum + float(energy.sum()), rows + block.shape[0]
    if total is None or weighted is None:
        return torch.zeros(0, dtype=torch.float64), torch.zeros(0, dtype=torch.float64), 0.0
    return total / max(rows, 1), weighted / max(energy_sum, 1e-300), (energy_sum / max(rows, 1)) ** 0.5


def _centred(rows: torch.Tensor, mean: torch.Tensor) -> torch.Tensor:
    # rows less the embedding's mean row, projected off 1 (float64)
    rows = rows.to(torch.float64) - mean.reshape(1, -1)
    return rows - rows.mean(1, keepdim=True)


class CanonicalLayers:
    """Canonical projections computed on demand from folded loaders; thread-safe, each matrix handed over once.

    Two ways to compute, one result: the scan's canonical view reads a group of a layer at a time (its attention,
    MLP, shared expert or experts: :data:`geodrift.gauge.families.GROUPS`; a gated MLP in two passes, one resident
    matrix), at most ``keep`` groups cached; the series' alignment (:mod:`geodrift.scanner.series_gauge`) overrides
    :meth:`compute` and reads a whole Llama layer at a time (its subclasses set ``per_layer``).

    No residual basis is computed: every number read off the residual side is basis-free, and the factors are signed
    against the token embedding's mean (:meth:`sign_reference`, rotation-equivariant).

    Args:
        loaders: ``(role, layer) -> folded loader`` for every projection of every layer.
        embedding: the token embedding, whole or as an iterable of row blocks (its mean signs the factors, read
            on first use).
        shape: the heads.
        steps: the architecture's canonical steps (its row in :data:`geodrift.architectures.ARCHITECTURES`),
            run by :func:`geodrift.gauge.families.family_layer` group by group.
        keep: groups (or layers) kept (the scan reads ahead one matrix).
        label: names the checkpoint in errors.
    """

    per_layer = False  # the series' subclasses compute a whole Llama layer (compute)

    def __init__(self, loaders: dict[tuple[str, int], Callable[[], torch.Tensor]],
                 embedding: Callable[[], torch.Tensor | Iterable[torch.Tensor]], shape: GaugeShape,
                 steps: tuple[str, ...] = LLAMA_STEPS, keep: int = 2, label: str = "") -> None:
        self.loaders, self.embedding, self.shape, self.steps = loaders, embedding, shape, steps
        self.keep, self.label = keep, label
        self._lock = threading.Lock()
        self._layers: OrderedDict[int, Future[dict[str, torch.Tensor]]] = OrderedDict()  # per_layer: computing or done
        self._helper: ThreadPoolExecutor | None = None  # per_layer: computes the layers (see _from_layer)
        self.layers_read: list[int] | None = None  # per_layer: the layers the scan reads (None: every layer)
        self._groups: OrderedDict[tuple[int, str], dict[str, torch.Tensor]] = OrderedDict()
        self._maps: dict[tuple[int, str], tuple[torch.Tensor, torch.Tensor]] = {}
        self._held: dict[tuple[int, str], torch.Tensor] = {}  # a gated MLP's Gate and Up, read for its maps (_gated)
        self._ready: dict[tuple[str, int], torch.Tensor] = {}  # a large gated matrix made ahead by warm (one at most)
        self._reference: torch.Tensor | None = None

    def sign_reference(self) -> torch.Tensor:
        """The token embedding's mean row (float64; where it is zero, the mean weighted by each row's squared norm):
        the canonical factors are signed against it. Rotation-equivariant, so the signs are too. With LayerNorm
        (the row's ``center_ones`` step) the rows are centred and projected off ``1`` first (a shift of every token
        row is exact there, so the plain mean is not fixed) and their norm-weighted mean signs.

        Raises:
            GeodriftError: both means are zero (a zero embedding, or one symmetric under negation): nothing in
                the weights signs the factors, and the head-side numbers would depend on the SVD's signs.
        """
        if self._reference is None:
            mean, weighted, rms = embedding_means(self._blocks())
            candidates: tuple[torch.Tensor, ...] = (mean, weighted)
            if "center_ones" in self.steps and mean.numel():
                _, weighted, rms = embedding_means(_centred(block, mean) for block in self._blocks())
                candidates = (weighted,)
            for candidate in candidates:
                if candidate.numel() and float(candidate.norm()) > _ZERO_MEAN * rms:
                    self._reference = candidate
                    break
            else:
                raise GeodriftError(f"--view canonical: the token embedding of {self.label or 'the model'} has a zero "
                                    "mean (also weighted by norm), so nothing signs its canonical factors; use "
                                    "--view folded")
        return self._reference

    def _blocks(self) -> Iterable[torch.Tensor]:
        read = self.embedding()
        return [read] if isinstance(read, torch.Tensor) else read

    def folded(self, layer: int) -> dict[str, torch.Tensor]:
        """The folded projections of a Llama ``layer`` (float32), by Hugging Face name."""
        return {NAME_OF[r]: self.loaders[(r, layer)]().to(torch.float32) for r in TRANSFORMER_ROLES}

    def compute(self, layer: int) -> dict[str, torch.Tensor]:
        """The canonical projections of a Llama ``layer`` (float32), by Hugging Face name (the series' path)."""
        done = canonical_layer(self.folded(layer), self.shape, self.sign_reference())
        return {key: value.to(torch.float32) for key, value in done.items()}

    def load(self, role: str, layer: int) -> torch.Tensor:
        """The canonical ``(role, layer)`` projection, float32, in the folded residual basis.

        Each projection is handed over once, not copied (the caller owns it); asking for it again computes
        its group (or layer) again.
        """
        if self.per_layer:
            return self._from_layer(role, layer)
        group = group_of(role)
        if self._gated_role(role):
            with self._lock:
                ready = self._ready.pop((role, layer), None)
            return ready if ready is not None else self._gated(role, layer)
        with self._lock:
            cached = self._groups.get((layer, group))
            if cached is None or role not in cached:
                roles, acting = GROUPS[group]
                members = {r: loader().to(torch.float32) for (r, at), loader in self.loaders.items()
                           if at == layer and r.split(".", 1)[0] in roles}
                steps = tuple(step for step in self.steps if step in acting)
                cached = self._groups[(layer, group)] = family_layer(members, self.shape, steps,
                                                                     sign_reference=self.sign_reference())
                while len(self._groups) > self.keep:
                    self._groups.popitem(last=False)
            value = cached.pop(role).to(torch.float32)
            if not cached:
                self._groups.pop((layer, group), None)
            return value

    def _from_layer(self, role: str, layer: int) -> torch.Tensor:
        # A whole layer is computed on a helper thread, and the next layer is started as soon as this one is asked
        # for: the series' canonical form and alignment of layer l + 1 (an aligned checkpoint's critical path) overlap
        # with layer l's SVDs, instead of waiting for the read-ahead to reach it (bench_series_views.py). One layer at
        # a time on the helper, so the computations run in the order they ran before, with the same results.
        name = NAME_OF[role]
        with self._lock:
            pending = self._layer_future(layer)
            read = self.layers_read or {at for _, at in self.loaders if at is not None}
            later = sorted(at for at in read if at > layer)
            if later:
                self._layer_future(later[0])
        cached = pending.result()
        with self._lock:
            if name not in cached:  # asked for again: computed again, here
                cached = self.compute(layer)
            value = cached.pop(name)
            if not cached and self._layers.get(layer) is pending:
                self._layers.pop(layer)
                if not later and self._helper is not None:  # the last layer handed over: the helper thread ends
                    self._helper.shutdown(wait=False)
                    self._helper = None
            return value

    def _layer_future(self, layer: int) -> Future[dict[str, torch.Tensor]]:
        # under self._lock: the computation of ``layer`` (started now, on the helper thread, if it was not)
        pending = self._layers.get(layer)
        if pending is None:
            if self._helper is None:
                self._helper = ThreadPoolExecutor(max_workers=1, thread_name_prefix="canonical-layers")
            pending = self._layers[layer] = self._helper.submit(self.compute, layer)
            while len(self._layers) > self.keep:
                self._layers.popitem(last=False)
        return pending

    def _gated(self, role: str, layer: int, maps_only: bool = False) -> torch.Tensor:
        # A gated MLP in two passes: its maps from the three matrices (kept per layer, a few vectors; the scan's reader
        # thread computes them ahead: warm), then each matrix mapped when asked for. The maps pass reads Down (and
        # frees it), then Gate and Up; one started for the Gate (the scan asks for Gate, Up, Down in turn) keeps those
        # two for their own loads, and Down is read again (the page cache holds it): three resident matrices at most,
        # as when Down is mapped beside the Up being decomposed (an 8B layer's MLP is 0.7 GB in float32).
        prefix, kind = role.split("_", 1)
        with self._lock:
            maps = self._maps.get((layer, prefix))
            if maps is None:
                def load(which: str) -> torch.Tensor:
                    weight = self.loaders[(f"{prefix}_{which}", layer)]().to(torch.float32)
                    if kind == "gate" and which in ("gate", "up"):
                        if which == "gate":  # another layer's unclaimed ones are dropped
                            self._held.clear()
                        self._held[(layer, f"{prefix}_{which}")] = weight
                    return weight

                maps = self._maps[(layer, prefix)] = gated_maps(*(functools.partial(load, which)
                                                                  for which in ("gate", "up", "down")))
                while len(self._maps) > 2 * self.keep:
                    self._maps.pop(next(iter(self._maps)))
            held = None if maps_only else self._held.pop((layer, role), None)
        if maps_only:
            return maps[1]
        return apply_gated(kind, held if held is not None else self.loaders[(role, layer)]().to(torch.float32), maps)

    def _prepare(self, role: str, layer: int) -> None:
        # A large gated matrix made whole on the reader thread while the previous matrix is decomposed: the scan reads
        # a large matrix on its main thread, after dropping the previous one, and decomposes it there with every BLAS
        # thread, so its read and mapping (an 8B Up: read again, gathered, scaled) were serial with the SVDs. One
        # prepared matrix at most (an unclaimed one is dropped first): the scan then holds the matrix it decomposes
        # and the next, as the folded view holds one plus its read (RESULTS_scan_8b_cold_default.md).
        with self._lock:
            self._ready.clear()
        matrix = self._gated(role, layer)
        with self._lock:
            self._ready[(role, layer)] = matrix

    def _gated_role(self, role: str) -> bool:
        group = group_of(role)
        return not self.per_layer and group in ("mlp", "shared") and tuple(
            s for s in self.steps if s in GROUPS[group][1]) in (("mlp",), ("shared",))

    def warm(self, role: str, layer: int, warms: dict[tuple[str, int], Callable[[], None]]) -> None:
        """Get ``(role, layer)`` ready before it is loaded (the scan calls it on its reader thread while the previous
        matrix is decomposed, so a cold read and this work overlap with that): a gated MLP's maps computed (its three
        matrices read once, which also brings them into the page cache) and the canonical matrix itself made, held
        until :meth:`load` takes it; otherwise the stored bytes of the role and,
        where its group (or layer) is not computed yet, of the rest of it (``warms``: the folded entries' warm-ups).
        Never raises (a failure is reported by :meth:`load`)."""
        try:
            if self._gated_role(role):
                prefix = role.split("_", 1)[0]
                if (layer, prefix) not in self._maps:
                    self._gated(f"{prefix}_gate", layer, maps_only=True)
                self._prepare(role, layer)
                return
            with self._lock:
                done = layer in self._layers if self.per_layer else (layer, group_of(role)) in self._groups
            members = [key for key in warms if key[1] == layer and (self.per_layer or group_of(key[0]) == group_of(role))]
            for key in members if not done else [(role, layer)]:
                if key in warms:
                    warms[key]()
        except Exception:  # noqa: BLE001 - a read-ahead hint: load() reports the problem
            return


def canonical_weightset(ckpt: Checkpoint, folded: WeightSet, source: CanonicalLayers | None = None,
                        load_whole: Callable[[tuple[str, None]], torch.Tensor] | None = None) -> WeightSet:
    """The canonical view of ``ckpt`` from its folded WeightSet (same keys, shapes and sources).

    Args:
        ckpt: the checkpoint (checked by :func:`check_canonical`).
        folded: its folded WeightSet (every projection of every layer its row's steps need).
        source: computes the layers (default: :class:`CanonicalLayers`, its signs from the token embedding read in
            blocks of rows; the series' alignment passes its own).
        load_whole: reads a whole canonical tensor (:func:`geodrift.scanner.readers.load_canonical`), for an
            embedding too small or too oddly stored to read in blocks; needed without ``source``.

    Returns:
        A WeightSet with ``view="canonical"``.

    Raises:
        GeodriftError: see :func:`check_canonical`; a layer without a projection its gauges tie to the others; (on
            first use) an embedding that signs nothing (:meth:`CanonicalLayers.sign_reference`).
    """
    shape = check_canonical(ckpt)
    steps = REGISTRY[ckpt.architecture].canonical
    layers = sorted({layer for _, layer in folded.entries})
    missing = [f"{role}[{layer}]" for layer in layers for role in layer_roles(ckpt, layer)
               if (role, layer) not in folded.entries]
    if missing:
        raise GeodriftError(f"--view canonical: {ckpt.label} lacks {', '.join(missing[:4])}; every layer needs all "
                            "its projections (a layer's gauges tie them together) - use --view folded")
    # Each folded matrix read through the WeightSet's checks (NaN/Inf, a corrupt outlier): balancing would hide an
    # outlier in its layer's product, so it is refused (or skipped, with its layer) by the name of its tensor.
    if source is None:
        if load_whole is None:
            raise TypeError("canonical_weightset: pass source or load_whole")
        source = CanonicalLayers({key: functools.partial(folded.__getitem__, key) for key in folded.entries},
                                 functools.partial(embedding_blocks, ckpt, load_whole), shape, steps, label=ckpt.label)
    warms = {key: entry.warm for key, entry in folded.entries.items() if entry.warm is not None}
    entries = {key: WeightEntry(entry.shape, f"{entry.source} (canonical)", _loader(source.load, *key),
                                functools.partial(source.warm, key[0], key[1], warms))
               for key, entry in folded.entries.items()}
    return WeightSet(entries, origin=folded.origin, view="canonical", architecture=folded.architecture)


def layer_roles(ckpt: Checkpoint, layer: int) -> list[str]:
    """The projections of ``layer`` that its row's canonical steps tie together (all must be present)."""
    steps = REGISTRY[ckpt.architecture].canonical
    roles = list(ATTENTION_ROLES)
    roles += ["mlp_gate", "mlp_up", "mlp_down"] if GATED_MLP in steps else []
    roles += ["mlp_up", "mlp_down"] if "mlp_order" in steps else []
    roles += ["shared_gate", "shared_up", "shared_down"] if "shared" in steps else []
    if "experts" in steps:
        roles += ["router"] + [role for role, at in ckpt.plan if at == layer and role.startswith("expert_")]
    return roles


def _loader(load: Callable[[str, int], torch.Tensor], role: str, layer: int) -> Callable[[], torch.Tensor]:
    return lambda: load(role, layer)
