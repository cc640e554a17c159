"""Text from files, paths and options is printed literally (issue 23): never parsed as rich markup, never
sent raw to the terminal. A tensor name or a file name holding ``[/]`` or ``[bold red]`` crashed `inspect`
and `scan` with a rich.errors.MarkupError traceback.

Property (Hypothesis): any printable tensor name, file name or option value round-trips unchanged into the
table or the one-line error, and nothing raises; text with control characters (an escape sequence, a
carriage return, a bidi override) arrives as visible escapes on one line.
"""

from __future__ import annotations

import io
from pathlib import Path

import pytest
import torch
from _checkpoints import llama_state
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rich.console import Console
from safetensors.torch import save_file

from geodrift.cli.main import main
from geodrift.io.literal import visible
from geodrift.render.layout import Col, Grid, print_grid

# Any text: markup-like brackets and backslashes are drawn often, control and format characters too.
TEXT = st.text(st.one_of(st.sampled_from(list("[]/\\@#=: ")), st.characters(blacklist_categories=("Cs",))),
               min_size=1, max_size=30)
MARKUP = st.sampled_from(["[/]", "[bold red]", "[/bold]", "x\\", "[link=file:///etc]", "[#ff0000]", "\\[b]", "[@click]"])
NAMES = st.one_of(TEXT, st.builds(lambda a, b: a + b, MARKUP, TEXT), MARKUP)


def _cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    out, err = capsys.readouterr()
    code = exit_info.value.code
    return int(code) if isinstance(code, int) else 0, out, err


def _model_with(folder: Path, name: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    state = {k: v.contiguous() for k, v in llama_state(2, 16, 2, 1, 32, vocab=20).items()}
    state.setdefault(name, torch.ones(2, 3))
    path = folder / "model.safetensors"
    save_file(state, str(path))
    return path


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=NAMES)
def test_any_tensor_name_round_trips_into_the_inventory_or_the_error(name: str, tmp_path_factory, capsys) -> None:
    path = _model_with(tmp_path_factory.mktemp("names"), name)
    code, out, err = _cli(["inspect", str(path), "--wide"], capsys)
    assert code in (0, 2), err
    if code == 2:  # an unrecognised name, or one that is not text (a corrupt header): one line
        assert len(err.strip().splitlines()) == 1 and err.strip().isprintable(), err
    shown = out if code == 0 else err
    assert (name if name.isprintable() else repr(name)) in shown.replace("\n", "")  # exactly as stored


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(stem=NAMES.filter(lambda s: "/" not in s and "\x00" not in s and s not in (".", "..") and len(s.encode()) < 200))
def test_any_file_name_round_trips_into_the_title_and_the_errors(stem: str, tmp_path_factory, capsys) -> None:
    folder = tmp_path_factory.mktemp("paths")
    path = _model_with(folder, "model.layers.0.self_attn.q_proj.weight")
    named = folder / f"{stem}.safetensors"
    path.rename(named)
    code, out, err = _cli(["inspect", str(named), "--wide"], capsys)
    assert code == 0, err
    assert visible(str(named)) in out.replace("\n", "")
    code, out, err = _cli(["scan", str(folder / f"{stem}.missing.gguf")], capsys)  # the error names it too
    assert code == 2 and len(err.strip().splitlines()) == 1 and visible(stem) in err, err


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=NAMES)
def test_any_option_value_round_trips_into_the_error(value: str, capsys) -> None:
    code, _, err = _cli(["scan", "--roles", value, "--layers", "0-1"], capsys)
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].isprintable(), lines
    assert visible(value.strip()) in lines[0] or "--roles" in lines[0]


@settings(max_examples=60, deadline=None)
@given(cells=st.lists(NAMES, min_size=3, max_size=3), title=NAMES)
def test_a_grid_prints_literal_cells_titles_and_headers_exactly(cells: list[str], title: str) -> None:
    from geodrift.render import lit

    out = io.StringIO()
    grid = Grid(title, [Col(cells[0], "left"), Col("b", "left")], caption=cells[1])
    grid.add(lit(cells[2]), lit(cells[1]))
    print_grid(grid, wide=True, console=Console(file=out, width=80, color_system=None))
    text = out.getvalue()
    assert "\x1b" not in text and "\r" not in text
    for cell in (cells[0], cells[2]):
        assert visible(cell).strip() in text.replace("\n", "") or not visible(cell).strip()
