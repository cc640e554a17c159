"""The sweep runner: grid files, the local process pool and Ray give the same runs bitwise, failures
are reported without stopping the sweep, resume skips finished runs, the CLI refuses bad options."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from geodrift.continuity.schedule import single_threaded_blas
from geodrift.errors import GeodriftError
from geodrift.sim.config import RunSpec
from geodrift.sim.experiment import Experiment
from geodrift.sim.run import run
from geodrift.sweep.execute import Outcome
from geodrift.sweep.grid import grid_from_dict, load_grid, preset_grid
from geodrift.sweep.runner import run_sweep, sweep_reproduction

# Two smoke configurations (D 32, L 4, 30 steps), one seed, and one run that must fail (no such data).
GRID = {"sim": "mlp", "name": "t", "seeds": [42],
        "configs": [{"base": "smoke"}, {"base": "smoke", "label": "lin", "model": {"activation": "none"}}]}


def _bad_job_grid():
    grid = grid_from_dict(GRID)
    bad = RunSpec.from_dict({**grid.specs[0].to_dict(), "label": "bad", "data": {"name": "no-such-set.npz"}})
    return type(grid)(grid.sim, grid.name, [*grid.specs, bad], grid.seeds)


def _by_key(outcomes: list[Outcome]) -> dict[str, Outcome]:
    return {o.job.key: o for o in outcomes}


@pytest.fixture(scope="module")
def local_sweep(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[Outcome], Path]:
    out = tmp_path_factory.mktemp("local")
    events = []
    outcomes = run_sweep(_bad_job_grid().jobs, backend="local", workers=2, out=str(out), on_status=events.append)
    assert events[-1].done == 2 and events[-1].failed == 1 and events[-1].total == 3
    return outcomes, out


def test_a_failed_run_is_reported_with_its_error_and_the_others_finish(local_sweep):
    outcomes, _ = local_sweep
    by = _by_key(outcomes)
    assert by["bad/seed42"].result is None and "no-such-set.npz" in (by["bad/seed42"].error or "")
    assert by["Res+ReLU/seed42"].error is None and by["lin/seed42"].error is None
    rep = sweep_reproduction(_bad_job_grid(), outcomes)
    assert any("1 failed run" in note and "bad/seed42" in note for note in rep.notes)


def test_the_local_pool_gives_exactly_the_in_process_run(local_sweep):
    outcomes, _ = local_sweep
    spec = grid_from_dict(GRID).specs[0]
    with single_threaded_blas():  # the pool's runs use threads=1; a float reduction's order depends on it
        inline = run(spec, [42], preset="t")[0]
    pooled = _by_key(outcomes)["Res+ReLU/seed42"].result
    assert pooled is not None
    assert pooled.record.rows == inline.record.rows and pooled.record.summary == inline.record.summary
    assert pooled.report.to_dict() == inline.report.to_dict()


def test_ray_gives_the_same_runs_and_table_as_the_local_pool(local_sweep, tmp_path):
    ray = pytest.importorskip("ray")
    outcomes, _ = local_sweep
    grid = grid_from_dict(GRID)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        on_ray = run_sweep(grid.jobs, backend="ray", workers=2, out=str(tmp_path))
    finally:
        ray.shutdown()
    local = _by_key(outcomes)
    for o in on_ray:
        assert o.error is None, o.error
        twin = local[o.job.key].result
        assert twin is not None and o.result is not None
        assert o.result.record.rows == twin.record.rows  # bitwise: every tracked value of every step
        assert o.result.report.to_dict() == twin.report.to_dict()
        disk = json.loads((tmp_path / o.job.key / "run.json").read_text())
        assert disk["summary"] == json.loads((local_sweep[1] / o.job.key / "run.json").read_text())["summary"]
    a = sweep_reproduction(grid, on_ray)
    b = sweep_reproduction(grid, [local[j.key] for j in grid.jobs])
    table = [json.dumps({k: {c: vars(s) for c, s in v.items()} for k, v in r.stats.items()}) for r in (a, b)]
    assert table[0] == table[1]  # NaN (one seed's std) compares equal as text
    assert [vars(v) for v in a.verdicts] == [vars(v) for v in b.verdicts]


def test_resume_reuses_finished_runs_without_training_them_again(local_sweep):
    outcomes, out = local_sweep
    record = out / "lin" / "seed42" / "run.json"
    before = record.stat().st_mtime_ns
    again = run_sweep(grid_from_dict(GRID).jobs, backend="local", workers=1, out=str(out))
    assert record.stat().st_mtime_ns == before  # not rewritten: reloaded
    assert _by_key(again)["lin/seed42"].result.record.summary == _by_key(outcomes)["lin/seed42"].result.record.summary


def test_a_grid_file_is_the_product_of_configs_data_steps_and_seeds(tmp_path):
    path = tmp_path / "g.toml"
    path.write_text('sim = "mlp"\nname = "g"\nseeds = [1, 2]\ndata = ["mnist5k", "digits"]\nsteps = [10, 20]\n'
                    '[[configs]]\nbase = "smoke"\n[[configs]]\nbase = "smoke"\nlabel = "x"\nablations = ["nores"]\n')
    grid = load_grid(path)
    assert len(grid.jobs) == 2 * 2 * 2 * 2
    assert grid.specs[0].label == "Res+ReLU [mnist5k] 10 steps" and grid.specs[0].train.steps == 10
    assert grid.specs[-1].label == "x [digits] 20 steps" and grid.specs[-1].model.residual is False
    assert preset_grid(Experiment.of("mlp", "appf")).jobs[0].key == "Res+ReLU_mnist5k/seed42"


@pytest.mark.parametrize("payload, message", [
    ({"sim": "mlp", "configs": [{"model": {"width": 3}}]}, "unknown field(s) width"),
    ({"sim": "mlp", "colour": 1}, "unknown key(s) colour"),
    ({"sim": "mlp"}, "no configuration"),
    ({"sim": "mlp", "seeds": ["a"], "preset": "smoke"}, "seeds: expected an integer"),
    ({"sim": "cnn", "preset": "smoke"}, "use mlp or transformer"),
])
def test_bad_grids_are_one_line_errors_naming_the_key(payload, message):
    with pytest.raises(GeodriftError, match=message.replace("(", r"\(").replace(")", r"\)")):
        grid_from_dict(payload)


def test_the_cli_refuses_bad_sweep_options_before_any_work(tmp_path, capsys):
    from geodrift.cli.main import main

    grid = tmp_path / "g.json"
    grid.write_text(json.dumps(GRID))
    for args, message in ((["sweep", str(grid), "--workers", "0"], "--workers"),
                          (["sweep", str(grid), "--backend", "spark"], "--backend"),
                          (["sweep", str(tmp_path / "none.toml")], "cannot read the grid file"),
                          (["simulate", "mlp", "--preset", "smoke", "--workers", "2", "--batch-seeds"], "--batch-seeds")):
        with pytest.raises(SystemExit) as exit_info:
            main(args)
        assert exit_info.value.code == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and message in err, err


def test_a_killed_worker_fails_only_its_run_and_the_pool_restarts_for_the_others(tmp_path):
    """SIGKILL one of two busy workers (as the out-of-memory killer does): the run it was running is failed with
    one line, the other runs (the one beside it and the queued one) are run again on a fresh pool and finish."""
    import multiprocessing
    import os
    import signal
    import threading
    import time

    grid = grid_from_dict({**GRID, "configs": [
        {"base": "smoke", "label": f"c{n}", "train": {"steps": 1000, "epoch_steps": 250}} for n in range(3)]})
    killed: list[int] = []

    def kill_one_when_two_run() -> None:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and not killed:
            if len(list(tmp_path.rglob("checkpoint.pt"))) >= 2:
                workers = [p for p in multiprocessing.active_children() if p.pid is not None]
                os.kill(workers[0].pid, signal.SIGKILL)
                killed.append(workers[0].pid)
            time.sleep(0.05)

    killer = threading.Thread(target=kill_one_when_two_run, daemon=True)
    killer.start()
    outcomes = run_sweep(grid.jobs, backend="local", workers=2, out=str(tmp_path), checkpoint_every=10)
    killer.join()
    assert killed, "two runs were never in flight at once"
    failed = [o for o in outcomes if o.error is not None]
    assert len(failed) == 1, [o.error for o in outcomes]
    assert "worker process died" in failed[0].error and "SIGKILL" in failed[0].error
    assert "\n" not in failed[0].error
    assert all(o.result is not None for o in outcomes if o is not failed[0])
