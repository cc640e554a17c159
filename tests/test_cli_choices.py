"""The command line's closed choices (``geodrift.cli.choices``): the library's names, listed by ``--help``.

Refusals of a value outside a choice are in ``test_bad_options.py``.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from _checkpoints import hf_config, llama_state, write_hf_folder
from typer.testing import CliRunner

from geodrift.cli import choices
from geodrift.cli.main import app
from geodrift.errors import GeodriftError


def _values(choice: type[choices.Choice]) -> list[str]:
    return [member.value for member in choice]


def test_each_choice_lists_exactly_the_names_the_library_accepts(tmp_path: Path):
    from geodrift.compress.factorized import DTYPES
    from geodrift.compress.methods import METHODS as SHARE_METHODS
    from geodrift.compress.prune import METHODS
    from geodrift.lm.tokenizer import make_tokenizer
    from geodrift.scanner.readers import VIEWS
    from geodrift.scanner.scan import load_weights
    from geodrift.sim.presets import PRESETS
    from geodrift.sim.train import resolve_device
    from geodrift.sweep.runner import BACKENDS

    assert _values(choices.MLPPreset) == list(PRESETS["mlp"])
    assert _values(choices.TransformerPreset) == list(PRESETS["transformer"])
    assert _values(choices.Backend) == list(BACKENDS)
    assert _values(choices.PruneMethod) == list(METHODS)
    assert _values(choices.ShareMethod) == list(SHARE_METHODS)
    assert _values(choices.SaveDtype) == list(DTYPES)
    assert {make_tokenizer(v, "some training text " * 50, 260).kind for v in _values(choices.Tokenizer)} == {
        "bpe", "bytes"}
    folder = write_hf_folder(tmp_path / "model", llama_state(n_layers=2), hf_config(n_layers=2))
    assert [load_weights(folder, v)[0].view for v in _values(choices.View)] == list(VIEWS) == ["raw", "folded", "canonical"]
    assert set(_values(choices.Device)) == {"auto", "cpu", "cuda"}
    from geodrift.gauge.align import DEFAULT_HEAD_MAPS, HEAD_MAPS
    from geodrift.sim.config import TrackConfig

    assert sorted(_values(choices.HeadMaps)) == sorted(HEAD_MAPS) and DEFAULT_HEAD_MAPS == choices.HeadMaps.orthogonal
    from geodrift.merging.names import ALIGN_MODES
    from geodrift.merging.names import METHODS as MERGE_METHODS

    assert _values(choices.MergeMethod) == list(MERGE_METHODS) and _values(choices.AlignMode) == list(ALIGN_MODES)

    assert [TrackConfig(view=v).view for v in _values(choices.TrackView)] == ["raw", "canonical"]
    with pytest.raises(GeodriftError, match="--view"):
        TrackConfig(view="folded")
    assert resolve_device("cpu").type == "cpu" and resolve_device("auto").type in ("cpu", "cuda")  # cuda: if present
    for refused in ("cooked", "Raw"):  # the library refuses what the Enum refuses
        with pytest.raises(GeodriftError):
            load_weights(folder, refused)
    with pytest.raises(GeodriftError, match="--device"):
        resolve_device("tpu")


def test_a_choice_is_its_plain_name_wherever_the_library_uses_it():
    view = choices.View("folded")
    assert view is choices.View.folded and view == "folded" and hash(view) == hash("folded")
    assert str(view) == "folded" and f"{view}" == "folded" and f"{view:>8}" == "  folded" and f"{view!r}" != "folded"
    assert {"folded": 1}[view] == 1 and choices.ShareMethod.basis_sharing == "basis-sharing"


@pytest.mark.parametrize(("command", "option", "choice"), [
    (["scan"], "--view", choices.View),
    (["drift"], "--view", choices.View),
    (["compare"], "--view", choices.View),
    (["compare"], "--head-maps", choices.HeadMaps),
    (["drift"], "--head-maps", choices.HeadMaps),
    (["simulate", "mlp"], "--preset", choices.MLPPreset),
    (["simulate", "mlp"], "--device", choices.Device),
    (["simulate", "mlp"], "--backend", choices.Backend),
    (["simulate", "transformer"], "--preset", choices.TransformerPreset),
    (["simulate", "transformer"], "--tokenizer", choices.Tokenizer),
    (["simulate", "transformer"], "--view", choices.TrackView),
    (["sweep"], "--backend", choices.Backend),
    (["sweep"], "--device", choices.Device),
    (["reproduce"], "--backend", choices.Backend),
    (["compress", "prune"], "--save-method", choices.PruneMethod),
    (["compress", "share"], "--save-method", choices.ShareMethod),
    (["compress", "share"], "--save-format", choices.SaveFormat),
    (["compress", "share"], "--save-dtype", choices.SaveDtype),
    (["merge"], "--method", choices.MergeMethod),
    (["merge"], "--align", choices.AlignMode),
])
def test_help_lists_every_choice_of_an_option(command: list[str], option: str, choice: type[choices.Choice]):
    result = CliRunner().invoke(app, [*command, "--help"], env={"COLUMNS": "400", "TERMINAL_WIDTH": "400"})
    assert result.exit_code == 0, result.output
    line = next(line for line in result.output.splitlines() if re.search(rf"{option}\b", line))
    assert f"<{'|'.join(_values(choice))}>" in line, line
