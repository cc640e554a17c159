"""``geodrift finetune``'s output: one row per checkpoint - forgetting and learning (paired, +- SE) and the
indicators beside the floor a random update of the same size gives."""

from __future__ import annotations

from typing import Any

from geodrift.io.atomic import document
from geodrift.render.layout import Col, Grid, print_grid


def _pm(d: dict[str, float]) -> str:
    return f"{d['mean']:+.4f} ± {d['se']:.4f}"


def finetune_grid(record: dict[str, Any]) -> Grid:
    """The checkpoints of one run as a table (forgetting = probe NLL change, learning = domain NLL change)."""
    grid = Grid(f"fine-tune {record['label']}: held-out NLL change from the base (nats, paired ± SE)",
                [Col("step"), Col("forgetting"), Col("learning"), Col("‖ΔW‖/‖W‖"), Col("top-8 rotation ° (random)"),
                 Col("intruders (random)"), Col("frame share (random; k/d)"), Col("Taylor + EWC")],
                caption=f"forgetting on {record['windows']['probe']} windows of {record['probe']['name']} (held out), "
                        f"learning on {record['windows']['domain']} of {record['corpus']['name']}; (random) = the same "
                        "indicator for W0 + a Gaussian update of the same norm; k/d = a random direction's share")
    for c in record["checkpoints"]:
        ind = c.get("indicators")
        cells = ["—"] * 4
        if ind is not None:
            v, n = ind["value"], ind["noise"]
            cells = [f"{v['rel_dw']:.5f}", f"{v['rotation_topk']:.3f} ({n['rotation_topk']:.3f})",
                     f"{v['intruders']:.0f} ({n['intruders']:.0f})",
                     f"{v['frame_share']:.4f} ({n['frame_share']:.4f}; {ind['null']['frame_share_random']:.4f})"]
        taylor = f"{c['taylor']['total']:+.4f}" if "taylor" in c else "—"
        grid.add(str(c["step"]), _pm(c["forgetting"]), _pm(c["learning"]), *cells, taylor)
    return grid


def show_finetune(record: dict[str, Any], *, as_json: bool, wide: bool) -> None:
    """The run's record as JSON (kind ``finetune_run``), or its table and a one-line summary."""
    from geodrift.render.files import print_document

    if as_json:
        print_document(document("finetune_run", record))
        return
    print_grid(finetune_grid(record), wide=wide)
    last = record["checkpoints"][-1]
    print(f"after {last['step']} steps: forgetting {_pm(last['forgetting'])} nats on {record['probe']['name']}, "
          f"learning {_pm(last['learning'])} nats on {record['corpus']['name']}")
