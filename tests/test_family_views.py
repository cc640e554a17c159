"""The default view of every architecture: its numbers and verdicts unchanged by every generator of its group.

Real parts: random transformers models of every row of geodrift.architectures (3 layers, width 16, gains and
biases random, built from their configs), each generator of the row drawn at a realistic size
(geodrift.gauge.generator_actions: log-normal scales of spread 1 to 1.5, V/O and Q/K maps of condition 30 (a float32 copy keeps
7 digits: c x 1e-7 of rounding), Haar
rotations, router shifts of size 3, every sign flip and permutation), all applied at once in an order
Hypothesis draws, the function checked unchanged, then both state dicts scanned through geodrift.scan's
default view. Beside it, the folded view is shown to move under the generators it does not fix.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from _gauge import differences
from hypothesis import HealthCheck, given
from hypothesis import strategies as st
from strategies import examples

import geodrift
from geodrift.architectures import ARCHITECTURES
from geodrift.gauge.generator_actions import ACTIONS
from geodrift.gauge.generators import Layout
from geodrift.prove import jacobian
from geodrift.prove.twins import has_transformers
from geodrift.scanner.role_state import RoleState, role_state

pytestmark = pytest.mark.skipif(not has_transformers(), reason="the models are transformers models")
PROBED = [a for a, row in ARCHITECTURES.items() if row.probe is not None]
SIZES = {**jacobian.SIZES, "L": 3}
SAME = 1e-5  # every number of the two default reports (relative beyond 1; z and EVR: _gauge.DERIVED_TOLERANCE)
SCAN: dict[str, Any] = {"null_draws": 24, "k": 2}


class Probe:
    """A random float64 model of one architecture, its canonical-key state and its default scan."""

    def __init__(self, architecture: str) -> None:
        self.architecture = architecture
        self.sizes = jacobian.sizes_of(architecture, SIZES)
        generator = torch.Generator().manual_seed(7)
        self.model = jacobian.probe_model(architecture, generator, self.sizes)
        self.params = {k: v.detach().clone() for k, v in self.model.named_parameters()}
        self.config = self.model.config.to_dict()
        self.rs: RoleState = role_state(self.params, architecture, self.config)
        self.layout = Layout(architecture, self.sizes)
        self.ids = torch.randint(0, self.sizes["V"], (2, jacobian.SEQ), generator=generator)
        self.logits = self.run(self.params)

    def run(self, params: dict[str, torch.Tensor]) -> torch.Tensor:
        with jacobian.float64_forward(self.model), torch.no_grad():
            self.model.load_state_dict(params, strict=False)
            out = self.model(self.ids).logits
        self.model.load_state_dict(self.params, strict=False)
        return out

    def gauged(self, seed: int, order: list[str]) -> dict[str, torch.Tensor]:
        generator = torch.Generator().manual_seed(seed)
        state = dict(self.rs.state)
        for name in order:
            state = ACTIONS[name].draw(state, self.layout, generator)
        return self.rs.to_hf(state)

    def scan(self, params: dict[str, torch.Tensor], view: str | None = None) -> geodrift.ScanReport:
        return geodrift.scan({k: v.to(torch.float32) for k, v in params.items()}, view=view, config=self.config,
                             architecture=self.architecture, **SCAN)


_PROBES: dict[str, Probe] = {}
_REPORTS: dict[tuple[str, str | None], geodrift.ScanReport] = {}


def probe(architecture: str) -> Probe:
    if architecture not in _PROBES:
        _PROBES[architecture] = Probe(architecture)
    return _PROBES[architecture]


def report(architecture: str, view: str | None = None) -> geodrift.ScanReport:
    if (architecture, view) not in _REPORTS:
        p = probe(architecture)
        _REPORTS[(architecture, view)] = p.scan(p.params, view)
    return _REPORTS[(architecture, view)]


@pytest.mark.parametrize("architecture", PROBED)
def test_the_default_view_is_the_rows_view_and_invariant_everywhere(architecture: str) -> None:
    base = report(architecture)
    assert base.view == ARCHITECTURES[architecture].view == "canonical", base.notes
    assert {s.gauge for r in base.roles for s in r.spaces.values()} <= {"invariant", "aligned"}


@pytest.mark.parametrize("architecture", PROBED)
@examples(4, suppress_health_check=[HealthCheck.function_scoped_fixture], deadline=None)
@given(data=st.data())
def test_every_generator_of_the_group_leaves_the_default_scan_unchanged(architecture: str, data: Any) -> None:
    p = probe(architecture)
    order = data.draw(st.permutations(list(ARCHITECTURES[architecture].generators())), label="order")
    moved = p.gauged(data.draw(st.integers(0, 2**31 - 1), label="seed"), order)
    change = p.run(moved) - p.logits
    assert float(change.abs().max() / p.logits.abs().max()) < 1e-9  # exact: the same function
    assert differences(report(architecture), p.scan(moved), SAME) == []


@pytest.mark.parametrize(("architecture", "generator"), [("gemma3", "qk_head_scale"), ("gemma3", "signed_permute"),
                                                        ("qwen3", "qk_head_scale"), ("gpt2", "writer_ones"),
                                                        ("mixtral", "router_shift")])
def test_the_folded_view_moves_under_a_generator_the_default_view_fixes(architecture: str, generator: str) -> None:
    # the control: the property above is not vacuous - the folded numbers move, the default ones do not
    p = probe(architecture)
    moved = p.gauged(3, [generator])
    folded = differences(report(architecture, "folded"), p.scan(moved, "folded"), SAME)
    assert folded, f"{generator} moved no folded number of {architecture}"
    assert differences(report(architecture), p.scan(moved), SAME) == []


def test_gemma3_norm_gain_sign_flips_move_raw_not_folded_nor_default() -> None:
    # issue 42's first finding: pre-norm gain signs against reader columns, post-norm gain signs against O/Down
    # rows leave the logits unchanged; raw moves, folded and the default view do not
    p = probe("gemma3")
    moved = p.gauged(5, ["gain_sign", "post_gain_sign"])
    assert float((p.run(moved) - p.logits).abs().max() / p.logits.abs().max()) < 1e-12
    assert differences(report("gemma3", "raw"), p.scan(moved, "raw"), SAME)
    for view in ("folded", None):
        assert differences(report("gemma3", view), p.scan(moved, view), SAME) == [], view
    assert math.isfinite(report("gemma3").roles[0].spaces["v"].vectors[0].mean)


@pytest.mark.parametrize("architecture", ["llama", "gemma2", "gpt2"])
def test_an_embedding_read_in_blocks_signs_alike_and_keeps_the_default_scan_exact(architecture: str, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    # a wide embedding is read in blocks of rows for the signs' reference (scanner.embedding_rows.BLOCK): the same
    # numbers as a whole read, and exact under every generator of the row
    from geodrift.scanner import embedding_rows

    p = probe(architecture)
    whole = p.scan(p.params)
    monkeypatch.setattr(embedding_rows, "BLOCK", 100)
    moved = p.gauged(13, list(ARCHITECTURES[architecture].generators()))
    blocks = p.scan(p.params)
    assert differences(blocks, whole, SAME) == []
    assert differences(blocks, p.scan(moved), SAME) == []
