"""Fuzzing the commands (issues 23, 33): hostile command lines for scan, inspect, drift, compare,
compress prune|share and sweep, run in-process through the real CLI entry (``geodrift.cli.main.main``),
and hostile Python calls (``geodrift.scan`` with odd objects for every keyword, ``report.plot``,
``load_factored``: tests/_fuzz_python.py).

Shared by the bounded default test (tests/test_fuzz_commands.py) and the long run
(benchmarks/fuzz_commands.py). Every case is one command line drawn from:

- models: a real random Llama (Hugging Face folder with a small byte-level BPE tokenizer.json), its
  safetensors file,
  mutated safetensors/GGUF files from the readers' fuzz (tests/_fuzz.py), a FIFO, a folder, a
  missing path, a copy whose file name holds rich markup and control characters;
- option values: valid ones, and hostile ones (0, -1, 2**64, 1e12, floats where integers go, markup,
  control characters, empty strings), for every option of the command;
- files given to options: ``--names`` mappings with catastrophic or invalid regexes, ``--corpus``
  texts that are empty, binary, FIFOs or folders, grid files mutated key by key (types, ranges,
  nesting, bytes, sizes);
- output targets: new paths, the input model's folder, its parent, a folder of the user's files,
  a folder of figures with the user's own ``*_continuity.png``, a folder geodrift wrote before, and
  the names a scan derives (``fig_trajectory.png``, ``fig_experts.png``, ``s.pairs.csv``) taken by the
  user's own files beside ``--plot fig.png`` / ``--csv s.csv``.

Accepted outcomes: exit 0, or exit 2 with exactly one ``error:`` line on stderr and no traceback.
Findings: any other exit, an exception escaping ``main``, a multi-line error, a scan whose report
holds non-finite numbers (``nonfinite-success``: a corrupt tensor must be refused by name), a user file whose
bytes changed (every file of the user's area is hashed before and after each case), and (in the
runners) a case without an outcome within its timeout.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import random
import shutil
import signal
import traceback
from collections import Counter
from pathlib import Path
from typing import Any

import torch
from _checkpoints import hf_config, llama_state, write_hf_folder
from _fuzz import Outcomes, mutants, seed_files
from _fuzz_classes import (
    build_more,
    collision_argv,
    degenerate_argv,
    force_argv,
    guarded,
    read_back,
    toml_text,
    traceback_outcome,
)
from _fuzz_python import PythonCase, make_python_case, run_python_case

from geodrift.cli.main import main

HOSTILE_INTS = ["0", "-1", str(2**64), "1000000000000", "1.5", "abc", "", "[/]", "1e3", " 3", "\x1b[2J"]
HOSTILE_TEXT = ["[/]", "[bold red]x", "x\\", "\x1b[31mred", "a\rb", "\u202eevil", "", ",", ",,", "attn_q,[/]",
                "é中", "x" * 3000, "--quiet"]
VOCAB = 512  # the fuzz model's ids (its tokenizer has 300)
REGEXES = ["(a+)+$", "(x+x+)+y", r"(a)\1", "(?=a)", "[", "x" * 1500, "(?:a{999}){999}", r"model\.layers\.(\w+)\.",
           r"model\.layers\.(\d+)\.self_attn\.q_proj\.weight", ".*", ""]


def build_area(root: Path) -> dict[str, Path]:
    """The user's area: inputs, the user's own files, and folders geodrift may or may not write into."""
    from geodrift.io.outdir import replace_folder

    root.mkdir(parents=True, exist_ok=True)
    model = write_hf_folder(root / "models" / "llama", {k: 0.3 * v for k, v in llama_state(
        2, 32, 4, 2, 48, vocab=VOCAB, seed=1).items()}, hf_config(n_layers=2, d=32, vocab=VOCAB), dtype=torch.float32)
    _small_tokenizer().save(str(model / "tokenizer.json"))
    other = write_hf_folder(root / "models" / "narrow", llama_state(2, 16, 2, 1, 32, vocab=20, seed=2),
                            hf_config(n_layers=2, d=16, n_heads=2, n_kv=1, d_ff=32, vocab=20), dtype=torch.float32)
    mine = root / "mine"
    (mine / "figures").mkdir(parents=True)
    (mine / "notes.txt").write_text("the user's notes")
    (mine / "report.json").write_text('{"user": true}')
    (mine / "config.json").write_text('{"model_type": "llama"}')
    (mine / "model.safetensors").write_bytes((model / "model.safetensors").read_bytes()[:4096])
    (mine / "figures" / "my_continuity.png").write_bytes(b"\x89PNG the user's figure")
    (mine / "figures" / "paper_rotation.pdf").write_bytes(b"%PDF the user's")
    for derived in ("fig_trajectory.png", "fig_experts.png", "fig_trajectory.svg", "s.pairs.csv"):
        (mine / derived).write_bytes(b"the user's own " + derived.encode())  # names a scan derives from fig/s
    weird = root / "[bold red]x\\ \x1b[31m é.safetensors"
    shutil.copy(model / "model.safetensors", weird)
    (root / "corpus.txt").write_text("\n\n".join(f"paragraph {i} " + "word " * 200 for i in range(60)))
    (root / "empty.txt").write_text("")
    (root / "binary.txt").write_bytes(bytes(range(256)) * 64)
    os.mkfifo(root / "fifo")
    replace_folder(root / "ours", lambda d: (d / "config.json").write_text("{}"), force=False)
    files = seed_files(root / "seeds")
    area = {"model": model, "narrow": other, "mine": mine, "weird": weird, "root": root, "seeds": files[0].parent,
            "ours": root / "ours"}
    return {**area, **build_more(root, model)}  # issue 39's classes: degenerate, non-finite, look-alike names


def _small_tokenizer() -> Any:
    # A byte-level BPE of 300 ids (trained here in ~0.1 s) keeps each compress case cheap: the model's
    # vocabulary, the logits and the tokenizer's id table are 160x smaller than SmolLM2's.
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(["def main():\n    return 0\n\n" + "The quick brown fox. " * 50], trainer)
    return tok


def snapshot(root: Path) -> dict[str, str]:
    """sha256 of every regular file under ``root``, and ``"folder"`` for every folder (FIFOs skipped)."""
    out = {}
    for path in sorted(root.rglob("*")):
        if path.is_file() and not path.is_symlink():
            out[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
        elif path.is_dir() and not path.is_symlink():
            out[str(path)] = "folder"
    return out


class Case:
    """One command line (or one Python call) and the files it was given; ``out`` is where new outputs may appear."""

    def __init__(self, argv: list[str], how: str, out: Path, python: PythonCase | None = None,
                 must_fail: bool = False, undefined_ok: bool = False) -> None:
        self.argv, self.how, self.out, self.python, self.must_fail = argv, how, out, python, must_fail
        self.undefined_ok = undefined_ok  # degenerate finite weights: null (undefined) numbers are the answer


def make_case(area: dict[str, Path], rng: random.Random, index: int, scratch: Path) -> Case:
    """A hostile command line for one of the commands (deterministic in ``rng``)."""
    out = scratch / f"out{index}"
    command = rng.choices(["inspect", "drift", "compare", "prune", "share", "sweep", "scan", "python", "degenerate",
                           "collide", "force"], [5, 3, 3, 2, 2, 5, 5, 8, 5, 2, 1])[0]
    model = _model(area, rng, scratch, index)
    if command == "python":
        return Case([], command, out, make_python_case(area, rng, out, model))
    if command == "degenerate":
        argv, undefined_ok = degenerate_argv(area, rng, out)
        return Case(argv, command, out, undefined_ok=undefined_ok)
    if command in ("collide", "force"):
        return Case((collision_argv if command == "collide" else force_argv)(area, rng, out), command, out,
                    must_fail=command == "collide")
    pick = {"inspect": _inspect, "drift": _series, "compare": _series, "prune": _compress, "share": _compress,
            "sweep": _sweep, "scan": _scan}[command]
    argv = pick(command, area, rng, model, out, scratch, index)
    if rng.random() < 0.7:
        argv.append("--quiet")
    return Case(argv, command, out)


def _model(area: dict[str, Path], rng: random.Random, scratch: Path, index: int) -> str:
    roll = rng.random()
    if roll < 0.45:
        return str(area["model"])
    if roll < 0.55:
        return str(area["model"] / "model.safetensors")
    if roll < 0.75:
        how, path = mutants([*sorted(area["seeds"].glob("seed_*"))], 1, rng.randrange(2**32), scratch / f"m{index}")[0]
        return str(path)
    return str(rng.choice([area["weird"], area["root"] / "fifo", area["root"] / "nope.gguf", area["mine"],
                           area["narrow"], area["root"] / "corpus.txt"]))


def _value(rng: random.Random, valid: list[str], hostile: list[str] | None = None, p_valid: float = 0.6) -> str:
    return rng.choice(valid) if rng.random() < p_valid else rng.choice(hostile or HOSTILE_INTS)


def _names_file(area: dict[str, Path], rng: random.Random, scratch: Path, index: int) -> str:
    roll = rng.random()
    if roll < 0.15:
        return str(rng.choice([area["root"] / "fifo", area["mine"], area["root"] / "binary.txt"]))
    mapping: Any = {rng.choice(REGEXES): rng.choice(["attn_q", "ignore", "mlp_up", "banana", 3])
                    for _ in range(rng.randint(1, 3))}
    if roll < 0.25:
        mapping = rng.choice([[], "x", None, {"a": {"kind": None}}])
    path = scratch / f"names{index}.json"
    path.write_text(json.dumps(mapping))
    return str(path)


def _outputs(area: dict[str, Path], rng: random.Random, out: Path, options: list[str]) -> list[str]:
    argv: list[str] = []
    for option in options:
        if rng.random() < 0.3:
            target = rng.choice([out / f"r{option[2:]}", area["mine"] / "report.json", area["mine"],
                                 area["root"] / "corpus.txt" / "x", out / "[/]x\\.png", out / "f.gif",
                                 area["mine"] / "figures" / "my_continuity.png"])
            suffix = {"--json-out": ".json", "--csv": ".csv", "--plot": ".png"}.get(option, "")
            argv += [option, str(target) + (suffix if target.suffix == "" and rng.random() < 0.5 else "")]
    return argv


def _scan(command: str, area: dict[str, Path], rng: random.Random, model: str, out: Path, scratch: Path,
          index: int) -> list[str]:
    # The scan's named and derived outputs (NAME_trajectory, NAME_experts, NAME.pairs.csv) beside the user's files.
    argv = ["scan", model, "--null-draws", _value(rng, ["4", "6"]), "--k", _value(rng, ["1", "2"])]
    for option, valid in (("--layers", ["0-1", "0", "1"]), ("--roles", ["q,k", "v,o", "gate"]),
                          ("--view", ["raw", "folded"]), ("--seed", ["0", "7"]), ("--max-memory", ["8G", "1K"])):
        if rng.random() < 0.3:
            argv += [option, _value(rng, valid, HOSTILE_INTS + HOSTILE_TEXT)]
    for option, targets in (("--plot", [out / "fig.png", area["mine"] / "fig.png", area["mine"] / "fig.svg"]),
                            ("--csv", [out / "s.csv", area["mine"] / "s.csv"]),
                            ("--json-out", [out / "r.json", area["mine"] / "r.json"])):
        if rng.random() < 0.4:
            argv += [option, str(rng.choice(targets))]
    if rng.random() < 0.2:
        argv.append("--skip-nonfinite")
    return argv + _outputs(area, rng, out, ["--plot"]) + rng.choice([["--json"], ["--json"], [], ["--no-ov"]])


def _inspect(command: str, area: dict[str, Path], rng: random.Random, model: str, out: Path, scratch: Path,
             index: int) -> list[str]:
    argv = ["inspect", model]
    if rng.random() < 0.3:
        argv += ["--names", _names_file(area, rng, scratch, index)]
    return argv + rng.choice([[], ["--json"], ["--wide"]])


def _series(command: str, area: dict[str, Path], rng: random.Random, model: str, out: Path, scratch: Path,
            index: int) -> list[str]:
    models = [model, rng.choice([str(area["model"]), str(area["narrow"]), model])]
    if command == "drift" and rng.random() < 0.3:
        models.append(str(area["model"]))
    argv = [command, *models, "--null-draws", _value(rng, ["4", "8"]), "--k", _value(rng, ["1", "2"])]
    for option, valid in (("--layers", ["0-1", "0", "1"]), ("--roles", ["q,k", "v,o", "gate"]),
                          ("--view", ["raw", "folded"]), ("--seed", ["0", "7"]), ("--max-memory", ["8G", "1K", "2M"])):
        if rng.random() < 0.3:
            argv += [option, _value(rng, valid, HOSTILE_INTS + HOSTILE_TEXT)]
    if rng.random() < 0.15:
        argv += ["--names", _names_file(area, rng, scratch, index)]
    return argv + _outputs(area, rng, out, ["--json-out", "--csv", "--plot"]) + rng.choice([[], ["--json"], ["--no-ov"]])


def _compress(command: str, area: dict[str, Path], rng: random.Random, model: str, out: Path, scratch: Path,
              index: int) -> list[str]:
    argv = ["compress", command, model, "--seq-len", _value(rng, ["8", "16"], HOSTILE_INTS + ["1000000000"], 0.85),
            "--eval-windows", _value(rng, ["1", "2"], p_valid=0.9)]
    if command == "prune":
        argv += ["--max-remove", _value(rng, ["1"], p_valid=0.9), "--methods", _value(rng, ["geom-v1", "geom-v1,angular"],
                                                                         HOSTILE_TEXT, 0.85),
                 "--random-seeds", _value(rng, ["2"], p_valid=0.9), "--null-draws", "2", "--k", _value(rng, ["1"], p_valid=0.9),
                 "--calib-windows", _value(rng, ["1", "2"], p_valid=0.9), "--greedy-windows", "1"]
    else:
        argv += ["--ratios", _value(rng, ["0.3", "0.2,0.4"], HOSTILE_TEXT + ["2", "-0.1", "nan"], 0.85),
                 "--methods", _value(rng, ["svd-llm", "svd-llm,geodrift", "basis-sharing,theory"], HOSTILE_TEXT, 0.85),
                 "--calib-windows", _value(rng, ["8"], HOSTILE_INTS, 0.9), "--greedy-windows", "1",
                 "--select-windows", _value(rng, ["0", "1"], p_valid=0.9), "--verdict-ratio", "0"]
    if rng.random() < 0.25:
        argv += ["--corpus", str(rng.choice([area["root"] / n for n in ("corpus.txt", "empty.txt", "binary.txt",
                                                                         "fifo", "nope.txt")] + [area["mine"]]))]
    if rng.random() < 0.5:
        argv += ["--save", str(rng.choice([out / "saved", area["model"], area["model"].parent, area["mine"],
                                           area["ours"], area["root"], area["mine"] / "figures"]))]
        argv += rng.choice([[], ["--force"]])
    if rng.random() < 0.2:
        argv += ["--max-memory", _value(rng, ["8G", "1M"], HOSTILE_TEXT)]
    return argv + _outputs(area, rng, out, ["--json-out", "--csv", "--plot"])


def _sweep(command: str, area: dict[str, Path], rng: random.Random, model: str, out: Path, scratch: Path,
           index: int) -> list[str]:
    # The grid is checked whole, then --workers 0 stops the sweep before any run: the grid checks are fuzzed,
    # not the training; a valid grid reaches the --workers refusal.
    grid = _grid_file(rng, scratch, index, area)
    target = rng.choice([out / "runs", area["mine"], area["ours"], area["model"]])
    return ["sweep", grid, "--out", str(target), "--workers", "0"] + rng.choice([[], ["--force"], ["--resume"]])


def _grid_file(rng: random.Random, scratch: Path, index: int, area: dict[str, Path]) -> str:
    grid: dict[str, Any] = {"sim": "mlp", "name": "fuzz", "seeds": [1], "steps": 2,
                            "configs": [{"base": "smoke", "train": {"lr": 0.001}, "track": {"every": 1},
                                         "model": {"d_model": 16}}]}
    config = grid["configs"][0]
    places = [(grid, "sim"), (grid, "seeds"), (grid, "steps"), (grid, "data"), (grid, "name"), (grid, "configs"),
              (grid, "preset"), (config, "base"), (config, "label"), (config["train"], "lr"),
              (config["train"], "batch_size"), (config["track"], "every"), (config["track"], "ema_betas"),
              (config["model"], "d_model"), (config["model"], "activation"), (config, "ablations"),
              (config["model"], "banana"), (grid, "unknown")]
    for _ in range(rng.randint(0, 3)):
        table, key = rng.choice(places)
        table[key] = rng.choice([0, -1, 2**70, 1.5, float("inf"), "fast", "", None, True, [], [1, "x"], {"a": 1},
                                 "[/]", "mnist5k", "digits", str(area["root"] / "fifo"), "smoke", "nores",
                                 ["none"], [0.5], 10**12, "softmax", "relu"])
    fmt = rng.choice(["toml", "json", "json"])
    path = scratch / f"grid{index}.{fmt}"
    roll = rng.random()
    if roll < 0.08:
        path.write_bytes(rng.choice([b"\xff\xfe", b"[" * 50_000, b"{" * 5000, b"sim = 'mlp'\n" * 200_000]))
    elif roll < 0.12:
        return str(rng.choice([area["root"] / "fifo", area["mine"], scratch / "missing.toml"]))
    else:
        grid = {k: v for k, v in grid.items() if v is not None}
        if fmt == "json":
            path.write_text(json.dumps(grid, default=str))
        else:
            path.write_text(toml_text(grid))
    return str(path)


def run_case(case: Case) -> tuple[str, str | None]:
    """Run one command line in-process; ``(outcome, finding or None)``.

    Outcomes: ``ok`` (exit 0), ``error`` (exit 2, one ``error:`` line), and the findings
    ``exit:<code>``, ``multiline-error``, ``traceback:<Type>@<file>``, ``nonfinite-success`` (a scan's report holding
    non-finite numbers); a Python call (``case.python``) as :func:`_fuzz_python.run_python_case`.
    """
    if case.python is not None:
        return run_python_case(case.python)
    out, err = io.StringIO(), io.StringIO()
    code: Any = 0
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                main(case.argv)
            except SystemExit as done:
                code = done.code
    except Exception as error:  # the findings the harness exists for
        lines = traceback.format_exception(type(error), error, error.__traceback__)
        return traceback_outcome(error), f"{case.argv}: {''.join(lines[-3:]).strip()}"
    text = err.getvalue()
    if code in (0, None):
        if "--json" in case.argv and case.argv[0] == "scan" and not case.undefined_ok and \
                "nonfinite" in json.loads(out.getvalue() or "{}"):
            return "nonfinite-success", f"{case.argv}: the report holds non-finite numbers"
        if case.must_fail:
            return "collision-accepted", f"{case.argv}: two outputs name one file, and the run exited 0"
        if "--json-out" in case.argv and case.argv[0] in ("scan", "drift", "compare"):
            written = Path(case.argv[case.argv.index("--json-out") + 1])
            finding = read_back(written) if written.is_file() else None
            if finding is not None:
                return "readback-failed", finding
        return "ok", None
    lines = [line for line in text.splitlines() if line.strip()]
    if code == 2 and len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in text:
        return "error", None
    kind = "multiline-error" if code == 2 else f"exit:{code}"
    return kind, f"{case.argv}: exit {code}, stderr {text[-600:]!r}"


def clean_outputs(root: Path, before: dict[str, str]) -> None:
    """Delete what the case created under ``root`` (files not in ``before``), never a file that was there."""
    for path in sorted(root.rglob("*"), key=lambda p: len(p.parts), reverse=True):
        if path.is_file() and str(path) not in before and not path.is_symlink():
            path.unlink()
        elif path.is_dir() and not path.is_symlink() and str(path) not in before and not any(path.iterdir()) and \
                path.name.startswith((".", "out", "m", "saved", "runs")) and path.name not in ("mine", "models"):
            path.rmdir()


class _Hang(BaseException):
    pass


def _alarm(signum, frame):  # type: ignore[no-untyped-def]
    raise _Hang()


def run_cases(area: dict[str, Path], count: int, seed: int, scratch: Path, timeout_s: int,
              first: int = 0) -> tuple[Outcomes, int, Counter[str]]:
    """``count`` cases (seeded): their outcomes, how many cases changed or deleted a file of the user's area,
    and the outcomes per command (``"inspect error"``).

    The user's area is every file and folder under ``area["root"]`` except the folders geodrift wrote before
    (``area["ours"]``, which ``--force`` may replace; ``area["mixed"]``'s own files - the user's things put there
    are guarded: tests/_fuzz_classes.guarded). Files a case creates there (a ``--json-out``
    beside the user's notes) are removed after it, so each case starts from the same area.
    """
    rng = random.Random(seed)
    outcomes, changed, per_command = Outcomes(), 0, Counter[str]()
    baseline = snapshot(area["root"])
    mine = guarded(area, baseline)
    previous = signal.signal(signal.SIGALRM, _alarm)
    try:
        for index in range(first, first + count):
            case = make_case(area, rng, index, scratch)
            before = snapshot(scratch)
            signal.alarm(timeout_s)
            try:
                outcome, finding = run_case(case)
            except _Hang:
                outcome, finding = "hang", f"{case.argv}: no outcome within {timeout_s} s"
            finally:
                signal.alarm(0)
            outcomes.add(outcome, finding)
            per_command[f"{case.how} {outcome}"] += 1
            now = snapshot(area["root"])
            lost = [k for k, digest in mine.items() if now.get(k) != digest]
            if lost:
                changed += 1
                what = case.python.text if case.python is not None else case.argv
                outcomes.add("user-file-changed", f"{what}: changed or deleted {lost[:3]}")
                mine = {k: v for k, v in mine.items() if k not in lost}
            clean_outputs(scratch, before)
            clean_outputs(area["root"], {k: v for k, v in now.items() if k in baseline or
                                         k.startswith((str(area["ours"]), str(area["mixed"])))})
    finally:
        signal.signal(signal.SIGALRM, previous)
    return outcomes, changed, per_command
