"""Forgetting-aware merge weights (issue 41 item 4): per-layer interpolation between a base and its fine-tune,
chosen by an indicator, against the uniform midpoint, on the run's own held-out windows.

``geodrift merge`` (:mod:`geodrift.merging`) takes one weight per model, not per layer, so the interpolation is
:func:`geodrift.finetune.probes.layer_lerp`: ``(1 - a_l) theta_0 + a_l theta_T`` per decoder layer,
the parameters outside the layers at the mean weight. For a fine-tune of one base there is no gauge to align
(``geodrift merge``'s do-no-harm check), so a plain interpolation is that merge.

Weights from an indicator's per-layer values ``v_l`` (:func:`indicator_weights`): ``a_l = clip(1 - v_l / (2
mean v), 0, 1)`` - a mean of 1/2 like the midpoint's, with the layers the indicator flags kept closer to the base.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import torch

from geodrift.finetune.evaluate import paired, window_nlls
from geodrift.finetune.model import load_trainable, state_copy
from geodrift.finetune.probes import layer_lerp
from geodrift.finetune.run import run_folder, windows
from geodrift.finetune.spec import FinetuneSpec
from geodrift.io.atomic import document, payload_of, write_json

MERGE_RECORD = "merge.json"


def indicator_weights(values: list[float]) -> dict[int, float]:
    """Per-layer interpolation weights from an indicator's per-layer values (see the module docstring).

    Example:
        >>> indicator_weights([1.0, 1.0, 2.0, 0.0])
        {0: 0.5, 1: 0.5, 2: 0.0, 3: 1.0}
    """
    mean = sum(values) / len(values)
    if not mean > 0:
        return dict.fromkeys(range(len(values)), 0.5)
    return {layer: min(1.0, max(0.0, 1.0 - v / (2.0 * mean))) for layer, v in enumerate(values)}


def evaluate_merges(record: dict[str, Any], methods: dict[str, dict[int, float]], out: str | Path) -> dict[str, Any]:
    """Held-out NLLs of each per-layer merge of a run's base and last checkpoint, against the uniform midpoint.

    Args:
        record: a finished run's record (its last checkpoint must still be on disk).
        methods: name -> per-layer weights (``uniform`` is added: 0.5 everywhere).
        out: the grid's folder (the result is kept in the run's folder as ``merge.json`` and reused when the
            weights are the same).

    Returns:
        ``{"methods": {name: {"weights", "probe", "domain", "probe_vs_uniform", "domain_vs_uniform", "sum_vs_uniform",
        "sum_se", "verdict"}}, "base": ..., "finetuned": ...}`` (NLLs as mean over windows; paired differences with SE).
    """
    spec = FinetuneSpec.from_dict(record["spec"])
    n_layers = len(record["checkpoints"][-1]["taylor"]["per_layer"]) if "taylor" in record["checkpoints"][-1] \
        else len(next(iter(methods.values())))
    methods = {"uniform": dict.fromkeys(range(n_layers), 0.5), **methods}
    cache = run_folder(out, spec) / MERGE_RECORD
    wanted = {name: {str(k): v for k, v in w.items()} for name, w in methods.items()}
    if cache.is_file():
        old = payload_of(json.loads(cache.read_text(encoding="utf-8")))
        if {name: m["weights"] for name, m in old["methods"].items()} == wanted:
            return old
    device = torch.device("cpu")
    lm = load_trainable(spec.model, device)
    base = state_copy(lm.module)
    tuned = dict(load_trainable(record["checkpoints"][-1]["path"], device).module.named_parameters())
    data = windows(spec, lm)
    nlls = {}
    for name, weights in methods.items():
        layer_lerp(lm, base, {k: v.detach() for k, v in tuned.items()}, weights)
        probe = window_nlls(lm.logits, data["probe_windows"], device)
        domain = probe if spec.corpus == spec.probe else window_nlls(lm.logits, data["domain_windows"], device)
        nlls[name] = (probe, domain)
    result: dict[str, Any] = {"label": record["label"], "methods": {},
                              "base": {"probe": _mean(record["base"]["probe"]), "domain": _mean(record["base"]["domain"])},
                              "finetuned": {"probe": _mean(record["checkpoints"][-1]["probe"]),
                                            "domain": _mean(record["checkpoints"][-1]["domain"])}}
    for name, (probe, domain) in nlls.items():
        dp, dd = paired(nlls["uniform"][0], probe), paired(nlls["uniform"][1], domain)
        total, se = dp["mean"] + dd["mean"], math.sqrt(dp["se"] ** 2 + dd["se"] ** 2) if name != "uniform" else 0.0
        verdict = "—" if name == "uniform" else "beats" if total < -2 * se else "loses" if total > 2 * se else "ties"
        result["methods"][name] = {"weights": wanted[name], "probe": float(probe.mean()), "domain": float(domain.mean()),
                                   "probe_vs_uniform": dp, "domain_vs_uniform": dd, "sum_vs_uniform": total,
                                   "sum_se": se, "verdict": verdict}
    write_json(cache, document("finetune_merge", result))
    return result


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)
