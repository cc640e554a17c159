"""Long jobs report rate and ETA (live on a terminal, plain lines in a pipe), training shows step, loss and
the latest continuity with its null, start-up work says what it is doing, and --quiet silences all of it."""

from __future__ import annotations

import io
import re

import pytest
from rich.console import Console
from sim_helpers import smoke_spec

from geodrift.render.progress import JobProgress, announce, clock, rate_text
from geodrift.sim.run import StepStatus, run


def _console(terminal: bool) -> tuple[Console, io.StringIO]:
    buffer = io.StringIO()
    return Console(file=buffer, force_terminal=terminal, width=120), buffer


def test_in_a_pipe_each_line_has_progress_rate_eta_and_status():
    console, out = _console(terminal=False)
    with JobProgress("training", 10, "steps", every=0.0, console=console) as bar:
        for step in range(1, 11):
            bar.status(f"step {step} · loss 0.5")
            bar.update(completed=step, description="Res+ReLU seed 42")
    lines = out.getvalue().splitlines()
    assert re.fullmatch(r"training Res\+ReLU seed 42: 10/10 \(100%\) · [\d.]+ (steps/s|s/step) · elapsed "
                        r"\d:\d\d:\d\d · ETA \d:\d\d:\d\d · step 10 · loss 0.5", lines[-2]), lines[-2]
    assert lines[-1].startswith("training done: 10/10 steps in ")


def test_a_quick_job_in_a_pipe_prints_nothing():
    console, out = _console(terminal=False)
    with JobProgress("scanning", 3, "matrices", console=console) as bar:
        bar.update(advance=3)
    assert out.getvalue() == ""


def test_on_a_terminal_the_bar_shows_rate_eta_and_the_status_line():
    console, out = _console(terminal=True)
    with JobProgress("training", 100, "steps", console=console) as bar:
        bar.status("step 7 · loss 0.25 · W v1 0.812 (null 0.061) at step 5")
        for step in range(1, 8):
            bar.update(completed=step, description="Res+ReLU seed 42")
        bar._bar.refresh()  # type: ignore[union-attr]
    text = out.getvalue()
    assert "7/100" in text and "ETA" in text and re.search(r"(steps/s|s/step)", text)
    assert "W v1 0.812 (null 0.061)" in text


def test_quiet_prints_nothing_anywhere():
    console, out = _console(terminal=True)
    with JobProgress("training", 10, "steps", quiet=True, every=0.0, console=console) as bar:
        bar.note("training a BPE tokenizer")
        bar.update(completed=10)
    announce("loading", quiet=True, console=console)
    assert out.getvalue() == ""


def test_clock_and_rate_text_read_naturally():
    assert clock(59.6) == "0:01:00" and clock(None) == "-:--:--"
    assert rate_text(12.34, "steps") == "12.3 steps/s" and rate_text(0.5, "claims") == "2.0 s/claim"
    assert rate_text(None, "steps") == "– steps/s"


def test_training_reports_step_loss_and_the_latest_continuity_with_its_null_and_announces_data_loading():
    statuses: list[StepStatus] = []
    stages: list[str] = []
    from geodrift.sim import simulator as simulator_module

    simulator_module._IMAGES.clear()  # so the data set is loaded (and announced) here
    run(smoke_spec(0), [42], device="cpu", stop_at=12, on_step=statuses.append, on_stage=stages.append)
    assert stages == ["loading the mnist5k data set"]
    assert [s.done for s in statuses] == list(range(1, 13)) and all(s.steps == 30 for s in statuses)
    assert all(s.label == "Res+ReLU" and s.seeds == (42,) for s in statuses)
    assert all(float(s.loss) > 0 for s in statuses)
    latest = statuses[-1].latest
    assert latest is not None and latest.label == "W v1" and latest.step == 10  # tracked every 10 steps
    assert 0 < latest.null_mean < 1 and 0 <= latest.value <= 1


@pytest.mark.parametrize("tokenizer", ["bpe"])
def test_tokenizer_training_is_announced(tokenizer: str):
    from geodrift.sim.config import TextData
    from geodrift.sim.simulator import _TEXTS, prepare_text

    data = TextData(max_chars=20_000, tokenizer=tokenizer, vocab=300)
    _TEXTS.pop(data, None)
    stages: list[str] = []
    prepare_text(data, stages.append)
    assert any("training a 300-id BPE tokenizer" in s for s in stages)
    stages.clear()
    prepare_text(data, stages.append)  # cached: nothing to announce
    assert stages == []


def test_the_training_reporter_counts_steps_across_runs_and_shows_loss_and_continuity():
    import torch

    from geodrift.render.progress import training_reporter
    from geodrift.sim.track import Latest

    console, out = _console(terminal=False)
    latest = Latest("W v1", 0.8123, 0.0612, 10)
    with JobProgress("training", 8, "steps", every=0.0, console=console) as bar:
        report = training_reporter(bar)
        for label in ("Res+ReLU", "Res+None"):
            for done in range(1, 5):
                report(StepStatus(label, (42,), done, 4, torch.tensor(0.25), latest if done > 2 else None))
        assert bar.completed == 8 and bar.description == "Res+None seed 42"
    lines = out.getvalue().splitlines()
    assert lines[-2].endswith("step 4/4 · loss 0.2500 · W v1 0.812 (null 0.061) at step 10"), lines[-2]
    assert "8/8 (100%)" in lines[-2]


@pytest.mark.parametrize(("total", "updates"), [(1, [0]), (0, [3, 7]), (5, [2])])
def test_a_finished_job_ends_at_n_of_n(total: int, updates: list[int]):
    # a job counted coarsely (compress share: one stage of "1 step" never advanced), a total never set, a
    # job whose last update came before its last unit: the last line says done n/n, never 0/1 or 7/0
    console, out = _console(terminal=False)
    with JobProgress("job", total, "steps", every=0.0, console=console) as bar:
        for done in updates:
            bar.update(completed=done)
    last = out.getvalue().splitlines()[-1]
    n = max(total, max(updates)) if total > 0 else max(updates)
    assert last.startswith(f"job done: {n}/{n} steps in "), last


def test_a_failed_job_leaves_its_count_as_it_was():
    console, out = _console(terminal=False)
    with pytest.raises(RuntimeError), JobProgress("job", 4, "steps", every=0.0, console=console) as bar:
        bar.update(completed=1)
        raise RuntimeError
    assert "1/4" in out.getvalue() and "done" not in out.getvalue()


def test_a_job_without_a_total_counts_units_with_no_slash_zero_and_no_eta():
    # drift and compare learn their total only as they read: a spinner with the count, never "85/0 · ETA -1:59:15"
    console, out = _console(terminal=False)
    with JobProgress("reading 2 models", 0, "matrices", every=0.0, console=console) as bar:
        for i in range(5):
            bar.advance(f"attn_q[{i}]")
    lines = out.getvalue().splitlines()
    assert re.fullmatch(r"reading 2 models attn_q\[4\]: 5 matrices · .* · elapsed \d:\d\d:\d\d", lines[-2]), lines
    assert "/0" not in out.getvalue() and "ETA" not in out.getvalue()
    console, out = _console(terminal=True)
    with JobProgress("reading 2 models", 0, "matrices", console=console) as bar:
        for i in range(5):
            bar.advance(f"attn_q[{i}]")
        bar._bar.refresh()  # type: ignore[union-attr]
    assert "5 matrices" in out.getvalue() and "/0" not in out.getvalue() and "ETA" not in out.getvalue()


def test_the_eta_waits_until_it_is_stable():
    # not after the first unit (it carries the start-up): after 3 more and 5 % of the total
    console, _ = _console(terminal=False)
    with JobProgress("scanning", 100, "matrices", console=console, quiet=True) as bar:
        etas = []
        for done in range(1, 8):
            bar.update(completed=done)
            etas.append(bar.eta())
    assert etas[:4] == [None] * 4  # units 1..4: 3 after the first, but under 5 of 100
    assert all(eta is not None and eta >= 0 for eta in etas[4:])


def test_units_are_spelled_right():
    assert rate_text(0.125, "matrices") == "8.0 s/matrix" and rate_text(0.5, "runs") == "2.0 s/run"


def test_the_python_face_is_silent_by_default_and_draws_a_bar_with_progress_true(capsys):
    import geodrift

    geodrift.scan(layers="0-2", roles="k", k=1, null_draws=4, ov=False)
    assert capsys.readouterr().err == ""
    geodrift.scan(layers="0-2", roles="k", k=1, null_draws=4, ov=False, progress=True)
    err = capsys.readouterr().err
    assert "scanning" in err and "3/3" in err and "matrix" in err  # tqdm's bar (installed with gguf) or geodrift's
    seen: list[str] = []
    geodrift.scan(layers="0-2", roles="k", k=1, null_draws=4, ov=False, progress=seen.append)
    assert seen == ["attn_k[0]", "attn_k[1]", "attn_k[2]"]
