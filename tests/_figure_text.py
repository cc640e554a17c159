"""Figure checks shared by the tests: drawn texts whose boxes overlap."""

from __future__ import annotations

from typing import Any


def overlapping_texts(figure: Any) -> list[tuple[str, str]]:
    """Pairs of drawn texts of a figure whose boxes overlap (titles, axis labels, tick labels, legend)."""
    figure.canvas.draw()
    renderer = figure.canvas.get_renderer()
    texts = [figure._suptitle] + [t for legend in figure.legends for t in legend.get_texts()]
    for ax in figure.axes:
        texts += [ax.title, ax.xaxis.label, ax.yaxis.label]
        for axis, (low, high) in ((ax.xaxis, sorted(ax.get_xlim())), (ax.yaxis, sorted(ax.get_ylim()))):
            texts += [tick.label1 for tick in axis.get_major_ticks() if low <= tick.get_loc() <= high]
    texts = [t for t in texts if t is not None and t.get_visible() and t.get_text().strip()]
    boxes = [(t.get_text(), t.get_window_extent(renderer)) for t in texts]
    return [(a, b) for i, (a, box_a) in enumerate(boxes) for b, box_b in boxes[i + 1:]
            if box_a.overlaps(box_b) and box_a.intersection(box_a, box_b).width > 1
            and box_a.intersection(box_a, box_b).height > 1]
