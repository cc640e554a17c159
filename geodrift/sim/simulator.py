"""The two simulators behind one small protocol: what differs between the toy MLP and the transformer.

A :class:`Simulator` says how one of them builds its model, data, loss and tracker for a run
(:meth:`Simulator.parts`), which final weights it reports, how it counts throughput, whether its
seeds can train as one batched ensemble, whether it saves Hugging Face folders, which columns a
reproduction shows, and whether its report is per projection (the paper's Table 2) or one block
matrix per layer (Tables 1-5). Everything else (the training loop, checkpoints, records, reports,
tables, figures) is shared and asks the simulator instead of comparing names.

``simulator(name)`` gives the object of a :class:`~geodrift.sim.config.RunSpec`'s ``sim``
(``"mlp"`` or ``"transformer"``, as stored in every record).

Example:
    >>> simulator("mlp").columns("drift")[:3]
    ('acc', 'acc min', 'W v1 peak')
    >>> simulator("transformer").per_projection, simulator("mlp").seed_groups([42, 43], batched=True)
    (True, [[42, 43]])
"""

from __future__ import annotations

import functools
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import torch
from torch import nn

from geodrift.errors import GeodriftError
from geodrift.lm.hf import hf_step_dir, save_hf
from geodrift.lm.llama import LlamaLM
from geodrift.lm.text import Corpus, TokenBatches, encode_ids, eval_windows, lm_loss, load_corpus, perplexity
from geodrift.lm.tokenizer import Tokenizer, make_tokenizer
from geodrift.sim.canonical import canonical_weightset
from geodrift.sim.config import (
    ImageData,
    LlamaConfig,
    MLPConfig,
    Model,
    RunSpec,
    TextData,
    TrackConfig,
    TrainConfig,
)
from geodrift.sim.data import Dataset, ShuffledBatches, check_dataset, load_dataset
from geodrift.sim.mlp import ResidualMLP, build_mlp, ensemble_loss
from geodrift.sim.presets import preset
from geodrift.sim.reference import PAPER_TABLE2_SPACE
from geodrift.sim.track import LlamaTracker, MLPTracker, Row
from geodrift.sim.train import BatchSource, LossFn
from geodrift.weights import WeightSet

Stage = Callable[[str], None]

MLP_COLUMNS: dict[str, tuple[str, ...]] = {
    "table1": ("acc", "G v1", "G s2wa(v)", "Gcum v1", "W v1", "W s2wa(v)", "delta_gw", "W u1",
               "G0 v1", "rel_change"),
    "table3": ("acc", "G v1", "G s2wa(v)", "W v1", "W v2", "W s2wa(v)", "W u1", "rel_change"),
    "drift": ("acc", "acc min", "W v1 peak", "W v1", "G v1", "rotation_deg", "delta_gw"),
    "appf": ("acc", "W v1", "W v1 null", "G erank", "G v1", "Gcum v1", "delta_gw"),
    "datasize": ("acc", "train acc", "W v1", "W v1 null", "G v1", "Gcum v1", "delta_gw", "W s2wa(v)", "G erank"),
    "ema": ("acc", "W v1", "align G", "align Gcum", "align EMA0.9", "align EMA0.99", "align EMA0.999"),
}
DEFAULT_MLP_COLUMNS = ("acc", "G0 v1", "G v1", "G s2wa(v)", "Gcum v1", "W v1", "W s2wa(v)", "delta_gw", "W u1",
                       "rel_change", "rotation_deg")
# The transformer: each projection in the space the paper's Table 2 reports, from the final report.
TRANSFORMER_COLUMNS = tuple(f"final {role} {space}1" for role, space in PAPER_TABLE2_SPACE.items()) + ("ppl",)


def silent(message: str) -> None:
    """The default start-up message sink (``on_stage``): say nothing."""


@dataclass
class Parts:
    """What a simulator plugs into the shared run skeleton (``geodrift.sim.run.run``) for one group of seeds."""

    model: nn.Module
    batches: BatchSource
    loss_fn: LossFn
    tracker: MLPTracker | LlamaTracker | None
    data_note: str  # the data as the records name it
    weightset: Callable[[int], WeightSet]  # member -> its final weights
    untracked_rows: Callable[[int], list[Row]] = lambda step: []  # end-of-run rows when tracking is off
    files: dict[str, tuple[str, Any]] = field(default_factory=dict)  # file name -> (kind, payload) beside run.json


class Simulator(ABC):
    """One simulator: its run parts and the facts the shared code asks about it.

    Attributes:
        name: the ``sim`` of its run specs and records (``"mlp"``, ``"transformer"``).
        per_projection: its final report has one row per projection (attention and MLP; the paper's
            Table 2, judged per projection, beside pretrained models) rather than one block matrix per
            layer (the paper's Tables 1-5, judged by the toy-MLP claims).
        ensembles: several seeds can train as one batched ensemble (members never interact).
        exports_hf: its weights can be saved as Hugging Face folders during training.
        throughput: the timing key of a record (``steps_per_second``, ``tokens_per_second``).
    """

    name: ClassVar[str]
    per_projection: ClassVar[bool]
    ensembles: ClassVar[bool]
    exports_hf: ClassVar[bool]
    throughput: ClassVar[str]

    @abstractmethod
    def parts(self, spec: RunSpec, seeds: list[int], device: torch.device, track: bool,
              on_stage: Stage = silent) -> Parts:
        """Model, batches, loss, tracker and final weights of one group of ``seeds`` on ``device``.

        Raises:
            GeodriftError: the data cannot be read, or the group cannot train together.
        """

    @abstractmethod
    def columns(self, preset_name: str) -> tuple[str, ...]:
        """The summary columns a reproduction of ``preset_name`` shows (keys of the records' summaries)."""

    @abstractmethod
    def default_spec(self) -> RunSpec:
        """The starting point of a grid configuration that names no ``base`` preset."""

    def units_per_step(self, spec: RunSpec) -> int:
        """What one optimiser step processes in the :attr:`throughput` unit (1 step, or tokens)."""
        return 1

    def ablated_label(self, spec: RunSpec, model: Model, ablations: list[str]) -> str:
        """The label of ``spec`` after ``ablations`` turned its model into ``model``."""
        return f"{spec.label}+{'+'.join(ablations)}"

    def seed_groups(self, seeds: list[int], batched: bool) -> list[list[int]]:
        """The seeds trained together: one ensemble (``batched``, where the simulator can), else one per run."""
        return [list(seeds)] if batched and self.ensembles else [[s] for s in seeds]

    def check_data(self, name: str, where: str) -> str:
        """``name`` if the runs can load it (a grid file's ``data``), else a one-line error naming ``where``.

        The transformer reads an existing corpus file or folder; the MLP also knows named data sets.
        """
        if not Path(name).expanduser().exists():
            raise GeodriftError(f"{where}: no data set {name!r}; use an existing text file or folder")
        return name

    def save_hf(self, spec: RunSpec, model: nn.Module, run_folder: Path, step: int) -> None:
        """Save ``model`` after ``step`` steps as a Hugging Face folder under ``run_folder``.

        Raises:
            GeodriftError: when the simulator has no Hugging Face form (:attr:`exports_hf` is False).
        """
        raise GeodriftError(f"--save-hf-every: the {self.name} simulator saves no Hugging Face folders")


# ---- the MLP -------------------------------------------------------------------------------
_IMAGES: dict[str, Dataset] = {}  # data sets loaded by this process (several presets' rows share one)


def image_data(name: str, on_stage: Stage = silent) -> Dataset:
    """The image data set ``name`` (``geodrift.sim.data.load_dataset``), loaded once per process."""
    if name not in _IMAGES:
        check_dataset(name)  # a missing path is one line, with no status line before it
        on_stage(f"loading the {name} data set")
        _IMAGES[name] = load_dataset(name)
    return _IMAGES[name]


class MLPSimulator(Simulator):
    """The paper's toy residual MLP on images (section 4); seeds batch into one ensemble."""

    name = "mlp"
    per_projection = False
    ensembles = True
    exports_hf = False
    throughput = "steps_per_second"

    def parts(self, spec: RunSpec, seeds: list[int], device: torch.device, track: bool,
              on_stage: Stage = silent) -> Parts:
        assert isinstance(spec.model, MLPConfig) and isinstance(spec.data, ImageData)
        if spec.train.grad_clip > 0 and len(seeds) > 1:
            raise GeodriftError("grad_clip: a global norm would couple the ensemble's members; train seeds one by one")
        data = image_data(spec.data.name, on_stage).to(device)
        model: ResidualMLP = build_mlp(spec.model, data.in_dim, data.n_classes, seeds, device)
        batches = ShuffledBatches(data, seeds, spec.train.batch_size)
        epoch_steps = spec.train.epoch_steps or batches.steps_per_epoch
        tracker = MLPTracker(model, data, spec.track, epoch_steps, seeds) if track and spec.track.every > 0 else None
        return Parts(model, batches, ensemble_loss, tracker, data.name,
                     lambda e: model.weightset(e, origin=f"simulated {spec.label} seed {seeds[e]}"))

    def columns(self, preset_name: str) -> tuple[str, ...]:
        return MLP_COLUMNS.get(preset_name, DEFAULT_MLP_COLUMNS)

    def default_spec(self) -> RunSpec:
        # The paper's toy MLP with every default (the same spec as a Table 1 row).
        return RunSpec(self.name, "Res+ReLU", MLPConfig(), ImageData(), TrainConfig(), TrackConfig())

    def check_data(self, name: str, where: str) -> str:
        from geodrift.sim.augment import parse_augmented
        from geodrift.sim.data import DATASET_NAMES

        if name in DATASET_NAMES or parse_augmented(name) is not None:
            return name
        if not Path(name).expanduser().exists():
            raise GeodriftError(f"{where}: no data set {name!r}; use {' or '.join(DATASET_NAMES)} (or NAME-aug60k), "
                                "an existing folder of IDX files or .npz file")
        return name

    def ablated_label(self, spec: RunSpec, model: Model, ablations: list[str]) -> str:
        # A row labelled with the paper's name of its model keeps that naming after ablations.
        assert isinstance(spec.model, MLPConfig) and isinstance(model, MLPConfig)
        return model.name() if spec.label == spec.model.name() else super().ablated_label(spec, model, ablations)


# ---- the transformer -------------------------------------------------------------------------
@dataclass(frozen=True)
class Text:
    """A corpus, the tokenizer trained on its training split, and both splits encoded."""

    corpus: Corpus
    tokenizer: Tokenizer
    train: torch.Tensor  # (N,) int64 ids
    valid: torch.Tensor


_TEXTS: dict[TextData, Text] = {}  # per process: several configurations of one preset share them


def prepare_text(data: TextData, on_stage: Stage = silent) -> Text:
    """The corpus, a tokenizer trained on its training split, and both splits encoded (cached per process).

    Args:
        data: corpus and tokenizer settings.
        on_stage: told before each slow step (reading, tokenizer training, encoding).
    """
    if data not in _TEXTS:
        on_stage(f"reading the corpus ({data.corpus or 'embedded stdlib docs'})")
        corpus = load_corpus(data.corpus, data.max_chars)
        if data.tokenizer == "bpe":
            on_stage(f"training a {data.vocab}-id BPE tokenizer on {len(corpus.train):,} characters of the "
                     "training split (once per process)")
        tokenizer = make_tokenizer(data.tokenizer, corpus.train, data.vocab)
        on_stage(f"encoding {len(corpus.train) + len(corpus.valid):,} characters")
        while len(_TEXTS) >= 2:  # keep at most two corpora resident
            _TEXTS.pop(next(iter(_TEXTS)))
        _TEXTS[data] = Text(corpus, tokenizer, encode_ids(tokenizer, corpus.train), encode_ids(tokenizer, corpus.valid))
    return _TEXTS[data]


def build_llama(cfg: LlamaConfig, vocab_size: int, seed: int) -> LlamaLM:
    """The only LlamaConfig -> module builder; init drawn from ``Generator(seed)``."""
    return LlamaLM(vocab_size, cfg.d_model, cfg.n_layers, cfg.n_heads, cfg.d_ff, n_kv_heads=cfg.n_kv_heads,
                   rope_theta=cfg.rope_theta, norm_eps=cfg.norm_eps, tie_embeddings=cfg.tie_embeddings,
                   activation=cfg.activation, residual=cfg.residual, norm=cfg.norm, attention=cfg.attention,
                   v_activation=cfg.v_activation, init_std=cfg.init_std,
                   generator=torch.Generator().manual_seed(seed))


class TransformerSimulator(Simulator):
    """A Llama-style decoder on text (section 5); one seed per run, reported per projection."""

    name = "transformer"
    per_projection = True
    ensembles = False
    exports_hf = True
    throughput = "tokens_per_second"

    def parts(self, spec: RunSpec, seeds: list[int], device: torch.device, track: bool,
              on_stage: Stage = silent) -> Parts:
        assert isinstance(spec.model, LlamaConfig) and isinstance(spec.data, TextData)
        seed = seeds[0]  # one per run (``ensembles`` is False)
        text = prepare_text(spec.data, on_stage)
        model = build_llama(spec.model, text.tokenizer.vocab_size, seed).to(device)
        windows = eval_windows(text.valid, spec.data.seq_len, spec.data.eval_windows)
        token_bytes = text.tokenizer.token_bytes()
        steps_per_epoch = spec.train.epoch_steps or max(1.0, text.train.numel() / self.units_per_step(spec))
        note = (f"{text.corpus.name}:{text.corpus.sha256[:16]} ({text.corpus.source}); {text.tokenizer.kind} "
                f"{text.tokenizer.vocab_size}; train {text.train.numel()} tokens, valid {text.valid.numel()} tokens")

        def evaluate() -> dict[str, float]:
            return perplexity(model, windows, token_bytes)

        def untracked_rows(step: int) -> list[Row]:
            stats = evaluate()
            return [[step, step / steps_per_epoch, "eval", None, name, None, None, None, stats[name]]
                    for name in ("nll", "ppl", "bits_per_byte")]

        tracker = LlamaTracker(model, spec.track, spec.train.steps, steps_per_epoch, seed, evaluate) if track else None
        # the final report in the tracker's view
        final_weights = functools.partial(canonical_weightset, model) if spec.track.view == "canonical" \
            else model.weightset
        return Parts(model, TokenBatches(text.train, spec.train.batch_size, spec.data.seq_len, seed, device), lm_loss,
                     tracker, note, lambda e: final_weights(origin=f"simulated {spec.label} seed {seed}"),
                     untracked_rows, {"tokenizer.json": ("tokenizer", {"tokenizer": text.tokenizer.to_dict()})})

    def columns(self, preset_name: str) -> tuple[str, ...]:
        return TRANSFORMER_COLUMNS

    def default_spec(self) -> RunSpec:
        return preset(self.name, "cpu")[0]

    def units_per_step(self, spec: RunSpec) -> int:
        assert isinstance(spec.data, TextData)
        return spec.train.batch_size * spec.data.seq_len

    def save_hf(self, spec: RunSpec, model: nn.Module, run_folder: Path, step: int) -> None:
        assert isinstance(spec.model, LlamaConfig) and isinstance(model, LlamaLM)
        save_hf(model, hf_step_dir(run_folder, step), step=step)  # the module's writer, not this method


_SIMULATORS: dict[str, Simulator] = {s.name: s for s in (MLPSimulator(), TransformerSimulator())}


def simulator(name: str) -> Simulator:
    """The simulator object of a run spec's (or a record's) ``sim``.

    Raises:
        GeodriftError: on a name that is not a simulator.
    """
    if name not in _SIMULATORS:
        raise GeodriftError(f"simulator: unknown value {name!r}; choose one of {', '.join(_SIMULATORS)}")
    return _SIMULATORS[name]
