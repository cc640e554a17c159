"""The continuous gauge group *measured*: the null space of the Jacobian of a model's outputs in its parameters.

At a generic point the tangent directions of the exact symmetries are the parameter directions that
change no output, for every input: the null space of ``J = d logits / d theta`` once enough inputs are
stacked. ``parameters - rank(J)`` is the continuous group's dimension (the "functional dimension"
gap, Grigsby, Lindsey et al.), measured without trusting any list of generators. For each architecture
of :data:`geodrift.architectures.ARCHITECTURES` (through transformers, built from its config, no hub):

- a random model of :data:`SIZES` (2 layers, width 16), float64, the norms' epsilon set to 0 (so maps that
  are exact up to epsilon count: docs/models.md), RMSNorm and softmax kept in float64 (transformers casts
  both to float32);
- ``G = sum J_c^T J_c`` over chunks of random token sequences (every token drawn, :func:`rows_for` of them:
  each position's logits carry at most ``d`` independent rows), its eigenvalues; a singular value of ``J``
  below :data:`THRESHOLD` times the largest counts as null, and the gap around it is reported (the small singular
  values recomputed from ``J`` itself, not read off its Gram: :func:`singular_values`);
- the tangents of every continuous generator the table lists (:mod:`geodrift.gauge.generators`, by
  ``torch.func.jacfwd`` at the identity): their rank (they are independent) and ``|J t| / (|J| |t|)`` (each
  lies in the null space).

The null space contains the generators' span, so ``measured >= derived`` always; equality with independent
exact tangents means the span *is* the null space: the table is complete for the continuous part. A
measured dimension above the derived one is re-measured with twice the inputs (a rank not yet saturated
falls; a missing symmetry does not) and is then a failed claim. Every discrete generator, and every
continuous one at a realistic size, is applied and the logits compared (:data:`EXACT`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from geodrift.architectures import ARCHITECTURES
from geodrift.gauge.generator_actions import ACTIONS
from geodrift.gauge.generators import Layout
from geodrift.scanner.role_state import role_state

SIZES: dict[str, int] = {"L": 2, "d": 16, "H": 4, "Hkv": 2, "hd": 4, "f": 8, "V": 24, "n_pos": 8, "E": 3,
                         "fe": 4, "fs": 4}
SEQ = 8  # tokens per sequence (= the learned positions of gpt2)
THRESHOLD = 1e-9  # a singular value of J below THRESHOLD * the largest is null (singular_values: the null ones read
# ~1e-13, the smallest kept ones 1.5e-6 to 3e-5 at SIZES: decades on either side)
REFINE_BELOW = 1e-4  # singular values below this share of the largest are recomputed from J itself (singular_values)
EXACT = 1e-9  # relative logit change of an exact map (float64, epsilon 0)
CHUNK = 4  # sequences per Jacobian chunk


@dataclass
class Measurement:
    """One architecture's measured continuous gauge dimension and the checks beside it (JSON-able)."""

    architecture: str
    parameters: int
    rows: int
    measured: int
    derived: int
    generators: dict[str, int]
    tangent_rank: int
    worst_tangent: float  # max over tangents of |J t| / (|J| |t|)
    last_kept: float  # the smallest singular value counted (relative to the largest)
    first_null: float  # the largest singular value counted null
    threshold: float
    discrete: dict[str, float] = field(default_factory=dict)  # generator -> relative logit change
    draws: dict[str, float] = field(default_factory=dict)  # continuous generators at realistic sizes
    remeasured: list[list[int]] = field(default_factory=list)  # [rows, null] of a re-measurement
    seconds: float = 0.0

    @property
    def agrees(self) -> bool:
        """Measured = derived, the tangents independent and exact, every map exact."""
        return (self.measured == self.derived == self.tangent_rank and self.worst_tangent < THRESHOLD
                and all(v < EXACT for v in {**self.discrete, **self.draws}.values()))

    def to_dict(self) -> dict[str, Any]:
        """JSON-able, with ``agrees``."""
        return {**asdict(self), "agrees": self.agrees}


def probe_config(architecture: str, sizes: dict[str, int]) -> Any:
    """The transformers config of a small random model of ``architecture`` (the registry's probe, these sizes)."""
    import transformers as hf

    config_class, _, extra = _probe(architecture)
    d, f, fe = sizes["d"], sizes["f"], sizes["fe"]
    moe = ARCHITECTURES[architecture].moe
    fields = {"hidden_size": d, "n_embd": d, "num_hidden_layers": sizes["L"], "n_layer": sizes["L"],
              "num_attention_heads": sizes["H"], "n_head": sizes["H"], "num_key_value_heads": sizes["Hkv"],
              "head_dim": sizes["hd"], "vocab_size": sizes["V"], "n_inner": f,
              "intermediate_size": fe if moe and architecture != "qwen2_moe" else f, "moe_intermediate_size": fe,
              "shared_expert_intermediate_size": sizes["fs"], "num_local_experts": sizes["E"],
              "num_experts": sizes["E"], "num_experts_per_tok": 2, "rms_norm_eps": 0.0, "layer_norm_epsilon": 0.0,
              "query_pre_attn_scalar": sizes["hd"], "max_position_embeddings": SEQ, "pad_token_id": None, **extra}
    if "layer_types" in fields:  # a pattern of layer kinds, repeated over the layers
        pattern = list(fields["layer_types"])
        fields["layer_types"] = [pattern[i % len(pattern)] for i in range(sizes["L"])]
    config = getattr(hf, config_class)(**fields)
    config._attn_implementation = "eager"
    return config


def _probe(architecture: str) -> tuple[str, str, dict[str, Any]]:
    probe = ARCHITECTURES[architecture].probe
    if probe is None:
        raise ValueError(f"{architecture}: no transformers probe in the registry")
    return probe


def sizes_of(architecture: str, sizes: dict[str, int]) -> dict[str, int]:
    """``sizes`` as the architecture has them (gpt2: every head its own K/V head)."""
    return {**sizes, "Hkv": sizes["H"]} if architecture == "gpt2" else dict(sizes)


def probe_model(architecture: str, generator: torch.Generator, sizes: dict[str, int] | None = None) -> Any:
    """A random float64 model of ``architecture``: matrices ~ N(0, 0.3^2), gains 1 + N(0, 0.3^2), biases N(0, 0.3^2)."""
    import transformers as hf

    sizes = sizes_of(architecture, sizes or SIZES)
    config = probe_config(architecture, sizes)
    with torch.random.fork_rng():
        torch.manual_seed(int(torch.randint(0, 2**31 - 1, (1,), generator=generator)))
        model = getattr(hf, _probe(architecture)[1])(config).double().eval()
    gemma = architecture.startswith("gemma")
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=generator, dtype=torch.float64) * 0.3
            gain = p.ndim == 1 and name.endswith("weight") and ("norm" in name or ".ln_" in name)
            p.copy_(noise + (1.0 if gain and not gemma else 0.0))
    return model


@contextmanager
def float64_forward(model: torch.nn.Module) -> Iterator[None]:
    """Every RMSNorm of ``model`` and every softmax computed in float64 (transformers casts them to float32)."""
    import torch.nn.functional as functional

    def rms_norm(self: Any, x: torch.Tensor) -> torch.Tensor:
        eps = getattr(self, "variance_epsilon", getattr(self, "eps", 0.0))
        y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
        return (1.0 + self.weight) * y if type(self).__name__.startswith("Gemma") else self.weight * y

    patched = [m for m in model.modules() if type(m).__name__.endswith("RMSNorm")]
    for module in patched:
        module.forward = rms_norm.__get__(module)  # type: ignore[method-assign]
    softmax = functional.softmax

    def softmax64(input: torch.Tensor, dim: int | None = None, _stacklevel: int = 3,
                  dtype: torch.dtype | None = None) -> torch.Tensor:
        return softmax(input, dim=dim, dtype=None if input.dtype == torch.float64 else dtype)

    functional.softmax = softmax64  # type: ignore[assignment]
    try:
        yield
    finally:
        functional.softmax = softmax
        for module in patched:
            del module.forward


def rows_for(parameters: int, sizes: dict[str, int], margin: float = 1.25) -> int:
    """Sequences to stack: each position adds at most ``d`` independent rows, ``margin`` times the parameters."""
    return CHUNK * math.ceil(margin * parameters / (SEQ * sizes["d"]) / CHUNK)


def measure(architecture: str, seed: int = 0, sizes: dict[str, int] | None = None,
            sequences: int | None = None) -> Measurement:
    """Measure ``architecture``'s continuous gauge dimension and check every generator of its group.

    Args:
        architecture: a row of :data:`geodrift.architectures.ARCHITECTURES` with a transformers probe.
        seed: the model's and the inputs' randomness.
        sizes: the model's sizes (default :data:`SIZES`).
        sequences: token sequences to stack (default :func:`rows_for`).

    Returns:
        The :class:`Measurement` (re-measured once with twice the sequences when measured > derived).
    """
    sizes = sizes_of(architecture, sizes or SIZES)
    generator = torch.Generator().manual_seed(seed)
    return measure_model(probe_model(architecture, generator, sizes), architecture, sizes, generator, sequences)


def tangent_jacobian(fn: Callable[[torch.Tensor], torch.Tensor], at: torch.Tensor) -> torch.Tensor:
    """``torch.func.jacfwd(fn)(at)``: the tangent directions of a group action at ``at``.

    On first use, torch's forward-mode decompositions call torch's own deprecated ``torch.jit.script``; that
    DeprecationWarning is torch's, not the caller's, so it is silenced here (and only here).
    """
    import warnings

    from torch.func import jacfwd

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"`torch\.jit\.script` is deprecated", category=DeprecationWarning)
        return jacfwd(fn)(at)


def measure_model(model: torch.nn.Module, architecture: str, sizes: dict[str, int], generator: torch.Generator,
                  sequences: int | None = None) -> Measurement:
    """:func:`measure` of a given float64 model (Hugging Face-named parameters; logits as a tensor or ``.logits``)."""
    start = time.perf_counter()
    params = {k: v.detach() for k, v in model.named_parameters()}
    count = sum(v.numel() for v in params.values())
    layout = Layout(architecture, sizes)
    config = getattr(model, "config", None)
    config = config.to_dict() if config is not None else {"num_attention_heads": sizes["H"],
                                                          "num_key_value_heads": sizes["Hkv"]}
    rs = role_state(params, architecture if ARCHITECTURES[architecture].gguf_arch else "llama", config)
    row = ARCHITECTURES[architecture]

    def flat(state: dict[Any, torch.Tensor]) -> torch.Tensor:
        hf = rs.to_hf(state)
        return torch.cat([hf[k].reshape(-1) for k in params])

    def moved(name: str) -> Callable[[torch.Tensor], torch.Tensor]:
        return lambda t: flat(ACTIONS[name].apply(rs.state, layout, t))

    tangents = torch.cat([tangent_jacobian(moved(g), torch.zeros(layout.size(g), dtype=torch.float64))
                          for g in row.continuous()], 1)
    n_seq = sequences or rows_for(count, sizes)

    def inputs(n: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
        # token sequences (every token at least once), each position's logits projected on d random directions of
        # its own (a position's logits carry at most d independent rows; one projection for all would hide part
        # of the head)
        ids = torch.randint(0, sizes["V"], (n, SEQ), generator=generator)
        ids.view(-1)[:sizes["V"]] = torch.randperm(sizes["V"], generator=generator)
        project = torch.randn(n, SEQ, sizes["V"], sizes["d"], generator=generator, dtype=torch.float64)
        return list(zip(ids.split(CHUNK), project.split(CHUNK), strict=True))

    def outputs(p: dict[str, torch.Tensor], x: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        return torch.einsum("btv,btvr->btr", logits(model, p, x[0]), x[1])

    with float64_forward(model):
        checks = _exact_maps(model, rs, layout, row, generator)  # first: a forward under jacrev may cache wrapped tensors
        gram, jt, blocks = gram_of(outputs, params, tangents, inputs(n_seq))
    out = count_null(architecture, gram, jt, tangents, n_seq * SEQ * sizes["d"], sizes,
                     {g: layout.size(g) for g in row.continuous()}, blocks)
    del gram, blocks
    out.discrete, out.draws = checks
    if out.measured > out.derived:
        with float64_forward(model):
            gram, jt, blocks = gram_of(outputs, params, tangents, inputs(2 * n_seq))
        again = count_null(architecture, gram, jt, tangents, 2 * out.rows, sizes, out.generators, blocks)
        out.remeasured = [[again.rows, again.measured]]
        if again.measured < out.measured:
            again.discrete, again.draws, again.remeasured = out.discrete, out.draws, [[out.rows, out.measured]]
            out = again
    out.seconds = time.perf_counter() - start
    return out


def logits(model: torch.nn.Module, params: dict[str, torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    """The model's outputs with ``params`` (a tensor, or a transformers output's ``.logits``)."""
    from torch.func import functional_call

    return _plain(functional_call(model, params, (x,)))


def _plain(out: Any) -> torch.Tensor:
    return out if isinstance(out, torch.Tensor) else out.logits


def gram_of(outputs: Callable[[dict[str, torch.Tensor], Any], torch.Tensor], params: dict[str, torch.Tensor],
            tangents: torch.Tensor, chunks: list[Any]) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]:
    """``G = sum_c J_c^T J_c`` (upper triangle, BLAS syrk) of ``outputs(params, x)`` over the input chunks,
    ``sum_c |J_c t|^2`` per tangent column ``t``, and the row blocks ``J_c`` themselves (for :func:`count_null`'s
    small singular values)."""
    from scipy.linalg import blas
    from torch.func import jacrev

    size = sum(v.numel() for v in params.values())
    gram = torch.zeros(size, size, dtype=torch.float64).numpy(force=True).T  # Fortran order: syrk writes in place
    jt = torch.zeros(tangents.shape[1], dtype=torch.float64)
    blocks = []
    for x in chunks:
        jac = jacrev(lambda p, x=x: outputs(p, x).reshape(-1))(params)
        block = torch.cat([jac[k].reshape(jac[k].shape[0], -1) for k in params], 1)
        gram = blas.dsyrk(1.0, block.numpy(), beta=1.0, c=gram, trans=1, lower=0, overwrite_c=1)
        jt += (block @ tangents).pow(2).sum(0)
        blocks.append(block)
    return torch.from_numpy(gram), jt, blocks


def count_null(architecture: str, gram: torch.Tensor, jt: torch.Tensor, tangents: torch.Tensor, rows: int,
               sizes: dict[str, int], generators: dict[str, int], blocks: list[torch.Tensor]) -> Measurement:
    """The null dimension of ``J`` (row ``blocks``, Gram ``gram``), beside the derived one and the tangents' rank and
    exactness: :func:`singular_values`, those below :data:`THRESHOLD` of the largest counted null."""
    count = gram.shape[0]
    values = singular_values(gram, blocks)
    relative = values / values[0]
    kept = int((relative > THRESHOLD).sum())
    rank, worst = 0, 0.0
    if tangents.shape[1]:
        rank = int(torch.linalg.matrix_rank(tangents / tangents.norm(dim=0, keepdim=True), rtol=1e-8))
        worst = float((jt.sqrt() / tangents.norm(dim=0)).max() / values[0])
    return Measurement(architecture, count, rows, count - kept, sum(generators.values()), generators, rank, worst,
                       float(relative[kept - 1]), float(relative[kept]) if kept < count else 0.0, THRESHOLD)


def singular_values(gram: torch.Tensor, blocks: list[torch.Tensor]) -> torch.Tensor:
    """``J``'s singular values, descending: from the eigenvalues of its Gram, the small ones recomputed from ``J``.

    The Gram squares ``J``'s condition: its eigenvalues carry an error of about ``eps`` times the largest, so a
    singular value read off them is known only to about ``sqrt(eps) ~ 1e-8`` of the largest: a null direction reads
    ``~1e-8`` and a weakly identified kept one (a few ``1e-6`` at width 16) sits close to any threshold between. The
    Gram's eigenvectors for the singular values below :data:`REFINE_BELOW` of the largest (eigenvalues below its
    square) span ``J``'s corresponding singular directions up to an angle of about ``eps / REFINE_BELOW^2`` towards
    the larger ones, so ``J`` applied to them, row block by row block, gives those singular values directly, not
    squared, to about ``eps / REFINE_BELOW ~ 2e-12`` of the largest: null directions read ``~1e-13`` (every row of
    :data:`geodrift.architectures.ARCHITECTURES` at :data:`SIZES`), the smallest kept ones ``1.5e-6`` and up, and
    :data:`THRESHOLD` sits decades from both.
    """
    from scipy.linalg import eigh

    values = torch.linalg.eigvalsh(gram, UPLO="U").flip(0).clamp_min(0.0).sqrt()
    low = int((values < REFINE_BELOW * values[0]).sum())
    if low == 0:
        return values
    _, vectors = eigh(gram.numpy(), lower=False, subset_by_index=[0, low - 1], driver="evr")
    basis = torch.from_numpy(vectors)
    values[-low:] = torch.linalg.svdvals(torch.cat([block @ basis for block in blocks]))
    return values


def _exact_maps(model: Any, rs: Any, layout: Layout, row: Any, generator: torch.Generator
                ) -> tuple[dict[str, float], dict[str, float]]:
    # every generator drawn at a realistic size, applied, the logits compared (relative max change)
    import copy

    ids = torch.randint(0, layout.sizes["V"], (2, SEQ), generator=generator)
    with torch.no_grad():
        before = _plain(model(ids))
    work = copy.deepcopy(model)
    discrete: dict[str, float] = {}
    draws: dict[str, float] = {}
    for name in row.generators():
        moved = ACTIONS[name].draw(rs.state, layout, generator)
        work.load_state_dict(rs.to_hf(moved), strict=False)
        with torch.no_grad():
            change = float((_plain(work(ids)) - before).abs().max() / before.abs().max())
        (draws if name in row.continuous() else discrete)[name] = change
    return discrete, draws
