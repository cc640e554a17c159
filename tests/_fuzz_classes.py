"""The fuzz classes of issue 39, added to the commands fuzz (tests/_fuzz_commands.py):

- degenerate weights: a V head of all zeros (pruned heads), an embedding wider than the projections, an embedding
  of rank 1, a layer of all-zero projections - through the default (canonical) view, ``--full``, and ``compare`` /
  ``drift --align`` with ``--head-maps general`` and ``shared``;
- non-finite weights: NaN, +Inf and -Inf in a safetensors folder and a GGUF file, with and without
  ``--skip-nonfinite``;
- colliding outputs: two outputs of one run naming the same file, named or derived (``--plot f.png --json-out
  f_trajectory.png``, ``--csv s.csv --json-out s.pairs.csv``, ``--save D --json-out D``): exit 0 is a finding;
- user files named like geodrift's own: ``.backup.20240101.tmp``, a temporary name with a token no run listed, a
  ``.geodrift-written`` that is not a manifest, empty folders the user made - inside the user's folders and
  inside a folder geodrift wrote, under ``--force``;
- Python inputs: state dicts of numpy arrays, lists, tuples, float16 arrays, strings and ragged lists; path-like
  objects and bytes paths (``geodrift.scan``, ``load_factored``, ``geodrift.read``); callbacks of the wrong
  signature; unknown architectures; ``geodrift.read`` of the user's files and of what a scan wrote.
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path
from typing import Any

import numpy as np
import torch
from _checkpoints import (
    hf_config,
    hf_to_gguf_tensors,
    llama_metadata,
    llama_state,
    write_gguf,
    write_hf_folder,
)

# A token no run of geodrift listed: a user's file of this temporary-looking name is the user's.
FOREIGN_TOKEN = "0123456789abcdef"
USER_LOOKALIKES = [".backup.20240101.tmp", f".report.json.gd-{FOREIGN_TOKEN}.abcd_123.tmp", ".space.a1b2c3d4.tmp"]
USER_FOLDERS = ["keep_me", "later"]  # empty folders the user made (no prefix the harness's clean-up removes)


def build_more(root: Path, model: Path) -> dict[str, Path]:
    """Degenerate and non-finite models, and the user's look-alike files and empty folders, beside the area."""
    from geodrift.io.outdir import replace_folder

    base = llama_state(2, 32, 4, 2, 48, vocab=512, seed=1)
    config = hf_config(n_layers=2, d=32, vocab=512)
    made: dict[str, Path] = {}
    variants: dict[str, dict[str, torch.Tensor]] = {}
    zero_head = {k: v.clone() for k, v in base.items()}
    for layer in range(2):
        zero_head[f"model.layers.{layer}.self_attn.v_proj.weight"][:8] = 0  # KV head 0 pruned
    variants["zero_head"] = zero_head
    variants["wide_embed"] = {**base, "model.embed_tokens.weight": torch.randn(50, 33)}
    variants["rank1_embed"] = {**base, "model.embed_tokens.weight": torch.outer(torch.randn(512), torch.randn(32))}
    zero_layer = dict(base)
    for name in [n for n in base if n.startswith("model.layers.1.") and n.endswith("proj.weight")]:
        zero_layer[name] = torch.zeros_like(base[name])
    variants["zero_layer"] = zero_layer
    (root / "models").mkdir(parents=True, exist_ok=True)
    for kind, value in (("nan", float("nan")), ("inf", float("inf")), ("ninf", float("-inf"))):
        state = {k: v.clone() for k, v in base.items()}
        state["model.layers.1.mlp.up_proj.weight"][3, 5] = value
        variants[kind] = state
        made[f"{kind}_gguf"] = write_gguf(root / "models" / f"{kind}.gguf", "llama",
                                          hf_to_gguf_tensors(state, "llama", 4, 2), llama_metadata(2, 32, 4, 2, 48))
    for name, state in variants.items():
        made[name] = write_hf_folder(root / "models" / name, state, config, dtype=torch.float32)
    mine = root / "mine"
    for name in USER_LOOKALIKES:
        (mine / name).write_text("the user's " + name)
    (mine / "figures" / ".geodrift-written").write_text("the user's notes, not a manifest\n")
    for name in USER_FOLDERS:
        (mine / name).mkdir()
    # A folder geodrift wrote, into which the user put an empty folder and a temporary-looking file: refused,
    # --force or not (a save replaces the whole folder); "ours" stays geodrift's alone and may be replaced.
    mixed = replace_folder(root / "mixed", lambda d: (d / "config.json").write_text("{}"), force=False)
    (mixed / "keep_me").mkdir()
    (mixed / ".backup.20240101.tmp").write_text("the user's")
    made["mixed"] = mixed
    return made


class PathLike:
    """A path-like object of another library (any ``os.PathLike``)."""

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)

    def __fspath__(self) -> str:
        return self.path

    def __repr__(self) -> str:
        return f"PathLike({self.path!r})"


# Finite weights whose numbers are undefined (an all-zero head or layer): reported as null with a note, by design.
UNDEFINED_NUMBERS = ("zero_head", "wide_embed", "rank1_embed", "zero_layer")
# The user's things inside the folder geodrift wrote ("mixed"): guarded like every other file of the user's area.
MIXED_USERS = ("keep_me", ".backup.20240101.tmp")


# Where issue 39's item 3 lives (alignment and the canonical view on degenerate weights: the continuity engineer's).
ITEM_3_FILES = ("geodrift/gauge/align.py", "geodrift/gauge/basis.py", "geodrift/gauge/canonical.py",
                "geodrift/gauge/orbit.py")


def traceback_outcome(error: BaseException) -> str:
    """``traceback:<Type>@<the deepest geodrift file>``: the outcome key of an exception that escaped, so a run's
    counts say where each kind of traceback comes from (and which are item 3's)."""
    import traceback

    frames = [f.filename for f in traceback.extract_tb(error.__traceback__) if "/geodrift/" in f.filename]
    where = "geodrift/" + frames[-1].split("/geodrift/", 1)[1] if frames else "outside geodrift"
    return f"traceback:{type(error).__name__}@{where}"


def is_item_3(outcome: str) -> bool:
    """The outcome is a traceback from item 3's code (``traceback_outcome``)."""
    return outcome.startswith("traceback:") and outcome.endswith(ITEM_3_FILES)


def guarded(area: dict[str, Path], snapshot: dict[str, str]) -> dict[str, str]:
    """The user's files and folders in ``snapshot``: all but geodrift's own folders (``ours``, which ``--force`` may
    replace, and ``mixed``'s own files and manifest, which a run may append to) - the user's things in ``mixed`` are."""
    mine_in_mixed = {str(area["mixed"] / name) for name in MIXED_USERS}
    return {k: v for k, v in snapshot.items() if not k.startswith(str(area["ours"]))
            and (not k.startswith(str(area["mixed"]) + os.sep) or k in mine_in_mixed)}


def degenerate_argv(area: dict[str, Path], rng: random.Random, out: Path) -> tuple[list[str], bool]:
    """scan / compare / drift on a degenerate or non-finite model, in the views that reach the gauge code; and
    whether its numbers may be undefined (finite degenerate weights, not corrupt ones)."""
    which = rng.choice([*UNDEFINED_NUMBERS, "nan", "inf", "ninf", "nan_gguf", "inf_gguf", "ninf_gguf"])
    sick = str(area[which])
    return _degenerate_argv(area, rng, out, sick), which in UNDEFINED_NUMBERS


def _degenerate_argv(area: dict[str, Path], rng: random.Random, out: Path, sick: str) -> list[str]:
    command = rng.choice(["scan", "scan", "compare", "drift"])
    fast = ["--k", rng.choice(["1", "2"]), "--null-draws", "4", "--quiet"]
    if command == "scan":
        argv = ["scan", sick, *fast] + rng.choice([[], ["--full"], ["--view", "raw"], ["--view", "folded"],
                                                   ["--view", "canonical"]])
        if rng.random() < 0.5:
            argv.append("--skip-nonfinite")
        if rng.random() < 0.5:
            argv += ["--json-out", str(out / "r.json")]
        return argv + rng.choice([["--json"], []])
    pair = [str(area["model"]), sick] if rng.random() < 0.7 else [sick, str(area["model"])]
    argv = [command, *pair, *fast]
    if rng.random() < 0.7:
        argv += ["--align", "--head-maps", rng.choice(["general", "orthogonal"])]
    return argv + rng.choice([["--json"], [], ["--view", "raw"]])


def collision_argv(area: dict[str, Path], rng: random.Random, out: Path) -> list[str]:
    """One run whose outputs name one file twice (named or derived): must be refused, never exit 0."""
    model = str(area["model"])
    fast = ["--k", "1", "--null-draws", "4", "--quiet"]
    o = str(out)
    return rng.choice([
        ["scan", model, *fast, "--plot", f"{o}/f.png", "--json-out", f"{o}/f_trajectory.png"],
        ["scan", model, *fast, "--plot", f"{o}/f.svg", "--json-out", f"{o}/f_experts.svg"],
        ["scan", model, *fast, "--csv", f"{o}/s.csv", "--json-out", f"{o}/s.pairs.csv"],
        ["scan", model, *fast, "--json-out", f"{o}/r.csv", "--csv", f"{o}/r.csv"],
        ["scan", model, *fast, "--json-out", f"{o}/x.png", "--plot", f"{o}/./x.png"],
        ["drift", model, model, *fast, "--plot", f"{o}/d.png", "--json-out", f"{o}/d_rotation.png"],
        ["drift", model, model, *fast, "--csv", f"{o}/d.csv", "--json-out", f"{o}/d.rotation.csv"],
        ["compare", model, model, *fast, "--csv", f"{o}/c.json", "--json-out", f"{o}/c.json"],
        ["compress", "share", model, "--seq-len", "8", "--ratios", "0.3", "--methods", "svd-llm",
         "--save", f"{o}/saved", "--json-out", f"{o}/saved"],
    ])


def force_argv(area: dict[str, Path], rng: random.Random, out: Path) -> list[str]:
    """--force onto folders holding the user's look-alike files and folders (refused; nothing of theirs goes)."""
    target = str(rng.choice([area["mine"], area["mixed"], area["mine"] / "figures"]))
    model = str(area["model"])
    return rng.choice([
        ["compress", "prune", model, "--seq-len", "8", "--max-remove", "1", "--methods", "geom-v1", "--random-seeds",
         "2", "--null-draws", "2", "--k", "1", "--calib-windows", "1", "--eval-windows", "1", "--save", target,
         "--force", "--quiet"],
        ["simulate", "mlp", "--preset", "smoke", "--steps", "1", "--out", target, "--force", "--quiet"],
        ["simulate", "mlp", "--preset", "smoke", "--steps", "1", "--plot", target, "--force", "--quiet"],
    ])


def state_dict_variant(rng: random.Random, state: dict[str, torch.Tensor]) -> dict[str, Any]:
    """The state dict with some values as numpy arrays, lists, tuples or float16 arrays - or junk at a weight."""
    out: dict[str, Any] = dict(state)
    for name in rng.sample(sorted(state), k=min(len(state), rng.randint(1, 6))):
        t, pick = state[name], rng.randrange(5)  # the draw rng.choice of 5 makes
        if not isinstance(t, torch.Tensor):  # already odd ("not a tensor"): kept as it is
            continue
        out[name] = _as_other(t, pick)
    if rng.random() < 0.25:
        name = "model.layers.1.self_attn.k_proj.weight"
        out[name] = rng.choice(["junk", [[1.0, 2.0], [3.0]], np.array([["a"]]), None, {"w": 1}, np.float32(2.0)])
    if rng.random() < 0.2:
        out["step"] = rng.choice([np.int64(5), 5, "5", [5]])
    return out


def _as_other(t: torch.Tensor, pick: int) -> Any:
    # A tensor as a numpy array, a list, a float16 or float64 array, or a tuple (1-D) / list
    if pick == 0:
        return t.numpy()
    if pick in (1, 4):
        return tuple(t.reshape(-1).tolist()) if pick == 4 and t.dim() == 1 else t.tolist()
    return t.numpy().astype(np.float16 if pick == 2 else np.float64)


def path_variant(rng: random.Random, path: Any) -> Any:
    """``path`` as given, as a path-like object, or as bytes."""
    if not isinstance(path, (str, Path)):
        return path
    return rng.choice([path, PathLike(path), os.fsencode(str(path))])


def read_target(area: dict[str, Path], rng: random.Random, out: Path) -> Any:
    """What geodrift.read is given: the user's files, folders, FIFOs, odd objects, a path-like."""
    return path_variant(rng, rng.choice([area["mine"] / "report.json", area["mine"] / "notes.txt", area["mine"],
                                         area["root"] / "fifo", area["root"] / "binary.txt", out / "missing.json",
                                         area["model"] / "config.json", area["ours"] / "config.json",
                                         {"schema_version": "1.2", "kind": "continuity_report", "roles": [{}]},
                                         {"schema_version": "7.0", "kind": "inventory"}, [1, 2], 3]))


def callback_variant(rng: random.Random) -> Any:
    """A progress callback: right, or of the wrong signature."""
    return rng.choice([None, print, lambda label: None, lambda: None, lambda a, b: None, lambda *a: None, len])


def read_back(path: Path) -> str | None:
    """None when geodrift.read gives back the JSON a command wrote at ``path``, else the finding."""
    import geodrift
    from geodrift.errors import GeodriftError
    from geodrift.io.atomic import document, to_json

    try:
        obj = geodrift.read(path)
    except GeodriftError as error:
        return f"{path}: geodrift.read refused what geodrift wrote: {error}"
    written = json.loads(path.read_text())
    again = json.loads(to_json(document(written["kind"], obj.to_dict()))) if hasattr(obj, "to_dict") else obj
    return None if again == written else f"{path}: read back, it differs from the file"


def toml_text(grid: dict[str, Any]) -> str:
    """Enough TOML for the fuzz: top-level scalars/lists, then [[configs]] with inline tables (unwritable values
    as text)."""
    def value(v: Any) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, (int, float)) and v == v and abs(v) != float("inf"):
            return repr(v)
        if isinstance(v, list):
            return "[" + ", ".join(value(x) for x in v if x is not None) + "]"
        if isinstance(v, dict):
            return "{ " + ", ".join(f"{k} = {value(x)}" for k, x in v.items() if x is not None) + " }"
        return json.dumps(str(v))

    lines = [f"{k} = {value(v)}" for k, v in grid.items() if k != "configs"]
    configs = grid.get("configs")
    for entry in configs if isinstance(configs, list) else []:
        lines.append("[[configs]]")
        if isinstance(entry, dict):
            lines += [f"{k} = {value(v)}" for k, v in entry.items() if v is not None]
    return "\n".join(lines) + "\n"
