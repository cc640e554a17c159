"""Geodrift deletes only what it can prove it wrote (issue 39, item 1).

- a temporary name holds the run's random token, listed in the folder's manifest before the name exists: a
  user's file named like a temporary file (``.backup.20240101.tmp``) is the user's, and ``--force`` refuses the
  folder rather than delete it;
- ``--force`` removes a folder only when the manifest lists it as one geodrift created: a folder the user made
  inside ``--out`` stays, and a ``--save`` holding one is refused (the save replaces the whole folder);
- a file named like the manifest that geodrift did not write is the user's: never appended to;
- the property: every file and folder a user had - any name, including every name geodrift itself uses - survives
  every command that takes ``--force``, run with ``--force`` (real commands, in-process, on real files).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import torch
from _checkpoints import hf_config, llama_state, write_hf_folder
from hypothesis import given, settings
from hypothesis import strategies as st

from geodrift.cli.main import main
from geodrift.io.outdir import MANIFEST, foreign_files, manage, prepare_out

SIMULATE = ["simulate", "mlp", "--preset", "smoke", "--steps", "2", "--quiet"]
VOCAB = 512
COMPRESS = ["--seq-len", "8", "--eval-windows", "1", "--calib-windows", "8", "--greedy-windows", "1", "--quiet"]
SHARE = ["--ratios", "0.3", "--methods", "svd-llm", "--select-windows", "0", "--verdict-ratio", "0",
         "--save-method", "svd-llm"]
PRUNE = ["--max-remove", "1", "--methods", "geom-v1", "--random-seeds", "2", "--null-draws", "2", "--k", "1"]
# Names geodrift writes, or wrote in earlier versions, or that look like its temporary files and bookkeeping.
GEODRIFT_NAMES = [MANIFEST, ".backup.20240101.tmp", ".report.json.abcdefgh.tmp", ".space.a1b2c3d4.tmp",
                  ".run.json.gd-0123456789abcdef.abcd_123.tmp", ".saved.gd-fedcba9876543210.k2j3h4g5.old",
                  ".saved.gd-fedcba9876543210.k2j3h4g5.tmp", "smollm2-135m_scan_k8_n100_s0.json", "report.json",
                  "run.json", "checkpoint.pt", "Res+None", "Res+ReLU", "seed42", "seed1", "smoke_continuity.png",
                  "smoke_rotation.pdf", "model.safetensors", "config.json", "figures", "runs", "plots",
                  "tokenizer.json", "g"]


def _run(argv: list[str]) -> tuple[int, str]:
    err = io.StringIO()
    code: object = 0
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            main(argv)
        except SystemExit as done:
            code = done.code
    return (0 if code is None else int(code)), err.getvalue()  # type: ignore[call-overload]


def _tiny_llama(folder: Path) -> Path:
    from _fuzz_commands import _small_tokenizer

    write_hf_folder(folder, {k: 0.3 * v for k, v in llama_state(2, 32, 4, 2, 48, vocab=VOCAB, seed=1).items()},
                    hf_config(n_layers=2, d=32, vocab=VOCAB), dtype=torch.float32)
    _small_tokenizer().save(str(folder / "tokenizer.json"))
    return folder


def test_a_users_file_named_like_a_temporary_file_is_never_deleted(tmp_path: Path) -> None:
    # The defect: `simulate mlp --out D --force` deleted D/.backup.20240101.tmp (any `.NAME.<8 chars>.tmp` counted
    # as geodrift's own temporary file).
    out = tmp_path / "D"
    assert _run([*SIMULATE, "--out", str(out)])[0] == 0
    mine = out / ".backup.20240101.tmp"
    mine.write_text("the user's backup")
    code, err = _run([*SIMULATE, "--out", str(out), "--force"])
    assert code == 2 and ".backup.20240101.tmp" in err, err
    assert mine.read_text() == "the user's backup"


def test_an_empty_folder_the_user_made_inside_out_survives_force(tmp_path: Path) -> None:
    # The defect: the same --force removed every empty folder under D, the user's too.
    out = tmp_path / "D"
    assert _run([*SIMULATE, "--out", str(out)])[0] == 0
    (out / "later").mkdir()
    (out / "Res+None" / "mine").mkdir()
    code, err = _run([*SIMULATE, "--out", str(out), "--force"])
    assert code == 0, err
    assert (out / "later").is_dir() and (out / "Res+None" / "mine").is_dir()


def test_a_folder_the_user_made_inside_a_save_is_not_deleted_with_it(tmp_path: Path) -> None:
    # The defect: `compress share --save D --force` replaced D with the new save, and the user's empty D/keep went.
    model = _tiny_llama(tmp_path / "llama")
    save = tmp_path / "saved"
    base = ["compress", "share", str(model), *COMPRESS, *SHARE, "--save", str(save)]
    assert _run(base)[0] == 0
    (save / "keep").mkdir()
    code, err = _run([*base, "--force"])
    assert code == 2 and "keep" in err and len(err.strip().splitlines()) == 1, err
    assert (save / "keep").is_dir()


def test_a_file_named_like_the_manifest_that_geodrift_did_not_write_is_the_users(tmp_path: Path) -> None:
    # The defect: a user's own `.geodrift-written` was taken for geodrift's manifest and appended to.
    out = tmp_path / "D"
    out.mkdir()
    (out / MANIFEST).write_text("my notes, not a manifest\n")
    code, err = _run([*SIMULATE, "--out", str(out), "--force"])
    assert code == 2 and MANIFEST in err, err
    assert (out / MANIFEST).read_text() == "my notes, not a manifest\n"
    report = tmp_path / "r" / "scan.json"
    report.parent.mkdir()
    (report.parent / MANIFEST).write_text("")  # empty: still not a manifest geodrift wrote
    assert _run(["scan", "--roles", "k", "--layers", "0-2", "--k", "1", "--null-draws", "2", "--view", "raw",
                 "--json-out", str(report), "--quiet"])[0] == 0
    assert (report.parent / MANIFEST).read_text() == ""


def test_a_temporary_file_of_a_run_killed_midway_is_known_by_its_token(tmp_path: Path) -> None:
    # SIGKILL while an atomic write is open: the leftover bears the run's token, which the manifest lists first.
    from geodrift.io.manifest import TOKEN

    out = manage(tmp_path / "D")
    script = ("import time, sys\nfrom geodrift.io.atomic import atomic_path\n"
              f"with atomic_path({str(out / 'r.json')!r}) as tmp:\n"
              "    tmp.write_text('half'); print('ready', flush=True); time.sleep(60)\n")
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None and child.stdout.readline().strip() == "ready"
    child.send_signal(signal.SIGKILL)
    child.wait()
    leftovers = [p for p in out.iterdir() if p.name.endswith(".tmp")]
    assert len(leftovers) == 1 and ".gd-" in leftovers[0].name and TOKEN not in leftovers[0].name
    assert foreign_files(out) == []  # geodrift's, by the token the child listed
    assert prepare_out(out, resume=False, reload=False, force=True) == leftovers
    assert not leftovers[0].exists()
    forged = out / leftovers[0].name.replace(leftovers[0].name.split(".gd-")[1][:16], "0" * 16)
    forged.write_text("mine")  # the same pattern with a token no run listed: the user's
    assert foreign_files(out) == [forged]


# The property -----------------------------------------------------------------------------------------------------

_NAME = st.one_of(
    st.sampled_from(GEODRIFT_NAMES),
    st.text(st.characters(exclude_categories=("Cs",), exclude_characters="/\x00"), min_size=1, max_size=24)
    .filter(lambda n: n not in (".", "..") and len(n.encode()) < 200))
_ENTRIES = st.lists(st.tuples(st.integers(0, 10**6), _NAME, st.booleans(), st.binary(max_size=32)),
                    min_size=1, max_size=6)


@pytest.fixture(scope="module")
def templates(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, list[str]]]:
    """Per command: a folder holding geodrift's earlier output at ``parent/D``, and the command line that writes
    there again with --force."""
    root = tmp_path_factory.mktemp("deletion")
    model = _tiny_llama(root / "llama")
    grid = root / "grid.json"
    grid.write_text(json.dumps({"sim": "mlp", "name": "g", "seeds": [1], "steps": 2, "configs": [{"base": "smoke"}]}))
    commands = {
        "simulate --out": [*SIMULATE, "--out", "{D}"],
        "simulate --plot": [*SIMULATE, "--plot", "{D}"],
        "sweep --out": ["sweep", str(grid), "--out", "{D}", "--quiet"],
        "compress prune --save": ["compress", "prune", str(model), *COMPRESS, *PRUNE, "--save", "{D}"],
        "compress share --save": ["compress", "share", str(model), *COMPRESS, *SHARE, "--save", "{D}"],
    }
    made = {}
    for name, argv in commands.items():
        parent = root / name.replace(" ", "_").replace("-", "")
        parent.mkdir()
        line = [str(parent / "D") if a == "{D}" else a for a in argv]
        code, err = _run(line)
        assert code == 0, (name, err)
        made[name] = (parent, [a.replace(str(parent / "D"), "{D}") for a in line])
    return made


def _place(parent: Path, entries: list[tuple[int, str, bool, bytes]]) -> dict[Path, bytes | None]:
    # The user's files (bytes) and folders (None), each in a folder already there: the parent, D, or below.
    placed: dict[Path, bytes | None] = {}
    for where, name, is_folder, data in entries:
        folders = sorted(p for p in [parent, *parent.rglob("*")] if p.is_dir() and not p.is_symlink())
        path = folders[where % len(folders)] / name
        if path.exists() or path.is_symlink():
            continue
        if is_folder:
            path.mkdir()
            placed[path] = None
        else:
            path.write_bytes(data)
            placed[path] = data
    return placed


# Examples per command: a case the command refuses costs milliseconds, one it runs costs a run (sweep: a process pool).
EXAMPLES = {"simulate --out": 10, "simulate --plot": 4, "sweep --out": 2, "compress prune --save": 10,
            "compress share --save": 6}


@pytest.mark.parametrize("command", list(EXAMPLES))
def test_every_file_and_folder_a_user_had_survives_every_command_with_force(
        command: str, templates: dict[str, tuple[Path, list[str]]]) -> None:
    template, argv = templates[command]

    @settings(max_examples=EXAMPLES[command])
    @given(entries=_ENTRIES)
    def check(entries: list[tuple[int, str, bool, bytes]]) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            parent = Path(tmp) / "parent"
            shutil.copytree(template, parent, symlinks=True)
            placed = _place(parent, entries)
            code, err = _run([a.replace("{D}", str(parent / "D")) for a in argv] + ["--force"])
            assert code in (0, 2), err
            for path, data in placed.items():
                if data is None:
                    assert path.is_dir() and not path.is_symlink(), (path, err)
                else:
                    assert path.is_file() and path.read_bytes() == data, (path, err)

    check()


@settings(max_examples=60)
@given(entries=_ENTRIES, force=st.booleans())
def test_the_policy_keeps_every_file_and_folder_a_user_had_any_name(entries: list[tuple[int, str, bool, bytes]],
                                                                    force: bool) -> None:
    # The same property at the policy every command calls (many more examples): --out with --force, a whole-folder
    # save with --force.
    from geodrift.errors import GeodriftError
    from geodrift.io.atomic import write_json, write_text
    from geodrift.io.outdir import replace_folder

    with tempfile.TemporaryDirectory() as tmp:
        parent = Path(tmp)
        out = manage(parent / "D")
        write_json(out / "runs" / "seed1" / "run.json", {"a": 1})
        write_text(out / "plots" / "smoke_continuity.png", "png")
        replace_folder(parent / "S", lambda d: write_text(d / "sub" / "config.json", "{}"), force=False)
        placed = _place(parent, entries)
        with contextlib.suppress(GeodriftError):
            prepare_out(out, resume=not force, reload=False, force=force)
        with contextlib.suppress(GeodriftError):
            replace_folder(parent / "S", lambda d: write_text(d / "model.safetensors", "new"), force=force)
        for path, data in placed.items():
            if data is None:
                assert path.is_dir() and not path.is_symlink(), path
            else:
                assert path.is_file() and path.read_bytes() == data, path


def test_the_token_is_listed_before_the_temporary_name_exists(tmp_path: Path) -> None:
    # A run killed between making its temporary file and listing the token would leave a file no manifest proves.
    from geodrift.io.atomic import atomic_path
    from geodrift.io.manifest import TOKEN, listing

    out = manage(tmp_path / "D")
    with atomic_path(out / "a" / "b.json") as tmp:
        assert TOKEN in listing(out).tokens and ".gd-" + TOKEN in tmp.name
        assert "a" in listing(out).folders  # the folder it made, listed too
        time.sleep(0)
    assert os.listdir(out / "a") == ["b.json"]
