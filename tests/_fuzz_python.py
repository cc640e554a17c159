"""Fuzzing the Python face (issues 33, 39): ``geodrift.scan(...)`` with odd objects and types for every keyword, then
``report.plot(...)`` onto new paths, derived names and the user's own files, ``load_factored`` on folders
that are not factored saves, ``geodrift.read`` of anything; state dicts of numpy arrays and lists, path-like and bytes
paths, callbacks of the wrong signature, unknown architectures (tests/_fuzz_classes.py).

Shared by tests/_fuzz_commands.py (a ``python`` case among the command lines). Accepted outcomes: a return
(``ok``), or one GeodriftError of one line (``error``). Findings: any other exception (``traceback:<Type>``),
a multi-line message, a report carrying non-finite numbers (``nonfinite-success``: a corrupt tensor must be
refused by name), and - checked by the runner - a user's file changed.
"""

from __future__ import annotations

import json
import random
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

ODD: list[Any] = [None, 0, -1, 2**64, 10**12, 2.5, float("nan"), True, "", "x", "[/]", "\x1b[2J", "a\x00b",
                  "x" * 3000, b"bytes", [], [1, "x"], ["q", 3], [0, -1], {"a": 1}, set(), (1, 2), object(), print,
                  torch.zeros(2), np.int64(2), np.float32(1.5), Path("/nonexistent"), 1j]
VALID: dict[str, list[Any]] = {
    "roles": [None, "q,k", ["q", "attn_k"], "gate"], "layers": [None, "0-1", [0, 1], "1"], "k": [1, 2, np.int64(2)],
    "null_draws": [4, 6], "seed": [0, 7], "view": ["raw", "folded"], "names": [None], "architecture": [None, "llama"],
    "config": [None], "ov": [True, False], "full_spectrum": [False], "progress": [None, lambda label: None],
}


class PythonCase:
    """One call of the Python face, described for the findings."""

    def __init__(self, call: Callable[[], Any], text: str) -> None:
        self.call, self.text = call, text


def make_python_case(area: dict[str, Path], rng: random.Random, out: Path, model: str) -> PythonCase:
    """A hostile Python call (deterministic in ``rng``): a scan (then perhaps a plot), or a load_factored."""
    from _checkpoints import llama_state
    from _fuzz_classes import callback_variant, path_variant, read_target, state_dict_variant

    import geodrift

    if rng.random() < 0.06:
        given = read_target(area, rng, out)

        def read() -> Any:
            return geodrift.read(given)

        return PythonCase(read, f"geodrift.read({given!r})")
    if rng.random() < 0.1:
        folder = path_variant(rng, rng.choice([area["ours"], area["mine"], area["model"], area["root"] / "nope",
                                               area["root"] / "fifo", area["root"] / "corpus.txt", *ODD[:12]]))

        def load() -> Any:
            from geodrift.compress.factorized import load_factored

            return load_factored(folder)

        return PythonCase(load, f"load_factored({folder!r})")
    roll = rng.random()
    target: Any
    if roll < 0.35:
        target = llama_state(2, 16, 2, 1, 24, vocab=20, seed=rng.randrange(100))
        if rng.random() < 0.3:  # one tensor odd: integers, a NaN, an outlier, another shape, not a tensor
            name = "model.layers.1.self_attn.q_proj.weight"
            target[name] = rng.choice([target[name].to(torch.int64), target[name] * float("nan"),
                                       target[name].index_fill(0, torch.tensor([0]), 3e30), torch.ones(3),
                                       "not a tensor", target[name] > 0])
        if rng.random() < 0.4:  # numpy arrays, lists, tuples, float16 - or junk at a weight's name
            target = state_dict_variant(rng, target)
    elif roll < 0.7:
        target = path_variant(rng, model)
    elif roll < 0.8:
        target = torch.nn.Linear(4, 4)
    else:
        target = rng.choice(ODD)
    kwargs = {key: (rng.choice(values) if rng.random() < 0.92 else rng.choice(ODD)) for key, values in VALID.items()
              if rng.random() < 0.7}
    kwargs.setdefault("null_draws", 4)
    kwargs.setdefault("k", 2)
    if rng.random() < 0.15:
        kwargs["progress"] = callback_variant(rng)
    if rng.random() < 0.1:
        kwargs["architecture"] = rng.choice(["foo", "llama", "Mistral", "gemma2", "qwen2_moe", ""])
    if rng.random() < 0.3 and isinstance(target, dict):
        kwargs["config"] = rng.choice([{"num_attention_heads": 3, "num_key_value_heads": 3},
                                       {"num_attention_heads": 2, "num_key_value_heads": 1}, {"num_attention_heads": "2"},
                                       {1: 2}, ["x"]])
    plot: dict[str, Any] | None = None
    if rng.random() < 0.5:
        path = rng.choice([out / "fig.png", area["mine"] / "report.json", area["mine"] / "fig.png",
                           area["mine"] / "figures" / "my_continuity.png", area["mine"] / "fig_trajectory.png",
                           area["mine"], out / "f.gif", None, *ODD[:14]])
        plot = {"path": path}
        for key, valid in (("kind", ["continuity", "trajectory"]), ("dpi", [72]), ("overwrite", [False])):
            if rng.random() < 0.5:
                plot[key] = rng.choice(valid) if rng.random() < 0.7 else rng.choice(ODD)

    def run() -> Any:
        report = geodrift.scan(target, **kwargs)
        if plot is not None:
            import matplotlib.pyplot as plt

            plt.close(report.plot(**plot))
        return report

    shown = ", ".join(f"{k}={_short(v)}" for k, v in kwargs.items())
    return PythonCase(run, f"geodrift.scan({_short(target)}, {shown})" + (f".plot({plot})" if plot else ""))


def run_python_case(case: PythonCase) -> tuple[str, str | None]:
    """Run one call: ``(outcome, finding or None)``, outcomes as in the module docstring."""
    from _fuzz_classes import traceback_outcome

    from geodrift.errors import GeodriftError
    from geodrift.io.atomic import document, to_json

    try:
        result = case.call()
    except GeodriftError as error:
        if "\n" in str(error):
            return "multiline-error", f"{case.text}: {str(error)!r}"
        return "error", None
    except Exception as error:  # the findings the harness exists for
        lines = traceback.format_exception(type(error), error, error.__traceback__)
        return traceback_outcome(error), f"{case.text}: {''.join(lines[-3:]).strip()}"
    to_dict = getattr(result, "to_dict", None)
    if callable(to_dict) and "nonfinite" in json.loads(to_json(document("continuity_report", to_dict()))):
        return "nonfinite-success", f"{case.text}: the report holds non-finite numbers"
    return "ok", None


def _short(value: Any) -> str:
    text = repr(value) if not isinstance(value, dict) or len(value) < 4 else f"<dict of {len(value)}>"
    return text if len(text) <= 60 else text[:50] + "..."
