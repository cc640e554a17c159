"""One fine-tuning run, as plain data: what ``geodrift finetune`` runs and a sweep job carries across processes.

Example:
    >>> spec = FinetuneSpec(corpus="django-de", lr=2e-4, steps=24)
    >>> spec.label, spec.checkpoint_steps
    ('django-de lr0.0002 full', (8, 16, 24))
    >>> FinetuneSpec.from_dict(spec.to_dict()) == spec
    True
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

from geodrift.errors import GeodriftError

ARMS = ("full",)  # LoRA through peft (issue 41's second arm) is not built: refused, never run as full
PROBE_CORPUS = "stdlib-docs"  # the forgetting probe's kind of text: the model's original kind (English technical prose)


@dataclass(frozen=True)
class FinetuneSpec:
    """A fine-tuning run and what it measures.

    Attributes:
        corpus: the new domain (a name of :data:`geodrift.lm.corpora.CORPUS_NAMES` or a text path).
        lr: AdamW learning rate (constant, no weight decay).
        steps: optimiser steps; batch, seq_len: windows per step and tokens per window.
        model: a checkpoint path (GGUF, safetensors or Hugging Face folder); None: the embedded SmolLM2-135M.
        checkpoints: the steps at which a checkpoint is written and measured (empty: thirds of ``steps``).
        seed: the training windows' draw.
        arm: ``full`` (every parameter); ``lora`` is refused until the LoRA arm is built (``lora_rank`` is kept
            for it).
        probe: the corpus whose held-out split measures forgetting (the model's original kind of text).
        probe_windows, domain_windows: held-out windows of ``seq_len`` tokens (the domain's are capped by its
            held-out text).
        taylor_windows: windows of the probe corpus's training split for the first-order Taylor / EWC
            prediction (0: none).
        reverts: measure single-layer reverts at the last checkpoint on ``revert_windows`` probe windows.
        keep: ``all`` checkpoints, or only the ``final`` one (the others are deleted once measured).
        indicators: measure the weights-only indicators at each checkpoint.
    """

    corpus: str
    lr: float
    steps: int
    model: str | None = None
    batch: int = 2
    seq_len: int = 128
    checkpoints: tuple[int, ...] = ()
    seed: int = 0
    arm: str = "full"
    lora_rank: int = 8
    probe: str = PROBE_CORPUS
    probe_windows: int = 64
    domain_windows: int = 32
    taylor_windows: int = 4
    reverts: bool = False
    revert_windows: int = 16
    keep: str = "all"
    indicators: bool = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "checkpoints", tuple(int(s) for s in self.checkpoints))
        self.check()

    @property
    def label(self) -> str:
        """``<corpus> lr<lr> <arm>``: the run's name (and, slugged, its folder)."""
        return f"{self.corpus} lr{self.lr:g} {self.arm}"

    @property
    def checkpoint_steps(self) -> tuple[int, ...]:
        """The measured steps: ``checkpoints`` or, when empty, thirds of ``steps`` (always ending at ``steps``)."""
        if self.checkpoints:
            return self.checkpoints
        return tuple(sorted({max(1, round(self.steps * i / 3)) for i in (1, 2, 3)}))

    def check(self) -> None:
        """Refuse values no run can use, naming the option.

        Raises:
            GeodriftError: one line naming the option and the allowed values.
        """
        for name in ("steps", "batch", "seq_len", "probe_windows", "domain_windows", "revert_windows", "lora_rank"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise GeodriftError(f"--{name.replace('_', '-')}: must be a positive integer, got {value!r}")
        if isinstance(self.taylor_windows, bool) or not isinstance(self.taylor_windows, int) or self.taylor_windows < 0:
            raise GeodriftError(f"--taylor-windows: must be >= 0 (0: none), got {self.taylor_windows!r}")
        if isinstance(self.lr, bool) or not isinstance(self.lr, (int, float)) or not self.lr > 0:
            raise GeodriftError(f"--lr: must be a positive number, got {self.lr!r}")
        if self.arm not in ARMS:
            raise GeodriftError(f"--arm {self.arm!r}: use {' or '.join(ARMS)} (the LoRA arm is not built yet)")
        if self.keep not in ("all", "final"):
            raise GeodriftError(f"--keep {self.keep!r}: use all or final")
        bad = [s for s in self.checkpoints if not 1 <= s <= self.steps]
        if bad or len(set(self.checkpoints)) != len(self.checkpoints):
            raise GeodriftError(f"--checkpoints {','.join(map(str, self.checkpoints))}: each must be a distinct step "
                                f"in 1..{self.steps} (--steps)")
        if self.checkpoints and max(self.checkpoints) != self.steps:
            raise GeodriftError(f"--checkpoints: the last must be --steps ({self.steps}), the run's end")

    def to_dict(self) -> dict[str, Any]:
        """Plain data (JSON, and across process boundaries), with ``kind: finetune``."""
        return {"kind": "finetune", **asdict(self), "checkpoints": list(self.checkpoints)}

    @classmethod
    def from_dict(cls, payload: dict[str, Any]) -> FinetuneSpec:
        """The spec of :meth:`to_dict` (unknown keys refused)."""
        names = {f.name for f in fields(cls)}
        unknown = set(payload) - names - {"kind"}
        if unknown:
            raise GeodriftError(f"finetune spec: unknown field(s) {', '.join(sorted(unknown))}")
        values = {k: v for k, v in payload.items() if k in names}
        values["checkpoints"] = tuple(values.get("checkpoints", ()))
        return cls(**values)
