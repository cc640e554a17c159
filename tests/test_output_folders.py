"""The output-folder policy at every command that writes a folder, writes that fail, and a save cut short.

- a folder holding files geodrift did not write is refused - `--force` or not - and nothing in it changes;
- the input model's folder, or a folder holding the model, is refused even with `--force`;
- a disk that fills up, a file-size limit: one `error:` line naming the user's path, no traceback, no `.tmp`;
- SIGINT/SIGTERM during `compress prune --save` leave the old folder as it was.

Real commands on real files (a random Llama written as a Hugging Face folder, the simulators' smoke
presets); write failures are real (a full tmpfs, RLIMIT_FSIZE in a subprocess), signals are real.
"""

from __future__ import annotations

import hashlib
import os
import resource
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from _checkpoints import hf_config, llama_state, write_hf_folder
from test_compress import VOCAB, tiny_llama_folder

from geodrift.cli.main import main
from geodrift.io.atomic import write_text
from geodrift.io.outdir import MANIFEST, replace_folder

FAST = ["--seq-len", "16", "--eval-windows", "2", "--quiet"]
PRUNE = ["--max-remove", "1", "--methods", "geom-v1", "--random-seeds", "2", "--null-draws", "4", "--k", "2",
         "--calib-windows", "2"]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_llama_folder(tmp_path_factory.mktemp("folders") / "llama", n_layers=3)


def _refused(args: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    assert exit_info.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    return lines[0]


def _snapshot(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("command", ["prune", "share"])
def test_compress_save_never_writes_into_the_input_or_a_folder_holding_it(
        command: str, tiny: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = _snapshot(tiny.parent)
    for target in (tiny, tiny.parent):
        line = _refused(["compress", command, str(tiny), *FAST, "--save", str(target), "--force"], capsys)
        assert "--save" in line and "never writes into what it reads" in line
    assert _snapshot(tiny.parent) == before


def test_compress_save_refuses_a_users_folder_and_replaces_only_its_own(
        tiny: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    theirs = tmp_path / "theirs"  # the case: a folder that already holds a model of the user's
    shutil.copytree(tiny, theirs)
    for force in ([], ["--force"]):
        line = _refused(["compress", "prune", str(tiny), *PRUNE, *FAST, "--save", str(theirs), *force], capsys)
        assert "which geodrift did not write" in line
    assert _snapshot(theirs) == _snapshot(tiny)
    ours = tmp_path / "ours"  # geodrift's earlier output: replaced only with --force
    replace_folder(ours, lambda d: write_text(d / "config.json", "{}"), force=False)
    line = _refused(["compress", "share", str(tiny), *FAST, "--save", str(ours)], capsys)
    assert "--force" in line and (ours / "config.json").read_text() == "{}"


def test_reproduce_refuses_an_out_holding_the_users_report_and_figures(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "mine"
    (out / "figures").mkdir(parents=True)
    (out / "report.json").write_text('{"mine": true}')
    (out / "figures" / "fig1.png").write_bytes(b"\x89PNG user's")
    before = _snapshot(out)
    for extra in ([], ["--force"], ["--resume"]):
        line = _refused(["reproduce", "--smoke", "--out", str(out), "--quiet", *extra], capsys)
        assert "--out" in line and "did not write" in line
    assert _snapshot(out) == before and not (out / MANIFEST).exists()


def test_simulate_force_keeps_the_users_figures_beside_the_new_ones(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    figs = tmp_path / "figs"
    figs.mkdir()
    (figs / "my_continuity.png").write_bytes(b"user's png")
    (figs / "paper_rotation.pdf").write_bytes(b"user's pdf")
    before = _snapshot(figs)
    line = _refused(["simulate", "mlp", "--preset", "smoke", "--steps", "2", "--out", str(tmp_path / "runs"),
                     "--plot", str(figs), "--force", "--quiet"], capsys)
    assert "my_continuity.png" in line and "--plot" in line
    assert _snapshot(figs) == before


def test_sweep_refuses_an_out_holding_foreign_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    grid = tmp_path / "g.toml"
    grid.write_text('sim = "mlp"\nseeds = [1]\nsteps = 2\n[[configs]]\nbase = "smoke"\n')
    out = tmp_path / "runs"
    out.mkdir()
    (out / "notes.md").write_text("mine")
    line = _refused(["sweep", str(grid), "--out", str(out), "--force", "--quiet"], capsys)
    assert "notes.md" in line and (out / "notes.md").read_text() == "mine"


def _run(args: list[str], cwd: Path, fsize: int | None = None, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    def limit() -> None:  # a real write limit: writes past `fsize` bytes fail with EFBIG
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        if fsize is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))

    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "geodrift", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, preexec_fn=limit, env=env)


def _one_line_error(result: subprocess.CompletedProcess[str], *needles: str) -> str:
    assert result.returncode == 2, (result.returncode, result.stderr[-2000:])
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in result.stderr, lines
    assert all(n in lines[0] for n in needles) and ".tmp" not in lines[0], lines[0]
    return lines[0]


def test_a_figure_past_the_file_size_limit_is_one_line(tmp_path: Path) -> None:
    # matplotlib's savefig fails with EFBIG: one line naming the user's path, no temporary file left.
    line = _one_line_error(_run(["simulate", "mlp", "--preset", "smoke", "--steps", "2", "--track-every", "1",
                                 "--plot", "figs", "--quiet"], tmp_path, fsize=2048), "figs", "File too large")
    assert "cannot write here" in line
    assert not [p for p in tmp_path.rglob("*") if p.name.endswith(".tmp")]


def _old_save(folder: Path) -> dict[str, str]:
    # A folder an earlier --save wrote (geodrift's files, listed in its manifest).
    replace_folder(folder, lambda d: (write_text(d / "config.json", '{"old": 1}'),
                                      write_text(d / "model.safetensors", "old weights")), force=False)
    return _snapshot(folder)


def test_compress_save_past_the_file_size_limit_keeps_the_old_folder(tiny: Path, tmp_path: Path) -> None:
    # safetensors' writer fails with EFBIG inside the temporary sibling: the old folder stays, the line names --save.
    saved = tmp_path / "pruned"
    before = _old_save(saved)
    _one_line_error(_run(["compress", "prune", str(tiny), *PRUNE, *FAST, "--save", str(saved), "--force"], tmp_path,
                         fsize=1 << 20), "--save", str(saved), "File too large")
    assert _snapshot(saved) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pruned"]


@pytest.fixture()
def full_disk(tmp_path: Path):  # type: ignore[no-untyped-def]
    mount = tmp_path / "tiny-disk"
    mount.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mount)], capture_output=True)
    if made.returncode != 0:
        pytest.skip("cannot mount a tmpfs here (needs root)")
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], capture_output=True)


def test_a_full_disk_is_one_line_naming_the_users_path(full_disk: Path) -> None:
    # ENOSPC for real (a 256 KiB tmpfs) on simulate's checkpoints, written by torch.save.
    _one_line_error(_run(["simulate", "mlp", "--preset", "smoke", "--steps", "3", "--checkpoint-every", "1",
                          "--out", str(full_disk / "runs"), "--quiet"], full_disk.parent), "No space left on device")
    assert not [p for p in full_disk.rglob("*") if p.name.endswith(".tmp")]


@pytest.fixture(scope="module")
def wide(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # A Llama whose embedding (49,152 x 256 floats, 50 MB) takes long enough to write to be interrupted.
    from geodrift.pretrained import smollm2_tokenizer

    folder = tmp_path_factory.mktemp("wide") / "llama"
    write_hf_folder(folder, llama_state(2, 256, 4, 2, 64, vocab=VOCAB, seed=3),
                    hf_config(n_layers=2, d=256, n_heads=4, n_kv=2, d_ff=64, vocab=VOCAB))
    backend = smollm2_tokenizer().backend
    assert backend is not None
    backend.save(str(folder / "tokenizer.json"))
    return folder


@pytest.mark.parametrize(("signum", "code"), [pytest.param(signal.SIGINT, 130, marks=pytest.mark.slow),
                                              (signal.SIGTERM, 143)])
def test_a_signal_during_compress_save_leaves_the_old_folder_intact(wide: Path, tmp_path: Path, signum: int,
                                                                   code: int) -> None:
    saved = tmp_path / "pruned"
    args = ["compress", "prune", str(wide), *PRUNE, *FAST, "--save", str(saved)]
    before = _old_save(saved)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    process = subprocess.Popen([sys.executable, "-m", "geodrift", *args, "--force"], cwd=tmp_path,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and process.poll() is None:
        if any(p.name.startswith(".pruned.") for p in tmp_path.iterdir()):  # the new folder is being written
            process.send_signal(signum)
            break
        time.sleep(0.002)
    _, err = process.communicate(timeout=120)
    if process.returncode == 0:
        pytest.skip("the save finished before the signal arrived")
    assert process.returncode == code, err
    assert err.strip().splitlines()[-1].startswith("interrupted") and "Traceback" not in err, err
    assert _snapshot(saved) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pruned"]
